// A one-line progress display for long work (prefill of long prompts, conversion, quality
// runs): done/total, rate and ETA, redrawn in place at most every 100 ms. It draws only when
// its stream is a terminal (so logs and pipes stay clean) unless told otherwise, and erases
// its line when finished, so the output that follows starts on a clean line.
//
//     Progress p("prefill", n_tokens, "tok");
//     ... p.update(done); ...
//     p.finish();  // (the destructor does it too)
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace dsv4 {

class Progress {
public:
    enum class Mode { Auto, Always, Never };  // Auto: draw iff `out` is a terminal

    Progress(std::string label, int64_t total, std::string unit = "tok", std::FILE* out = stderr,
             Mode mode = Mode::Auto);
    ~Progress();
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    // Sets the amount done (monotone; values past total are clamped).
    void update(int64_t done);
    void add(int64_t n) { update(done_ + n); }
    // Erases the line (when drawing) and stops drawing. Idempotent.
    void finish();

    bool drawing() const { return draw_; }
    int64_t done() const { return done_; }

    // The text of the line, e.g. "prefill 1024/9000 tok  512.0 tok/s  ETA 15s" (no ETA before
    // any progress; "ETA 0s" when done). Pure, for tests.
    static std::string format(const std::string& label, int64_t done, int64_t total, double elapsed_s,
                              const std::string& unit);

private:
    void draw(bool force);

    std::string label_, unit_;
    int64_t total_ = 0, done_ = 0;
    std::FILE* out_;
    bool draw_ = false, finished_ = false;
    std::chrono::steady_clock::time_point t0_, last_draw_;
};

}  // namespace dsv4
