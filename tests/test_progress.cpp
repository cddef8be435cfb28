// The progress display: the line's text (done/total, rate, ETA), silence when the stream is not
// a terminal, and what it draws when told to (in place, erased at the end).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <string>

#include "core/progress.h"

using namespace dsv4;

namespace {
std::string contents(std::FILE* f) {
    std::fflush(f);
    std::rewind(f);
    std::string s;
    int c;
    while ((c = std::fgetc(f)) != EOF) s += char(c);
    return s;
}
}  // namespace

TEST(Progress, FormatShowsDoneTotalRateAndEta) {
    EXPECT_EQ(Progress::format("prefill", 0, 100, 0.0, "tok"), "prefill 0/100 tok");
    EXPECT_EQ(Progress::format("prefill", 50, 100, 10.0, "tok"), "prefill 50/100 tok  5.0 tok/s  ETA 10s");
    EXPECT_EQ(Progress::format("convert", 10, 1010, 10.0, "tensors"), "convert 10/1010 tensors  1.0 tensors/s  ETA 16m40s");
    EXPECT_EQ(Progress::format("q", 1, 7201, 1.0, "tok"), "q 1/7201 tok  1.0 tok/s  ETA 2h00m");
    EXPECT_EQ(Progress::format("q", 100, 100, 4.0, "tok"), "q 100/100 tok  25.0 tok/s  ETA 0s");
}

TEST(Progress, QuietWhenTheStreamIsNotATerminal) {
    std::FILE* f = std::tmpfile();
    ASSERT_TRUE(f);
    {
        Progress p("prefill", 10, "tok", f);  // Auto: a file is not a terminal
        EXPECT_FALSE(p.drawing());
        p.update(5);
        p.finish();
    }
    {
        Progress p("prefill", 10, "tok", f, Progress::Mode::Never);
        p.update(10);
    }
    EXPECT_EQ(contents(f), "");
    std::fclose(f);
}

TEST(Progress, DrawsInPlaceAndErasesWhenFinished) {
    std::FILE* f = std::tmpfile();
    ASSERT_TRUE(f);
    Progress p("prefill", 10, "tok", f, Progress::Mode::Always);
    EXPECT_TRUE(p.drawing());
    p.update(4);
    p.update(2);   // never goes back
    EXPECT_EQ(p.done(), 4);
    p.update(99);  // clamped to the total
    EXPECT_EQ(p.done(), 10);
    p.finish();
    p.finish();    // idempotent
    p.update(5);   // nothing after finish
    // Every draw starts with "\r\033[K" (back to the line start, erase); the last one is empty.
    const std::string s = contents(f), mark = "\r\033[K";
    ASSERT_GE(s.size(), mark.size());
    EXPECT_EQ(s.substr(s.size() - mark.size()), mark);
    for (size_t i = 0; i < s.size();) {
        ASSERT_EQ(s.compare(i, mark.size(), mark), 0) << s;
        size_t next = s.find(mark, i + mark.size());
        std::string line = s.substr(i + mark.size(), (next == std::string::npos ? s.size() : next) - i - mark.size());
        if (!line.empty()) {
            EXPECT_EQ(line.rfind("prefill ", 0), 0u) << line;
        }
        i = next == std::string::npos ? s.size() : next;
    }
    std::fclose(f);
}

TEST(Progress, RedrawsAfterTheRateLimit) {
    std::FILE* f = std::tmpfile();
    ASSERT_TRUE(f);
    Progress p("run", 3, "runs", f, Progress::Mode::Always);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    p.update(1);
    const std::string s = contents(f);
    EXPECT_EQ(s.rfind("\r\033[Krun 1/3 runs  ", 0), 0u) << s;
    EXPECT_NE(s.find("ETA"), std::string::npos);
    p.finish();  // before the stream closes: finish() writes to it (the destructor would, after fclose)
    std::fclose(f);
}
