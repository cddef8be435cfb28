#include "runtime/retrieval.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <set>

#include "core/error.h"
#include "runtime/generator.h"
#include "runtime/sha256.h"

namespace dsv4 {

namespace {
std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path, ": cannot open");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Filler of about n characters: from a random offset of a random document onwards, documents
// joined by a blank line, then cut to start after a line end and end before a space (as
// train_tiny.py's Synth.filler does).
std::string make_filler(const std::vector<std::string>& docs, size_t n, PortableRng& rng) {
    size_t d = size_t(rng.below(docs.size()));
    const std::string& first = docs[d];
    size_t span = first.size() - std::min(n, first.size() / 2);
    size_t start = size_t(rng.below(std::max<size_t>(1, span)));
    std::string text;
    size_t need = n;
    while (need > 0) {
        std::string piece = docs[d].substr(start, need);
        text += piece;
        need -= piece.size();
        d = (d + 1) % docs.size();
        start = 0;
        if (need > 0) {
            text += "\n\n";
            need = need > 2 ? need - 2 : 0;
        }
    }
    size_t nl = text.find('\n');
    if (nl != std::string::npos && nl < 400) text = text.substr(nl + 1);
    size_t from = text.size() > 200 ? text.size() - 200 : 0;
    size_t sp = text.rfind(' ');
    if (sp != std::string::npos && sp >= from && sp > 0) text.resize(sp);
    return text;
}

// The first sentence or line boundary at or after pos (within 400 characters), else pos.
size_t boundary_after(const std::string& s, size_t pos) {
    size_t lim = std::min(s.size(), pos + 400), best = std::string::npos;
    size_t j = s.find(". ", pos);
    if (j != std::string::npos && j < lim) best = j + 2;
    size_t k = s.find('\n', pos);
    if (k != std::string::npos && k < lim) best = std::min(best, k + 1);
    return best == std::string::npos ? pos : best;
}
}  // namespace

double PortableRng::uniform() { return double(g_() >> 11) * (1.0 / 9007199254740992.0); }

uint64_t PortableRng::below(uint64_t n) {
    if (n == 0) fail("PortableRng::below(0)");
    // Rejection sampling: no modulo bias.
    const uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
        uint64_t x = g_();
        if (x < lim) return x % n;
    }
}

int64_t PortableRng::range(int64_t lo, int64_t hi) { return lo + int64_t(below(uint64_t(hi - lo) + 1)); }

RetrievalData load_retrieval_data(const std::string& names_path, const std::string& filler_path) {
    RetrievalData d;
    std::set<std::string> seen;
    std::string names = read_all(names_path);
    for (size_t i = 0; i < names.size();) {
        size_t e = names.find('\n', i);
        if (e == std::string::npos) e = names.size();
        std::string n = names.substr(i, e - i);
        while (!n.empty() && (n.back() == '\r' || n.back() == ' ')) n.pop_back();
        if (!n.empty() && seen.insert(n).second) d.names.push_back(n);
        i = e + 1;
    }
    if (d.names.empty()) fail(names_path, ": no names");
    const std::string sep = "\n\x1e\n";
    std::string filler = read_all(filler_path);
    for (size_t i = 0; i < filler.size();) {
        size_t e = filler.find(sep, i);
        if (e == std::string::npos) e = filler.size();
        std::string doc = filler.substr(i, e - i);
        while (!doc.empty() && (doc.back() == '\n' || doc.back() == '\x1e')) doc.pop_back();
        if (!doc.empty()) d.docs.push_back(doc);
        i = e + sep.size();
    }
    if (d.docs.empty()) fail(filler_path, ": no filler text");
    return d;
}

std::string question_text(const std::string& name) { return "Question: What is the code for " + name + "?\nAnswer: "; }

std::string answer_text(const std::string& generated) {
    std::string a = generated.substr(0, generated.find('\n'));
    size_t b = a.find_first_not_of(' '), e = a.find_last_not_of(' ');
    return b == std::string::npos ? "" : a.substr(b, e - b + 1);
}

bool answer_correct(const std::string& generated, const std::string& code) { return answer_text(generated) == code; }

