// Trace scopes: nothing is recorded when off; when on, the file is Chrome trace-event JSON with
// one complete event per scope (nested scopes inside their parents, one track per thread), the
// summary's inclusive/exclusive times add up, and a model forward has a scope per layer and op.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/trace.h"
#include "fixture_util.h"
#include "model/model.h"

using namespace dsv4;

namespace {
void spin_ms(double ms) {
    auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() < ms) {
    }
}
const trace::OpStats* find_op(const trace::Summary& s, const std::string& name) {
    for (const trace::OpStats& o : s.ops)
        if (o.name == name) return &o;
    return nullptr;
}
}  // namespace

TEST(Trace, OffRecordsNothing) {
    ASSERT_FALSE(trace::active());
    {
        DSV4_TRACE("ignored");
    }
    trace::Summary s = trace::finish();  // without start: empty
    EXPECT_EQ(s.events, 0);
    trace::start("");
    trace::Summary t = trace::finish();
    EXPECT_EQ(t.events, 0);  // the scope above was not kept for a later trace either
    EXPECT_TRUE(t.ops.empty());
}

TEST(Trace, NestedScopesMakeCompleteEventsAndSelfTime) {
    test::TempDir dir;
    const std::string path = dir.file("t.json");
    trace::start(path);
    for (int i = 0; i < 3; ++i) {
        DSV4_TRACE_ARG("outer", i);
        spin_ms(2);
        {
            DSV4_TRACE("inner");
            spin_ms(3);
        }
    }
    std::thread other([] {
        DSV4_TRACE("on_other_thread");
        spin_ms(1);
    });
    other.join();
    trace::Summary s = trace::finish();
    EXPECT_FALSE(trace::active());
    EXPECT_EQ(s.events, 7);
    const trace::OpStats *outer = find_op(s, "outer"), *inner = find_op(s, "inner");
    ASSERT_TRUE(outer && inner);
    EXPECT_EQ(outer->calls, 3);
    EXPECT_EQ(inner->calls, 3);
    EXPECT_GE(inner->total_ms, 9.0);
    EXPECT_DOUBLE_EQ(inner->self_ms, inner->total_ms);  // nothing inside it
    EXPECT_NEAR(outer->self_ms, outer->total_ms - inner->total_ms, 1e-6);
    EXPECT_GE(outer->self_ms, 6.0);
    double share = 0;
    for (const trace::OpStats& o : s.ops) share += o.self_share;
    EXPECT_NEAR(share, 1.0, 1e-9);
    for (size_t i = 1; i < s.ops.size(); ++i) EXPECT_GE(s.ops[i - 1].self_ms, s.ops[i].self_ms);  // by self time

    nlohmann::json j = nlohmann::json::parse(test::read_text(path));
    int complete = 0;
    std::set<int> tids;
    double outer_ts = -1, outer_dur = 0, inner_ts = -1;
    for (const auto& e : j["traceEvents"]) {
        if (e["ph"] != "X") continue;
        ++complete;
        tids.insert(e["tid"].get<int>());
        if (e["name"] == "outer" && e["args"]["n"] == 0) outer_ts = e["ts"], outer_dur = e["dur"];
        if (e["name"] == "inner" && inner_ts < 0) inner_ts = e["ts"];
    }
    EXPECT_EQ(complete, 7);
    EXPECT_EQ(tids.size(), 2u);
    ASSERT_GE(outer_ts, 0);
    EXPECT_GE(inner_ts, outer_ts);  // the first inner lies inside the first outer
    EXPECT_LE(inner_ts, outer_ts + outer_dur);
}

TEST(Trace, StartRefusesAPathItCannotWrite) {
    EXPECT_THROW(trace::start("/no/such/dir/t.json"), Error);
    EXPECT_FALSE(trace::active());
}

TEST(Trace, ModelForwardHasLayerAndOpScopes) {
    test::TempDir dir;
    Model m(test::convert_fixture("mini_flash", dir.path()));
    std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8};
    State st(m.config());
    std::vector<float> logits(size_t(8 * m.config().vocab));
    trace::start(dir.file("m.json"));
    m.forward(toks.data(), 8, st, logits.data());
    trace::Summary s = trace::finish();
    const trace::OpStats* layer = find_op(s, "layer");
    ASSERT_TRUE(layer);
    EXPECT_EQ(layer->calls, m.config().n_layers);
    for (const char* op : {"forward", "attention", "attn.sparse", "moe", "moe.shared", "matmul", "hc_pre", "hc_post",
                           "rmsnorm", "head"})
        EXPECT_TRUE(find_op(s, op)) << op;
    EXPECT_EQ(find_op(s, "forward")->calls, 1);
    nlohmann::json j = nlohmann::json::parse(test::read_text(dir.file("m.json")));
    EXPECT_GT(j["traceEvents"].size(), size_t(m.config().n_layers) * 5);
}

TEST(Trace, APerThreadLimitDropsLaterScopes) {
    trace::start("", 5);
    for (int i = 0; i < 8; ++i) {
        DSV4_TRACE("capped");
    }
    trace::Summary s = trace::finish();
    EXPECT_EQ(s.events, 5);
    EXPECT_EQ(s.dropped, 3);
    trace::start("");  // the next trace starts with an empty count and the default limit
    {
        DSV4_TRACE("again");
    }
    trace::Summary t = trace::finish();
    EXPECT_EQ(t.events, 1);
    EXPECT_EQ(t.dropped, 0);
}
