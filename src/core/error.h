// Errors: one exception type whose message names the problem (file, tensor, field, value).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace dsv4 {

// A runtime failure (bad file, bad value, resource problem): exit status 1.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Bad command-line arguments: exit status 2.
struct UsageError : Error {
    using Error::Error;
};

template <class... Parts>
std::string cat(const Parts&... parts) {
    std::ostringstream s;
    (s << ... << parts);
    return s.str();
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
    throw Error(cat(parts...));
}

}  // namespace dsv4
