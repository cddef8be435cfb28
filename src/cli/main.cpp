// dsv4: command-line front end. Parses arguments and calls the layers below; no math here.
// Exit status: 0 success, 1 runtime failure, 2 bad arguments. Errors are one line on stderr.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/registry.h"
#include "core/error.h"
#ifdef DSV4_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

int main(int argc, char** argv) {
#ifdef DSV4_HAVE_CUDA
    dsv4::cuda::register_cuda_backend();
#endif
    CLI::App app{"dsv4: DeepSeek-V4 inference engine"};
    app.require_subcommand(1);
    std::vector<dsv4::cli::Registered> commands = dsv4::cli::setup_commands(app);
    bool known = false;
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
        known |= argc > 1 && sub->get_name() == argv[1];
    if (argc > 1 && argv[1][0] != '-' && !known) {
        std::fprintf(stderr, "dsv4: unknown command '%s' (see dsv4 --help)\n", argv[1]);
        return 2;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "dsv4: %s (see dsv4 --help)\n", e.what());
        return 2;
    }
    try {
        for (const dsv4::cli::Registered& c : commands)
            if (c.app->parsed()) return c.run();
        return 2;
    } catch (const dsv4::UsageError& e) {
        std::fprintf(stderr, "dsv4: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dsv4: %s\n", e.what());
        return 1;
    }
}
