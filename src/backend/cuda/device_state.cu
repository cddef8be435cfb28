#include "backend/cuda/device_state.h"

#include <algorithm>
#include <mutex>

#include "backend/cuda/common.cuh"

namespace dsv4::cuda {

Stream forward_stream() {
    // One per device, so that the ranks of a model split over GPUs (one thread each, its device
    // current) each queue on their own GPU.
    constexpr int kMaxDevices = 64;
    static cudaStream_t streams[kMaxDevices] = {};
    static std::mutex m;
    int dev = 0;
    DSV4_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= kMaxDevices) fail("CUDA device ", dev, " (at most ", kMaxDevices, " supported)");
    std::lock_guard<std::mutex> lk(m);
    if (!streams[dev]) DSV4_CUDA_CHECK(cudaStreamCreate(&streams[dev]));
    return streams[dev];
}

void copy_d2d(void* dst, const void* src, size_t n, Stream stream) {
    if (n) DSV4_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
}

namespace {

DeviceBuffer copy_of(const DeviceBuffer& b) {
    DeviceBuffer c(b.size());
    copy_d2d(c.get(), b.get(), b.size());
    return c;
}

void init_compressor(DeviceCompressorState& s, int width, int coff, int ratio) {
    s.width = width;
    s.coff = coff;
    s.ratio = ratio;
    const size_t raw = size_t(ratio) * size_t(s.cw()) * sizeof(float);
    s.buf_kv = DeviceBuffer(raw);
    s.buf_gate = DeviceBuffer(raw);
    s.prev_kv = DeviceBuffer(raw);
    s.prev_gate = DeviceBuffer(raw);
}

// Everything of a compressor but its rows (a mark keeps only their count).
DeviceCompressorState copy_partial(const DeviceCompressorState& s) {
    DeviceCompressorState m;
    m.width = s.width;
    m.coff = s.coff;
    m.ratio = s.ratio;
    m.n_rows = s.n_rows;
    m.n_buf = s.n_buf;
    m.has_prev = s.has_prev;
    if (s.active()) {
        m.buf_kv = copy_of(s.buf_kv);
        m.buf_gate = copy_of(s.buf_gate);
        m.prev_kv = copy_of(s.prev_kv);
        m.prev_gate = copy_of(s.prev_gate);
    }
    return m;
}

// The counters and partial windows of src into dst's buffers of the same shapes (rows aside).
void copy_partial_into(DeviceCompressorState& dst, const DeviceCompressorState& src) {
    dst.n_rows = src.n_rows;
    dst.n_buf = src.n_buf;
    dst.has_prev = src.has_prev;
    if (src.active()) {
        copy_d2d(dst.buf_kv.get(), src.buf_kv.get(), src.buf_kv.size());
        copy_d2d(dst.buf_gate.get(), src.buf_gate.get(), src.buf_gate.size());
        copy_d2d(dst.prev_kv.get(), src.prev_kv.get(), src.prev_kv.size());
        copy_d2d(dst.prev_gate.get(), src.prev_gate.get(), src.prev_gate.size());
    }
}

void restore_partial(DeviceCompressorState& s, const DeviceCompressorState& m) {
    if (m.n_rows > s.n_rows) fail("cannot rewind a device state forward (", m.n_rows, " > ", s.n_rows, " rows)");
    copy_partial_into(s, m);
}

// The same into a mark's buffers from an earlier use (same shapes: one model), copies only.
void refill_partial(DeviceCompressorState& m, const DeviceCompressorState& s) {
    if (!s.active() || m.buf_kv.size() != s.buf_kv.size() || m.prev_kv.size() != s.prev_kv.size()) {
        m = copy_partial(s);
        return;
    }
    copy_partial_into(m, s);
}

struct Mark {
    struct Layer {
        DeviceBuffer window;
        int n_window = 0;
        DeviceCompressorState comp, idx;
    };
    std::vector<Layer> layers;
};

size_t raw_bytes(const DeviceCompressorState& s) {
    return s.buf_kv.size() + s.buf_gate.size() + s.prev_kv.size() + s.prev_gate.size();
}

}  // namespace

void DeviceCompressorState::reserve_rows(int64_t n) {
    if (n <= cap_rows) return;
    const int64_t cap = std::max<int64_t>({n, 2 * cap_rows, 64});
    DeviceBuffer grown(size_t(cap) * size_t(width) * sizeof(float));
    copy_d2d(grown.get(), rows.get(), size_t(n_rows) * size_t(width) * sizeof(float));
    rows = std::move(grown);  // freeing the old buffer waits for the copy (cudaFree synchronises)
    cap_rows = cap;
}