RetrievalTask build_task(const RetrievalData& data, int n_keys, size_t filler_chars, uint64_t seed) {
    if (n_keys < 1) throw UsageError(cat("--keys ", n_keys, ": need at least one key"));
    if (size_t(n_keys) > data.names.size())
        throw UsageError(cat("--keys ", n_keys, ": the names list has only ", data.names.size(), " names"));
    PortableRng rng(seed);
    RetrievalTask t;
    // n_keys distinct names: a partial Fisher-Yates shuffle of the indices.
    std::vector<size_t> idx(data.names.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    for (int i = 0; i < n_keys; ++i) std::swap(idx[size_t(i)], idx[size_t(i) + size_t(rng.below(idx.size() - size_t(i)))]);
    for (int i = 0; i < n_keys; ++i) {
        t.names.push_back(data.names[idx[size_t(i)]]);
        t.codes.push_back(std::to_string(rng.range(10000, 99999)));
    }
    std::vector<double> fracs;
    for (int i = 0; i < n_keys; ++i) fracs.push_back(rng.uniform() * 0.92);
    std::sort(fracs.begin(), fracs.end());
    for (int i = 0; i < n_keys; ++i) t.order.push_back(i);
    for (int i = n_keys - 1; i > 0; --i) std::swap(t.order[size_t(i)], t.order[size_t(rng.below(uint64_t(i) + 1))]);

    std::string filler = make_filler(data.docs, std::max<size_t>(filler_chars, 200), rng);
    size_t prev = 0;
    for (int i = 0; i < n_keys; ++i) {
        size_t p = std::max(boundary_after(filler, size_t(fracs[size_t(i)] * double(filler.size()))), prev);
        t.body += filler.substr(prev, p - prev);
        const bool at_line = p > 0 && filler[p - 1] == '\n';
        const bool glued = p > 0 && filler[p - 1] != ' ' && filler[p - 1] != '\n';
        if (glued) t.body += "\n";
        t.fact_offsets.push_back(t.body.size());
        t.body += "The code for " + t.names[size_t(i)] + " is " + t.codes[size_t(i)] + ".";
        t.body += at_line ? "\n" : " ";
        prev = p;
    }
    t.body += filler.substr(prev);
    while (!t.body.empty() && (t.body.back() == ' ' || t.body.back() == '\n')) t.body.pop_back();
    return t;
}

RetrievalTask build_task_for_tokens(const RetrievalData& data, const Tokenizer& tok, int n_keys, int64_t target,
                                    uint64_t seed) {
    if (target < 64) throw UsageError(cat("--tokens ", target, ": too short for a retrieval prompt (64 at least)"));
    const bool bos = tok.add_bos() && tok.bos_id() >= 0;
    const int64_t tol = std::max<int64_t>(16, target / 50);  // accept [target - tol, target]
    auto longest_prompt = [&](const RetrievalTask& t) {
        int64_t n = 0;
        for (const std::string& name : t.names)
            n = std::max(n, int64_t(tok.encode(t.body + "\n\n" + question_text(name), bos).size()));
        return n;
    };
    size_t chars = size_t(double(target) * 3.5);  // a first guess; then scaled by what it gave
    for (int attempt = 0;; ++attempt) {
        RetrievalTask t = build_task(data, n_keys, chars, seed);
        const int64_t n = longest_prompt(t);
        if (n <= target && (n >= target - tol || attempt >= 5)) return t;
        // A target this close to the facts' own length leaves the filler too little room to
        // hit: the caller's number, so a usage error that says what to change.
        if (attempt >= 7)
            throw UsageError(cat("--tokens ", target, ": could not size a prompt of ", n_keys,
                                 n_keys == 1 ? " key" : " keys", " to at most that (the closest had ", n,
                                 " tokens); give more tokens"));
        const int64_t body = int64_t(tok.encode(t.body, false).size()), overhead = n - body;
        const double want = double(target - overhead - tol / 2);
        if (want <= 0) throw UsageError(cat("--tokens ", target, ": too short for ", n_keys, " keys"));
        chars = size_t(std::max(200.0, double(chars) * want / double(std::max<int64_t>(1, body))));
    }
}

RetrievalTrial run_trial(Session& s, const Tokenizer& tok, const RetrievalTask& task, uint64_t seed,
                         int64_t max_answer_tokens) {
    RetrievalTrial r;
    r.seed = seed;
    const bool bos = tok.add_bos() && tok.bos_id() >= 0;
    std::vector<std::vector<int32_t>> prompts;
    for (int i : task.order)
        prompts.push_back(tok.encode(task.body + "\n\n" + question_text(task.names[size_t(i)]), bos));
    // The prefix every question's prompt shares (normally the body and "\n\n"; tokenising the
    // whole prompt at once keeps the ids exactly what training saw at the boundary).
    size_t shared = prompts[0].size() - 1;
    for (const auto& p : prompts) {
        size_t k = 0;
        while (k < shared && k < p.size() - 1 && p[k] == prompts[0][k]) ++k;
        shared = k;
    }
    if (shared == 0) fail("the retrieval prompts share no prefix");
    for (const auto& p : prompts) r.prompt_tokens = std::max(r.prompt_tokens, int64_t(p.size()));
    r.shared_tokens = int64_t(shared);

    s.reset();
    auto t0 = std::chrono::steady_clock::now();
    s.prefill(prompts[0].data(), int64_t(shared), nullptr);
    r.prefill_s = seconds_since(t0);
    const SessionMark mark = s.mark();

    GenerateOptions go;
    go.max_tokens = max_answer_tokens;
    go.stop = {"\n"};
    Sha256 h;
    auto t1 = std::chrono::steady_clock::now();
    for (size_t q = 0; q < prompts.size(); ++q) {
        s.rewind(mark);
        GenerateStats st = generate(s, tok, prompts[q], go);
        if (st.cached_tokens != int64_t(shared)) fail("retrieval: the shared prefix was not reused");
        const int i = task.order[q];
        const size_t before = tok.encode(task.body.substr(0, task.fact_offsets[size_t(i)]), bos).size();
        r.distance_tokens.push_back(int64_t(prompts[q].size()) - int64_t(before));
        const std::string ans = answer_text(st.text);
        const bool ok = answer_correct(st.text, task.codes[size_t(i)]);
        r.answers.push_back(ans);
        r.correct.push_back(ok);
        r.n_correct += ok;
        h.update(task.names[size_t(i)] + "\t" + ans + "\n");
    }
    r.answer_s = seconds_since(t1);
    r.pass = r.n_correct == int(prompts.size());
    r.output_sha256 = h.hex();
    return r;
}

}  // namespace dsv4
