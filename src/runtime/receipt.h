// The common part of every measurement receipt (DESIGN.md, "Formats"): which code, which
// command, which machine, which model file.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace dsv4 {

// `git rev-parse HEAD` of source_dir, with "-dirty" when tracked files differ from it; "unknown"
// when git or the repository is not there.
std::string git_commit(const std::string& source_dir);

// The CPU model name from /proc/cpuinfo and the worker thread count, e.g.
// {"cpu": "AMD EPYC 9654 96-Core Processor", "threads": 16, "backend": "cpu"}.
nlohmann::json device_json();

// {"path" (canonical), "bytes", "sha256"} of a model file; files over 8 GiB get
// "sha256_head_tail_64mib" (the first and last 64 MiB) instead. Memoised per process.
nlohmann::json model_json(const std::string& path);

// The command line as one string, arguments with spaces or quotes quoted for a shell.
std::string command_line(int argc, const char* const* argv);
// This process's own command line (from /proc/self/cmdline; the commands' runners do not see
// argv), "" where that is unreadable.
std::string own_command_line();

// The fields every receipt starts with: commit, command, device, a UTC timestamp, and
// "switches" (switches_json()) when any is set.
nlohmann::json receipt_header(const std::string& source_dir, const std::string& command);
// The DSV4_* environment switches that are set and change what runs, name -> value.
nlohmann::json switches_json();

// Writes j (indented) to path, or to stdout when path is "-". Throws dsv4::Error on failure.
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace dsv4
