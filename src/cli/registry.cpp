#include "cli/registry.h"

#include <algorithm>

namespace dsv4::cli {

namespace {
struct Entry {
    int order;
    CommandSetup setup;
};
std::vector<Entry>& entries() {
    static std::vector<Entry> e;  // function-local: safe from static initialisation order
    return e;
}
}  // namespace

bool register_command(int order, CommandSetup setup) {
    entries().push_back({order, setup});
    return true;
}

std::vector<Registered> setup_commands(CLI::App& app) {
    std::vector<Entry> e = entries();
    std::stable_sort(e.begin(), e.end(), [](const Entry& a, const Entry& b) { return a.order < b.order; });
    std::vector<Registered> out;
    for (const Entry& x : e) {
        size_t before = app.get_subcommands([](CLI::App*) { return true; }).size();
        CommandRunner run = x.setup(app);
        auto subs = app.get_subcommands([](CLI::App*) { return true; });
        if (subs.size() == before + 1) out.push_back({subs.back(), std::move(run)});
    }
    return out;
}

}  // namespace dsv4::cli
