#include "runtime/default_model.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <vector>

#include "core/error.h"

#ifndef DSV4_MODELS_DIR
#define DSV4_MODELS_DIR ""
#endif

namespace dsv4 {

namespace {
const char* kModelFile = "dsv4-tiny.gguf";

bool exists(const std::string& p) { return access(p.c_str(), R_OK) == 0; }

std::string exe_dir() {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return {};
    std::string p(buf, size_t(n));
    return p.substr(0, p.rfind('/'));
}
}  // namespace

std::string default_model_path() {
    if (const char* env = std::getenv("DSV4_MODEL"); env && *env) {
        if (!exists(env)) throw UsageError(cat("DSV4_MODEL=", env, ": no such file"));
        return env;
    }
    std::vector<std::string> tried;
    std::string dir = exe_dir();
    if (!dir.empty()) {
        tried.push_back(dir + "/../models/" + kModelFile);
        tried.push_back(dir + "/../share/dsv4/" + kModelFile);
    }
    if (*DSV4_MODELS_DIR) tried.push_back(std::string(DSV4_MODELS_DIR) + "/" + kModelFile);
    for (const std::string& p : tried)
        if (exists(p)) return p;
    std::string list;
    for (const std::string& p : tried) list += (list.empty() ? "" : ", ") + p;
    throw UsageError(cat("no --model given and the embedded default model was not found (looked at ", list,
                         "; set DSV4_MODEL or pass --model)"));
}

std::string model_path_or_default(const std::string& given) {
    return given.empty() ? default_model_path() : given;
}

}  // namespace dsv4
