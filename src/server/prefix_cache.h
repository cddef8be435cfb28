// Prefix cache: finished sessions are kept, bounded by a byte budget, so that a request whose
// prompt extends what a cached session already holds skips prefilling those tokens (a chat's
// next turn resends the whole conversation; an agent resends its long system prompt and tools).
//
// An entry can serve a prompt at exactly two points, because a State can only move forward or
// back to a mark of its own:
//   - everything it holds, when that is a prefix of the prompt (continue as is);
//   - its mark, when the tokens up to the mark are a prefix of the prompt (rewind, then
//     continue). The scheduler marks every session one token before the end of its prompt, so
//     the next turn of a conversation, which repeats that prompt and adds the reply and a new
//     user turn, hits even though the reply was re-tokenized differently or the template closed
//     the thinking block differently.
// take() hands the entry out (a session serves one request at a time); the scheduler puts it
// back when the request is done. Least recently used entries go first when over the byte budget
// or the entry limit (each entry is a whole session: bounding the count keeps a server that saw
// many one-off prompts from holding memory for all of them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace dsv4::server {

struct Reuse {
    size_t tokens = 0;    // prompt tokens the entry already holds
    bool rewind = false;  // true: rewind to the mark first
};

// The rule above for one entry holding `held`, marked at `mark` tokens (if any). The prompt must
// keep at least one token to prefill after a rewind (a rewound state has no logits to sample
// from), and the reuse is 0 when neither point applies.
Reuse reusable(std::span<const int32_t> held, std::optional<size_t> mark, std::span<const int32_t> prompt);

template <class T>
class PrefixCache {
public:
    PrefixCache(size_t budget_bytes, size_t max_entries) : budget_(budget_bytes), max_entries_(max_entries) {}

    struct Taken {
        T value;
        Reuse reuse;
        size_t held = 0;  // tokens the entry held
    };

    // Removes and returns the entry that serves the most tokens of prompt (the most recent one
    // on a tie); nullopt when none serves any.
    std::optional<Taken> take(std::span<const int32_t> prompt) {
        std::lock_guard<std::mutex> lk(m_);
        auto best = entries_.end();
        Reuse best_reuse;
        for (auto it = entries_.begin(); it != entries_.end(); ++it) {  // most recent first
            Reuse r = reusable(it->tokens, it->mark, prompt);
            if (r.tokens > best_reuse.tokens) {
                best = it;
                best_reuse = r;
            }
        }
        if (best == entries_.end()) return std::nullopt;
        Taken t{std::move(best->value), best_reuse, best->tokens.size()};
        bytes_ -= best->bytes;
        entries_.erase(best);
        return t;
    }

    // Adds an entry (the most recent); evicts from the least recent until the budget holds.
    // An entry larger than the whole budget is not kept. Returns how many entries were evicted.
    size_t put(std::vector<int32_t> tokens, std::optional<size_t> mark, size_t bytes, T value) {
        std::lock_guard<std::mutex> lk(m_);
        size_t evicted = 0;
        if (bytes > budget_ || tokens.empty() || max_entries_ == 0) {
            ++evictions_;
            return 1;
        }
        while (!entries_.empty() && (bytes_ + bytes > budget_ || entries_.size() >= max_entries_)) {
            bytes_ -= entries_.back().bytes;
            entries_.pop_back();
            ++evicted;
        }
        entries_.push_front(Entry{std::move(tokens), mark, bytes, std::move(value)});
        bytes_ += bytes;
        evictions_ += evicted;
        return evicted;
    }

    void clear() {
        std::lock_guard<std::mutex> lk(m_);
        entries_.clear();
        bytes_ = 0;
    }

    size_t bytes() const {
        std::lock_guard<std::mutex> lk(m_);
        return bytes_;
    }
    size_t size() const {
        std::lock_guard<std::mutex> lk(m_);
        return entries_.size();
    }
    uint64_t evictions() const {
        std::lock_guard<std::mutex> lk(m_);
        return evictions_;
    }
    size_t budget() const { return budget_; }
    size_t max_entries() const { return max_entries_; }

private:
    struct Entry {
        std::vector<int32_t> tokens;
        std::optional<size_t> mark;
        size_t bytes = 0;
        T value;
    };
    const size_t budget_;
    const size_t max_entries_;
    mutable std::mutex m_;
    std::list<Entry> entries_;  // most recent first
    size_t bytes_ = 0;
    uint64_t evictions_ = 0;
};

}  // namespace dsv4::server
