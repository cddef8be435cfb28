// Token tapes: frozen token-id sequences that quality comparisons run on, so both arms (and
// every later run) see exactly the same input whatever the tokenizer does meanwhile.
//
// File format (*.tokens, text): an optional first line
//     # dsv4 tape v1 tokenizer=<fingerprint> vocab=<n> source=<file>
// then token ids separated by whitespace. The fingerprint names the tokenizer the ids came
// from, so a tape made with another tokenizer is refused instead of silently measuring noise.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct Tape {
    std::string name;        // file name without .tokens
    std::string path;
    std::string tokenizer;   // fingerprint from the header; "" when the file has none
    int64_t vocab = 0;       // from the header; 0 when none
    std::string source;      // from the header
    std::vector<int32_t> tokens;
};

// Throws dsv4::Error naming the file (and the bad word) on a malformed tape or one with no ids.
Tape read_tape(const std::string& path);
// Every *.tokens file of dir, by name. Throws UsageError when dir has none.
std::vector<Tape> read_tapes(const std::string& dir);
void write_tape(const std::string& path, const std::vector<int32_t>& ids, const std::string& fingerprint,
                int64_t vocab, const std::string& source);

// 16 hex digits of SHA-256 over the tokenizer's tokens and merges.
std::string tokenizer_fingerprint(const Tokenizer& tok);

// Throws dsv4::Error when the tape cannot be fed to a model of this vocabulary, or names a
// tokenizer other than `fingerprint` (skipped when either side has none).
void check_tape(const Tape& t, int64_t vocab, const std::string& fingerprint);

}  // namespace dsv4
