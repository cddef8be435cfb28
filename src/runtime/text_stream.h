// Turns the bytes of generated tokens into text that is safe to show as it streams: a token
// may end inside a UTF-8 character, and the end of the text so far may be the start of a stop
// string, so both are held back until the next bytes decide them.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

class TextStream {
public:
    explicit TextStream(std::vector<std::string> stops = {});

    // Appends bytes; returns the text that is now final. Once a stop string is complete,
    // stopped() is true and nothing from the stop string on is ever returned.
    std::string push(std::string_view bytes);
    // The end of generation: returns what was held back (an incomplete UTF-8 sequence at the
    // very end becomes U+FFFD).
    std::string finish();

    bool stopped() const { return stopped_; }
    const std::string& stop_found() const { return stop_found_; }  // which stop string

private:
    std::vector<std::string> stops_;
    std::string held_;  // bytes not yet returned
    bool stopped_ = false;
    std::string stop_found_;
};

}  // namespace dsv4
