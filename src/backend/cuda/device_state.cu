#include "backend/cuda/device_state.h"

#include <algorithm>
#include <atomic>
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

// One buffer copy of a mark or a rewind.
struct CopyDesc {
    const void* src;
    void* dst;
    size_t bytes;
};

// Every copy of a list in one launch (blockIdx.y = the copy): a mark or a rewind of a 43-layer
// model is about 300 buffers, and as many cudaMemcpyAsync calls cost more host time than the
// copies take (0.13 ms for the 6-layer embedded model, an eighth of its decode step).
__global__ void copy_list_kernel(const CopyDesc* __restrict__ list) {
    grid_begin();
    const CopyDesc d = list[blockIdx.y];
    const size_t start = size_t(blockIdx.x) * blockDim.x + threadIdx.x, step = size_t(gridDim.x) * blockDim.x;
    if (((reinterpret_cast<uintptr_t>(d.src) | reinterpret_cast<uintptr_t>(d.dst) | d.bytes) & 15) == 0) {
        const uint4* src = static_cast<const uint4*>(d.src);
        uint4* dst = static_cast<uint4*>(d.dst);
        for (size_t i = start; i < d.bytes / 16; i += step) dst[i] = src[i];
    } else {
        const uint8_t* src = static_cast<const uint8_t*>(d.src);
        uint8_t* dst = static_cast<uint8_t*>(d.dst);
        for (size_t i = start; i < d.bytes; i += step) dst[i] = src[i];
    }
}

// A restore point: the window rows and partial windows of every layer in buffers of its own,
// the host counters, and the two copy lists (state -> mark, mark -> state) on the device,
// made once for the state that owns the mark and reused every time the mark is refilled.
struct Mark {
    struct Layer {
        DeviceBuffer window;
        int n_window = 0;
        DeviceCompressorState comp, idx;  // rows left empty; n_rows kept
    };
    uint64_t owner = 0;  // the serial of the state whose buffers the lists name
    std::vector<Layer> layers;
    DeviceBuffer save, restore;  // CopyDesc lists
    unsigned n_copies = 0, blocks = 1;
};

// Same-shape buffers for a compressor's partial windows (not copied).
DeviceCompressorState empty_partial(const DeviceCompressorState& s) {
    DeviceCompressorState m;
    m.width = s.width;
    m.coff = s.coff;
    m.ratio = s.ratio;
    if (s.active()) {
        m.buf_kv = DeviceBuffer(s.buf_kv.size());
        m.buf_gate = DeviceBuffer(s.buf_gate.size());
        m.prev_kv = DeviceBuffer(s.prev_kv.size());
        m.prev_gate = DeviceBuffer(s.prev_gate.size());
    }
    return m;
}

void run_copy_list(const DeviceBuffer& list, unsigned n, unsigned blocks) {
    if (n == 0) return;
    launch(copy_list_kernel, dim3(blocks, n), 256, 0, forward_stream(), list.as<CopyDesc>());
    DSV4_LAUNCH_CHECK();
}

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

uint64_t CudaState::next_serial() {
    static std::atomic<uint64_t> n{0};
    return ++n;
}

namespace {

std::unique_ptr<Mark> new_mark(const CudaState& st) {
    const std::vector<DeviceLayerState>& layers = st.layers;
    auto m = std::make_unique<Mark>();
    m->owner = st.serial();
    std::vector<CopyDesc> save, restore;
    size_t largest = 0;
    auto pair = [&](const DeviceBuffer& live, const DeviceBuffer& kept) {
        if (!live.size()) return;
        save.push_back({live.get(), kept.get(), live.size()});
        restore.push_back({kept.get(), live.get(), live.size()});
        largest = std::max(largest, live.size());
    };
    for (const DeviceLayerState& l : layers) {
        m->layers.push_back({DeviceBuffer(l.window.size()), 0, empty_partial(l.comp), empty_partial(l.idx)});
        const Mark::Layer& ml = m->layers.back();
        pair(l.window, ml.window);
        for (auto [live, kept] : {std::pair{&l.comp, &ml.comp}, std::pair{&l.idx, &ml.idx}}) {
            if (!live->active()) continue;
            pair(live->buf_kv, kept->buf_kv);
            pair(live->buf_gate, kept->buf_gate);
            pair(live->prev_kv, kept->prev_kv);
            pair(live->prev_gate, kept->prev_gate);
        }
    }
    if (save.size() > 65535) fail("device state of ", save.size(), " buffers: more than one copy launch takes");
    m->n_copies = unsigned(save.size());
    m->blocks = unsigned(std::clamp<size_t>((largest / 16 + 255) / 256, 1, 64));
    if (m->n_copies) {
        m->save = DeviceBuffer(save.size() * sizeof(CopyDesc));
        m->save.upload(save.data(), save.size() * sizeof(CopyDesc));
        m->restore = DeviceBuffer(restore.size() * sizeof(CopyDesc));
        m->restore.upload(restore.data(), restore.size() * sizeof(CopyDesc));
    }
    return m;
}
}  // namespace

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
    if (!m) m = new_mark(*this);
    for (size_t i = 0; i < layers.size(); ++i) {
        const DeviceLayerState& l = layers[i];
        Mark::Layer& ml = m->layers[i];
        ml.n_window = l.n_window;
        for (auto [live, kept] : {std::pair{&l.comp, &ml.comp}, std::pair{&l.idx, &ml.idx}}) {
            kept->n_rows = live->n_rows;
            kept->n_buf = live->n_buf;
            kept->has_prev = live->has_prev;
        }
    }
    run_copy_list(m->save, m->n_copies, m->blocks);
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
        const Mark::Layer& ml = m.layers[i];
        DeviceLayerState& l = layers[i];
        l.n_window = ml.n_window;
        for (auto [live, kept] : {std::pair{&l.comp, &ml.comp}, std::pair{&l.idx, &ml.idx}}) {
            if (kept->n_rows > live->n_rows)
                fail("cannot rewind a device state forward (", kept->n_rows, " > ", live->n_rows, " rows)");
            live->n_rows = kept->n_rows;
            live->n_buf = kept->n_buf;
            live->has_prev = kept->has_prev;
        }
    }
    if (m.owner == serial_) {
        run_copy_list(m.restore, m.n_copies, m.blocks);
        return;
    }
    // Another state's mark (a copy of the state rewound to the original's point): its lists
    // name the other state's buffers, so copy buffer by buffer.
    for (size_t i = 0; i < layers.size(); ++i) {
        copy_d2d(layers[i].window.get(), m.layers[i].window.get(), m.layers[i].window.size());
        for (auto [live, kept] : {std::pair{&layers[i].comp, &m.layers[i].comp}, std::pair{&layers[i].idx, &m.layers[i].idx}}) {
            if (!live->active()) continue;
            copy_d2d(live->buf_kv.get(), kept->buf_kv.get(), kept->buf_kv.size());
            copy_d2d(live->buf_gate.get(), kept->buf_gate.get(), kept->buf_gate.size());
            copy_d2d(live->prev_kv.get(), kept->prev_kv.get(), kept->prev_kv.size());
            copy_d2d(live->prev_gate.get(), kept->prev_gate.get(), kept->prev_gate.size());
        }
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
