// A State's layers in device memory (the CUDA twin of model/state.h's LayerState): the latent
// rows of the last window - 1 tokens, each compressor's unfinished window, the raw rows of its
// last complete window (the CSA overlap reads their A halves) and its compressed rows. The
// counters live on the host: they follow from positions alone, so no forward reads them back.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "model/config.h"
#include "model/state.h"

namespace dsv4::cuda {

struct DeviceCompressorState {
    int width = 0, coff = 1, ratio = 0;
    DeviceBuffer rows;        // [cap_rows, width] float32; the first n_rows are valid
    int64_t n_rows = 0, cap_rows = 0;
    DeviceBuffer buf_kv, buf_gate;    // [ratio, coff * width]: the unfinished window's raw rows
    int n_buf = 0;
    DeviceBuffer prev_kv, prev_gate;  // [ratio, coff * width]: the last complete window, raw
    bool has_prev = false;

    bool active() const { return ratio > 0; }
    int64_t cw() const { return int64_t(coff) * width; }
    // Makes room for n rows (keeps the valid ones).
    void reserve_rows(int64_t n);
};

struct DeviceLayerState {
    DeviceBuffer window;  // [window - 1, head_dim]: latent rows of the positions pos - n_window .. pos - 1
    int n_window = 0;
    DeviceCompressorState comp, idx;
};

// Restore points kept for reuse (device_state.cu): a speculative round takes a mark every time.
struct MarkPool;

class CudaState : public DeviceState {
public:
    explicit CudaState(const ModelConfig& c);

    std::unique_ptr<DeviceState> clone() const override;
    std::shared_ptr<const void> mark() const override;
    void rewind(const std::shared_ptr<const void>& mark) override;
    void add_bytes(StateBytes& b) const override;

    std::vector<DeviceLayerState> layers;
    int window = 0, head_dim = 0;
    // Unique per state object: a mark's copy lists name the buffers of the state it was made for.
    uint64_t serial() const { return serial_; }

private:
    CudaState() = default;
    static uint64_t next_serial();
    uint64_t serial_ = next_serial();
    mutable std::shared_ptr<MarkPool> marks_;  // made by the first mark(); shared with the marks it hands out
};

// The stream every CUDA forward and state copy runs on: one per device (the current one),
// created on first use.
// A blocking stream, so that the synchronous copies of DeviceBuffer (legacy default stream) wait
// for the work queued on it; not the legacy stream itself, so that it can be captured in a graph.
Stream forward_stream();

// Asynchronous device-to-device copy on the stream (n bytes; nothing when n == 0).
void copy_d2d(void* dst, const void* src, size_t n, Stream stream = forward_stream());

}  // namespace dsv4::cuda
