// dsv4 eval retrieval's engine: a long prompt of filler text with N facts
// "The code for {Name} is {5-digit code}." hidden at spread positions, then questions
// "Question: What is the code for {Name}?\nAnswer: " (the format the embedded model was trained
// on, scripts/gpu/train_tiny.py), graded strictly: a trial passes only when all N answers are
// exactly the code. Everything is a function of the seed (portable RNG, no std distributions).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct RetrievalData {
    std::vector<std::string> names;  // held-out first names, one a line
    std::vector<std::string> docs;   // filler documents (separated by a line holding only U+001E)
};
// Throws dsv4::Error naming the file when it is missing or empty.
RetrievalData load_retrieval_data(const std::string& names_path, const std::string& filler_path);

// A deterministic random stream: mt19937_64 (its output is fixed by the standard) with the
// draws done by hand, so that a seed gives the same task on every platform.
class PortableRng {
public:
    explicit PortableRng(uint64_t seed) : g_(seed) {}
    double uniform();                           // [0, 1)
    uint64_t below(uint64_t n);                 // [0, n), n > 0
    int64_t range(int64_t lo, int64_t hi);      // [lo, hi] inclusive

private:
    std::mt19937_64 g_;
};

struct RetrievalTask {
    std::string body;                 // filler with the facts in it
    std::vector<std::string> names;   // fact i: names[i], codes[i], in text order
    std::vector<std::string> codes;
    std::vector<size_t> fact_offsets; // character offset of each fact in body
    std::vector<int> order;           // the order questions are asked in (a permutation)
};

// n_keys distinct names, 5-digit codes, fact positions uniform in the first 92% of a filler of
// about filler_chars characters, inserted at the next sentence or line boundary (as in training).
RetrievalTask build_task(const RetrievalData& data, int n_keys, size_t filler_chars, uint64_t seed);

std::string question_text(const std::string& name);  // "Question: What is the code for N?\nAnswer: "

// Strict grading of one generated answer: the text up to the first newline, without
// surrounding spaces, must be exactly the code.
bool answer_correct(const std::string& generated, const std::string& code);
std::string answer_text(const std::string& generated);  // what answer_correct compares

struct RetrievalTrial {
    uint64_t seed = 0;
    int64_t prompt_tokens = 0;   // filler + facts + "\n\n" + one question (what each answer sees)
    int64_t shared_tokens = 0;   // the prefix prefilled once for all questions
    std::vector<std::string> answers;  // per question, in asking order
    std::vector<bool> correct;
    // per question: tokens from its fact's first token to the answer (the prompt's end); facts
    // further back than the sliding window reach the answer only through compressed attention
    std::vector<int64_t> distance_tokens;
    int n_correct = 0;
    bool pass = false;           // all N exact
    std::string output_sha256;   // of "name\tanswer\n" per question, in asking order
    double prefill_s = 0;        // the shared prefix
    double answer_s = 0;         // the questions (their prefill and decode)
};

// Builds the prompt token ids: the body (with BOS when the tokenizer wants it) + "\n\n" +
// question i. Prefills the part common to all questions once, then asks each question from a
// mark of the session (so answers are independent of each other), greedy, at most
// max_answer_tokens tokens, stopping at a newline.
RetrievalTrial run_trial(Session& session, const Tokenizer& tok, const RetrievalTask& task, uint64_t seed,
                         int64_t max_answer_tokens = 12);

// Builds a task whose longest prompt is at most target_tokens tokens and close to it (the
// filler is resized from the measured characters per token, a few times at most).
RetrievalTask build_task_for_tokens(const RetrievalData& data, const Tokenizer& tok, int n_keys,
                                    int64_t target_tokens, uint64_t seed);

}  // namespace dsv4
