#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace dsv4 {

namespace {
std::string human_seconds(double s) {
    char buf[32];
    if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
    else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
    else std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, (int(s) / 60) % 60);
    return buf;
}
}  // namespace

Progress::Progress(std::string label, int64_t total, std::string unit, std::FILE* out, Mode mode)
    : label_(std::move(label)), unit_(std::move(unit)), total_(std::max<int64_t>(total, 0)), out_(out),
      t0_(std::chrono::steady_clock::now()), last_draw_(t0_) {
    draw_ = mode == Mode::Always || (mode == Mode::Auto && out_ && isatty(fileno(out_)));
}

Progress::~Progress() { finish(); }

std::string Progress::format(const std::string& label, int64_t done, int64_t total, double elapsed_s,
                             const std::string& unit) {
    char buf[160];
    int n = std::snprintf(buf, sizeof buf, "%s %lld/%lld %s", label.c_str(), (long long)done, (long long)total,
                          unit.c_str());
    std::string s(buf, size_t(std::max(n, 0)));
    if (done > 0 && elapsed_s > 0) {
        double rate = double(done) / elapsed_s;
        std::snprintf(buf, sizeof buf, "  %.1f %s/s  ETA %s", rate, unit.c_str(),
                      human_seconds(double(std::max<int64_t>(total - done, 0)) / rate).c_str());
        s += buf;
    }
    return s;
}

void Progress::update(int64_t done) {
    done_ = std::clamp<int64_t>(done, done_, total_);
    draw(false);
}

void Progress::draw(bool force) {
    if (!draw_ || finished_) return;
    auto now = std::chrono::steady_clock::now();
    if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::string line = format(label_, done_, total_, std::chrono::duration<double>(now - t0_).count(), unit_);
    std::fprintf(out_, "\r\033[K%s", line.c_str());  // \033[K: erase what a longer line left
    std::fflush(out_);
}

void Progress::finish() {
    if (finished_) return;
    if (draw_) {
        std::fprintf(out_, "\r\033[K");
        std::fflush(out_);
    }
    finished_ = true;
}

}  // namespace dsv4
