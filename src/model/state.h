// Per-sequence inference state: everything a layer needs from earlier tokens. Memory grows
// with the number of compressed rows only; the sliding window and partial windows are fixed.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsv4 {

// One compressor (a CSA/HCA layer's main one, or a CSA layer's indexer).
struct CompressorState {
    int width = 0;   // output row width
    int coff = 1;    // 2 for overlapping (CSA) windows: each token projects an A and a B half
    int ratio = 0;   // tokens per window
    std::vector<float> rows;            // [n_rows, width]: pooled, normed, rotated at w * ratio
    int64_t n_rows = 0;
    std::vector<float> buf_kv, buf_gate;  // the unfinished window: [n_buf, coff * width], raw
    int n_buf = 0;
    std::vector<float> prev_kv, prev_gate;  // CSA: A halves of the last complete window, [ratio, width]
    bool has_prev = false;                  // (gate with its position bias already added)
};

struct LayerState {
    std::vector<float> window;  // latent K=V rows of the last (window - 1) tokens, oldest first
    int n_window = 0;
    CompressorState comp, idx;
};

struct State {
    int64_t pos = 0;  // tokens consumed so far (the next token's position)
    std::vector<LayerState> layers;

    explicit State(const ModelConfig& c);
};

}  // namespace dsv4
