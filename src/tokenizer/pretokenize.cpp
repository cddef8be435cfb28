// DeepSeek-V3's pre-tokenizer, written as code instead of a regex engine so that it depends
// on no system library (and its Unicode version). The three Splits, each "Isolated" (every
// match becomes a piece and so does every gap between matches):
//
//   1. \p{N}{1,3}
//   2. [一-龥぀-ゟ゠-ヿ]+                      (U+4E00-U+9FA5, U+3040-U+309F, U+30A0-U+30FF)
//   3. [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
//      | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
//      |  ?[\p{P}\p{S}]+[\r\n]*
//      | \s*[\r\n]+
//      | \s+(?!\S)
//      | \s+
//
// Each Split sees one piece of the previous one as its whole subject, so lookahead stops at
// the piece's end. match_at() below gives, for each alternative in order, the length a
// backtracking regex engine would match, which is what makes the leftmost-first alternation
// and the greedy quantifiers come out the same.
#include "tokenizer/pretokenize.h"

#include <cstdint>

#include "tokenizer/unicode_class.h"
#include "tokenizer/utf8.h"

namespace dsv4 {

const char* const kDeepSeekV3SplitRegexes[3] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

namespace {

using unicode::CharClass;

// The text decoded once: code points, their classes, and their byte offsets.
struct Decoded {
    std::vector<uint32_t> cp;
    std::vector<CharClass> cls;
    std::vector<uint32_t> off;  // off[i] = byte offset of code point i; off[n] = text size

    explicit Decoded(std::string_view text) {
        cp.reserve(text.size());
        off.reserve(text.size() + 1);
        for (size_t i = 0; i < text.size();) {
            const utf8::Decoded d = utf8::decode(text, i);
            cp.push_back(d.cp);
            off.push_back(uint32_t(i));
            i += d.len;
        }
        off.push_back(uint32_t(text.size()));
        cls.reserve(cp.size());
        for (uint32_t c : cp) cls.push_back(unicode::char_class(c));
    }
};

struct Range {
    size_t begin, end;  // code point indices
};

bool is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF);
}
bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }
bool is_ascii_letter(uint32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
bool is_ascii_punct(uint32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}
bool is_letter_or_mark(CharClass k) { return k == CharClass::Letter || k == CharClass::Mark; }
bool is_punct_or_symbol(CharClass k) { return k == CharClass::Punct || k == CharClass::Symbol; }

// Split 1: runs of numbers cut into chunks of at most three, everything else between them.
void split_numbers(const Decoded& d, Range r, std::vector<Range>& out) {
    size_t i = r.begin;
    while (i < r.end) {
        size_t j = i;
        if (d.cls[i] == CharClass::Number) {
            while (j < r.end && j - i < 3 && d.cls[j] == CharClass::Number) ++j;
        } else {
            while (j < r.end && d.cls[j] != CharClass::Number) ++j;
        }
        out.push_back({i, j});
        i = j;
    }
}

// Split 2: runs of CJK ideographs and kana, everything else between them.
void split_cjk(const Decoded& d, Range r, std::vector<Range>& out) {
    size_t i = r.begin;
    while (i < r.end) {
        const bool cjk = is_cjk(d.cp[i]);
        size_t j = i + 1;
        while (j < r.end && is_cjk(d.cp[j]) == cjk) ++j;
        out.push_back({i, j});
        i = j;
    }
}

// Length (in code points) of the match of Split 3's regex starting at p within [p, end), or 0.
size_t match_at(const Decoded& d, size_t p, size_t end) {
    const auto letter_mark_run = [&](size_t i) {
        while (i < end && is_letter_or_mark(d.cls[i])) ++i;
        return i;
    };
    const uint32_t c0 = d.cp[p];
    const CharClass k0 = d.cls[p];
    const bool has1 = p + 1 < end;

    // [!"#...~][A-Za-z]+
    if (is_ascii_punct(c0) && has1 && is_ascii_letter(d.cp[p + 1])) {
        size_t i = p + 1;
        while (i < end && is_ascii_letter(d.cp[i])) ++i;
        return i - p;
    }
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ : first with the optional character, then without.
    if (!is_crlf(c0) && k0 != CharClass::Letter && !is_punct_or_symbol(k0) && has1 &&
        is_letter_or_mark(d.cls[p + 1]))
        return letter_mark_run(p + 1) - p;
    if (is_letter_or_mark(k0)) return letter_mark_run(p) - p;
    // ' '?[\p{P}\p{S}]+[\r\n]*
    {
        size_t i = p;
        if (c0 == ' ' && has1 && is_punct_or_symbol(d.cls[p + 1])) ++i;
        if (is_punct_or_symbol(d.cls[i])) {
            while (i < end && is_punct_or_symbol(d.cls[i])) ++i;
            while (i < end && is_crlf(d.cp[i])) ++i;
            return i - p;
        }
    }
    if (!unicode::is_whitespace(c0)) return 0;
    size_t ws_end = p;  // the whitespace run starting at p
    while (ws_end < end && unicode::is_whitespace(d.cp[ws_end])) ++ws_end;
    // \s*[\r\n]+ : the greedy \s* backs off to the run's last CR or LF.
    for (size_t i = ws_end; i > p; --i)
        if (is_crlf(d.cp[i - 1])) return i - p;
    // \s+(?!\S) : the whole run at the subject's end, else all of it but the last character.
    if (ws_end == end) return ws_end - p;
    if (ws_end - p >= 2) return ws_end - p - 1;
    // \s+
    return ws_end - p;
}

// Split 3: matches of the regex above and the gaps between them.
void split_words(const Decoded& d, Range r, std::vector<Range>& out) {
    size_t gap = r.begin;
    size_t p = r.begin;
    while (p < r.end) {
        const size_t n = match_at(d, p, r.end);
        if (n == 0) {
            ++p;
            continue;
        }
        if (gap < p) out.push_back({gap, p});
        out.push_back({p, p + n});
        p += n;
        gap = p;
    }
    if (gap < r.end) out.push_back({gap, r.end});
}

}  // namespace

void pretokenize_deepseek_v3(std::string_view text, std::vector<std::string_view>& out) {
    if (text.empty()) return;
    const Decoded d(text);
    std::vector<Range> a, b, c;
    split_numbers(d, {0, d.cp.size()}, a);
    for (Range r : a) split_cjk(d, r, b);
    for (Range r : b) split_words(d, r, c);
    for (Range r : c) out.push_back(text.substr(d.off[r.begin], d.off[r.end] - d.off[r.begin]));
}

}  // namespace dsv4
