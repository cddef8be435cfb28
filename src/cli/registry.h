// The subcommands register themselves: each *_cmd.cpp file adds its options to the CLI11 app
// and returns the function that runs it, so adding a command touches no other file.
// (The cli sources are linked into the dsv4 executable itself, not into a library, so these
// static registrations are never dropped by the linker.)
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace dsv4::cli {

using CommandRunner = std::function<int()>;
// Adds the subcommand (and its options, bound to state the runner owns) to app.
using CommandSetup = CommandRunner (*)(CLI::App& app);

// order: position in `dsv4 --help`. Returns true (for use in a static initialiser).
bool register_command(int order, CommandSetup setup);

struct Registered {
    CLI::App* app;
    CommandRunner run;
};
// Sets up every registered command on app, in order.
std::vector<Registered> setup_commands(CLI::App& app);

}  // namespace dsv4::cli
