// Per-sequence inference state: everything a layer needs from earlier tokens. Memory grows
// with the number of compressed rows only; the sliding window and partial windows are fixed.
#pragma once
#include <cstdint>
#include <memory>
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

struct StateBytes;

// The part of a State that a backend other than the CPU keeps in its own memory (the CUDA
// backend's window rows, partial windows and compressed rows). State owns it; copying a State
// copies it (device to device), mark/rewind go through it.
class DeviceState {
public:
    virtual ~DeviceState() = default;
    virtual std::unique_ptr<DeviceState> clone() const = 0;
    // An opaque restore point (what a StateMark keeps of the device) and the way back to it.
    virtual std::shared_ptr<const void> mark() const = 0;
    virtual void rewind(const std::shared_ptr<const void>& mark) = 0;
    virtual void add_bytes(StateBytes& b) const = 0;
};

// Holds a DeviceState with value semantics (a copy is a deep copy).
class DeviceStateSlot {
public:
    DeviceStateSlot() = default;
    DeviceStateSlot(const DeviceStateSlot& o) : p_(o.p_ ? o.p_->clone() : nullptr) {}
    DeviceStateSlot& operator=(const DeviceStateSlot& o) {
        if (this != &o) p_ = o.p_ ? o.p_->clone() : nullptr;
        return *this;
    }
    DeviceStateSlot(DeviceStateSlot&&) noexcept = default;
    DeviceStateSlot& operator=(DeviceStateSlot&&) noexcept = default;
    DeviceState* get() const { return p_.get(); }
    void reset(std::unique_ptr<DeviceState> p) { p_ = std::move(p); }

private:
    std::unique_ptr<DeviceState> p_;
};

// What a rewind restores: everything but the compressed rows, which only grow and are cut back
// to their count (so a mark costs O(window), not O(context)).
struct StateMark {
    int64_t pos = 0;
    struct Layer {
        std::vector<float> window;
        int n_window = 0;
        CompressorState comp, idx;  // with rows left empty; n_rows kept
    };
    std::vector<Layer> layers;
    std::shared_ptr<const void> device;  // the DeviceState's restore point, when there is one
};

// Bytes of state, split the way docs/STATE.md reports them.
struct StateBytes {
    size_t window = 0;      // sliding-window rows (fixed once the window is full)
    size_t compressed = 0;  // CSA/HCA compressed rows (grow with the context)
    size_t indexer = 0;     // CSA indexer rows (grow with the context)
    size_t partial = 0;     // unfinished windows and CSA overlap halves (bounded)
    size_t total() const { return window + compressed + indexer + partial; }
};

struct LayerState {
    std::vector<float> window;  // latent K=V rows of the last (window - 1) tokens, oldest first
    int n_window = 0;
    CompressorState comp, idx;
};

struct State {
    int64_t pos = 0;  // tokens consumed so far (the next token's position)
    std::vector<LayerState> layers;  // the CPU's layers (left empty while `device` holds them)
    DeviceStateSlot device;          // set by a device backend on its first forward

    explicit State(const ModelConfig& c);

    // A copy of the whole State is a snapshot (prefix caching); mark/rewind is the cheap way
    // back to an earlier position of this same State (rejected speculative tokens).
    StateMark mark() const;
    void rewind(const StateMark& m);

    StateBytes bytes() const;
};

// Growth of the state per token, by layer type, for this config (bytes, float32 rows).
struct StateGrowth {
    double csa_per_token = 0;   // one CSA layer: (head_dim + index_head_dim) / ratio floats
    double hca_per_token = 0;   // one HCA layer: head_dim / ratio floats
    double all_layers_per_token = 0;
    size_t fixed_per_layer = 0; // the window: (window - 1) * head_dim floats
};
StateGrowth state_growth(const ModelConfig& c);

}  // namespace dsv4
