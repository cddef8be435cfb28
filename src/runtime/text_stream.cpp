#include "runtime/text_stream.h"

#include <algorithm>

namespace dsv4 {

namespace {
// Length of a trailing UTF-8 sequence that is still missing continuation bytes (0 if none).
size_t incomplete_utf8_tail(const std::string& s) {
    size_t n = s.size();
    for (size_t back = 1; back <= 4 && back <= n; ++back) {
        unsigned char c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}
}  // namespace

TextStream::TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {
    stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string TextStream::push(std::string_view bytes) {
    if (stopped_) return {};
    held_.append(bytes);
    // A complete stop string: everything before its first occurrence is final.
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) {
        size_t at = held_.find(s);
        if (at != std::string::npos && at < cut) {
            cut = at;
            stop_found_ = s;
        }
    }
    if (cut != std::string::npos) {
        stopped_ = true;
        std::string out = held_.substr(0, cut);
        held_.clear();
        return out;
    }
    // Hold back the longest tail that is a proper prefix of some stop string...
    size_t keep = 0;
    for (const std::string& s : stops_)
        for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
            if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
                keep = k;
                break;
            }
    // ...and any unfinished UTF-8 character before that.
    std::string out = held_.substr(0, held_.size() - keep);
    size_t partial = incomplete_utf8_tail(out);
    out.resize(out.size() - partial);
    held_.erase(0, out.size());
    return out;
}

std::string TextStream::finish() {
    if (stopped_) return {};
    std::string out = std::move(held_);
    held_.clear();
    size_t partial = incomplete_utf8_tail(out);
    if (partial) out.replace(out.size() - partial, partial, "\xEF\xBF\xBD");
    return out;
}

}  // namespace dsv4
