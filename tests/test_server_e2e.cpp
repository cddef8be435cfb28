// The end-to-end suite of dsv4 serve (tests/server_e2e/run.sh): the real binary on a loopback
// port, the embedded model, and clients we did not write (the official openai and
// @anthropic-ai/sdk npm packages, curl), including a bounded load test whose figures are
// printed. Skipped, saying why, only when node/npm are missing or the registry is unreachable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sys/wait.h>

#include "core/error.h"
#include "test_util.h"

using namespace dsv4;

TEST(ServerE2E, OfficialSdksAgainstTheRealServer) {
    const std::filesystem::path build = std::filesystem::path(DSV4_BINARY).parent_path();
    const std::string script = std::string(DSV4_SOURCE_DIR) + "/tests/server_e2e/run.sh";
    const std::string log = (build / "server_e2e.log").string();
    const std::string cmd = cat("bash '", script, "' '", build.string(), "' '", DSV4_BINARY, "' > '", log, "' 2>&1");
    const int raw = std::system(cmd.c_str());
    const int rc = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128;
    std::string out;
    try {
        out = test::read_text(log);
    } catch (const std::exception&) {
    }
    if (rc == 77) GTEST_SKIP() << "the e2e suite needs node, npm and the npm registry (CI has them):\n" << out;
    // The log holds every check and the load test's figures: show them either way.
    std::cout << out;
    EXPECT_EQ(rc, 0) << "`" << cmd << "` failed";
    EXPECT_NE(out.find(" passed, 0 failed"), std::string::npos);
    EXPECT_NE(out.find("load test: {"), std::string::npos);
}
