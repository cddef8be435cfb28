// An "arm": one configuration of the engine that a measurement runs (quality compares two,
// bench times one or two). Written on the command line as a small option string,
//
//     "model=models/q8.gguf band=512 frontier=2 backend=cpu threads=2 spec=mtp spec_cap=4 spec_verify_cost=0.05"
//
// key=value pairs separated by spaces or commas; every key is optional (an empty string is the
// defaults). New kinds of arm (CUDA, quantised experts chosen at load time) become new keys
// here; the commands only pass ArmOptions along.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/session.h"

namespace dsv4 {

struct ArmOptions {
    std::string model;        // GGUF file; "" = the command's --model (or the default model)
    int64_t band = 2048;      // prefill band (PrefillOptions::band)
    int frontier = 5;         // bands per prefill step (PrefillOptions::frontier_bands)
    std::string backend = "cpu";
    int gpus = 1;             // > 1: the model split over that many GPUs (backend=cuda)
    int threads = 0;          // worker threads; 0 = the process default (DSV4_THREADS or all cores)
    std::string spec = "off"; // speculative decoding: off | mtp | draft:FILE | dspark:FILE
    int spec_cap = 4;         // most draft tokens per round
    double spec_verify_cost = 0;  // > 0: the controller's price of one more verified token (ControllerOptions)
    std::string text;         // the string it was parsed from, for receipts
};

// Throws UsageError naming `what` (e.g. "--a") and the bad key or value.
ArmOptions parse_arm(const std::string& opts, const std::string& what);

// The model file of an arm: its model=, else fallback (the command's --model), else the
// default model (model_path_or_default).
std::string arm_model_path(const ArmOptions& a, const std::string& fallback);

PrefillOptions arm_prefill_options(const ArmOptions& a);

// The thread pool is sized once per process, so arms can differ in threads only if they agree:
// sets DSV4_THREADS to the common value before the pool starts. Throws UsageError when arms ask
// for different counts or the pool already runs with another count.
void apply_arm_threads(const std::vector<ArmOptions>& arms);

nlohmann::json arm_json(const ArmOptions& a, const std::string& model_path);

}  // namespace dsv4