CudaState::CudaState(const ModelConfig& c) : layers(size_t(c.n_layers)), window(c.window), head_dim(c.head_dim) {
    for (int l = 0; l < c.n_layers; ++l) {
        DeviceLayerState& s = layers[size_t(l)];
        s.window = DeviceBuffer(size_t(std::max(1, c.window - 1)) * size_t(c.head_dim) * sizeof(float));
        const AttnType t = c.attn[size_t(l)];
        if (t == AttnType::Sliding) continue;
        init_compressor(s.comp, c.head_dim, t == AttnType::CSA ? 2 : 1, c.ratio[size_t(l)]);
        if (t == AttnType::CSA) init_compressor(s.idx, c.index_head_dim, 2, c.ratio[size_t(l)]);
    }
}

std::unique_ptr<DeviceState> CudaState::clone() const {
    auto c = std::unique_ptr<CudaState>(new CudaState());
    c->window = window;
    c->head_dim = head_dim;
    for (const DeviceLayerState& l : layers) {
        DeviceLayerState d;
        d.window = copy_of(l.window);
        d.n_window = l.n_window;
        for (auto [src, dst] : {std::pair{&l.comp, &d.comp}, std::pair{&l.idx, &d.idx}}) {
            *dst = copy_partial(*src);
            dst->n_rows = 0;
            dst->reserve_rows(src->n_rows);
            copy_d2d(dst->rows.get(), src->rows.get(), size_t(src->n_rows) * size_t(src->width) * sizeof(float));
            dst->n_rows = src->n_rows;
        }
        c->layers.push_back(std::move(d));
    }
    return c;
}

// A mark's buffers go back here when the mark is dropped and are filled again by the next
// mark(): allocating and freeing them every speculative round cost more than the round's
// forward (cudaMalloc and cudaFree take tens of microseconds each, cudaFree synchronises the
// device, and a 43-layer Flash mark has about 300 buffers). Every copy into or out of a mark
// runs on the forward stream, in order, so a reused buffer is never overwritten early.
struct MarkPool {
    static constexpr size_t kKeep = 4;  // marks alive at once: the round's, a drafter's
    std::mutex mu;
    std::vector<std::unique_ptr<Mark>> free;
};

std::shared_ptr<const void> CudaState::mark() const {
    if (!marks_) marks_ = std::make_shared<MarkPool>();
    std::unique_ptr<Mark> m;
    {
        std::lock_guard<std::mutex> lk(marks_->mu);
        if (!marks_->free.empty()) {
            m = std::move(marks_->free.back());
            marks_->free.pop_back();
        }
    }
    if (m && m->layers.size() == layers.size()) {
        for (size_t i = 0; i < layers.size(); ++i) {
            const DeviceLayerState& l = layers[i];
            Mark::Layer& ml = m->layers[i];
            if (ml.window.size() != l.window.size()) ml.window = DeviceBuffer(l.window.size());
            copy_d2d(ml.window.get(), l.window.get(), l.window.size());
            ml.n_window = l.n_window;
            refill_partial(ml.comp, l.comp);
            refill_partial(ml.idx, l.idx);
        }
    } else {
        m = std::make_unique<Mark>();
        for (const DeviceLayerState& l : layers)
            m->layers.push_back({copy_of(l.window), l.n_window, copy_partial(l.comp), copy_partial(l.idx)});
    }
    std::shared_ptr<MarkPool> pool = marks_;
    return std::shared_ptr<const void>(m.release(), [pool](Mark* p) {
        std::unique_ptr<Mark> back(p);
        std::lock_guard<std::mutex> lk(pool->mu);
        if (pool->free.size() < MarkPool::kKeep) pool->free.push_back(std::move(back));
    });
}

void CudaState::rewind(const std::shared_ptr<const void>& p) {
    const Mark& m = *static_cast<const Mark*>(p.get());
    if (m.layers.size() != layers.size()) fail("device state mark belongs to another model");
    for (size_t i = 0; i < layers.size(); ++i) {
        copy_d2d(layers[i].window.get(), m.layers[i].window.get(), m.layers[i].window.size());
        layers[i].n_window = m.layers[i].n_window;
        restore_partial(layers[i].comp, m.layers[i].comp);
        restore_partial(layers[i].idx, m.layers[i].idx);
    }
}

void CudaState::add_bytes(StateBytes& b) const {
    for (const DeviceLayerState& l : layers) {
        b.window += size_t(l.n_window) * size_t(head_dim) * sizeof(float);
        b.compressed += size_t(l.comp.n_rows) * size_t(l.comp.width) * sizeof(float);
        b.indexer += size_t(l.idx.n_rows) * size_t(l.idx.width) * sizeof(float);
        b.partial += raw_bytes(l.comp) + raw_bytes(l.idx);
    }
}

}  // namespace dsv4::cuda
