// The merge loop of Hugging Face tokenizers' Word::merge_all: a min-heap of candidate merges
// ordered by (rank, position), the word as a doubly linked list of symbols; an entry whose
// pair changed since it was queued is skipped when popped. The lowest rank merges first and,
// among equal ranks, the leftmost, which is what makes "aaa" become "aa" + "a".
#include "tokenizer/bpe.h"

#include <queue>

namespace dsv4 {

void BpeMerges::add(int32_t left, int32_t right, int32_t merged) {
    rank_.try_emplace(key(left, right), Merge{int32_t(rank_.size()), merged});
}

const BpeMerges::Merge* BpeMerges::find(int32_t left, int32_t right) const {
    auto it = rank_.find(key(left, right));
    return it == rank_.end() ? nullptr : &it->second;
}

void BpeMerges::apply(std::vector<int32_t>& symbols) const {
    const int32_t n = int32_t(symbols.size());
    if (n < 2) return;
    struct Symbol {
        int32_t id, prev, next;
        bool alive;
    };
    struct Candidate {
        int32_t rank, pos, merged;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::vector<Symbol> w(symbols.size());
    for (int32_t i = 0; i < n; ++i) w[size_t(i)] = {symbols[size_t(i)], i - 1, i + 1 < n ? i + 1 : -1, true};
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    const auto push_pair = [&](int32_t pos) {
        const Symbol& s = w[size_t(pos)];
        if (s.next < 0) return;
        if (const Merge* m = find(s.id, w[size_t(s.next)].id)) queue.push({m->rank, pos, m->merged});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

    while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        Symbol& s = w[size_t(top.pos)];
        if (!s.alive || s.next < 0) continue;
        Symbol& right = w[size_t(s.next)];
        const Merge* m = find(s.id, right.id);
        if (!m || m->merged != top.merged) continue;  // stale entry
        s.id = top.merged;
        right.alive = false;
        s.next = right.next;
        if (s.next >= 0) w[size_t(s.next)].prev = top.pos;
        if (s.prev >= 0) push_pair(s.prev);
        push_pair(top.pos);
    }
    symbols.clear();
    for (int32_t i = 0; i >= 0; i = w[size_t(i)].next) symbols.push_back(w[size_t(i)].id);
}

}  // namespace dsv4
