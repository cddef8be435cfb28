// What the machine can do, measured in the same run as the benchmark, and what the model asks
// of it per token, so bench can state decode and prefill as a share of a roofline:
//   decode is bound by memory: the weight bytes one token reads / measured read bandwidth;
//   prefill is bound by arithmetic: 2 x active matmul weights FLOPs per token / the measured
//   rate of the engine's own inner kernel (cpu::dot on cache-resident rows, every thread).
#pragma once
#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace dsv4 {

struct ModelTraffic {
    double decode_bytes_per_token = 0;  // weights read by one decode token (experts: top_k of n)
    double prefill_flop_per_token = 0;  // 2 x active matmul weights, the LM head left out (a prefill
                                        // computes it for its last token only) and attention scores too
};
ModelTraffic model_traffic(const Model& m);

struct MachinePeak {
    double read_bytes_s = 0;  // best of 3 passes over a 256 MiB buffer, all threads
    double flop_s = 0;        // cpu::dot over L1-resident rows, all threads, best of 3 passes
};
MachinePeak measure_machine();

// {"bandwidth_bytes_s", "peak_flop_s", "decode_bytes_per_token", "prefill_flop_per_token", "method"}
nlohmann::json roofline_json(const ModelTraffic& t, const MachinePeak& p);

}  // namespace dsv4
