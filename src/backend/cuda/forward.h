// The CUDA forward pass (internal to the backend): the same layer sequence as Model::forward,
// every op on the device (ops.h, gemm.h, matvec.h, attention_kernels.h), float32 activations,
// weights in their stored formats, the State's layers in device memory (device_state.h).
// Host <-> device traffic per forward: the token ids in, the requested logits / streams out.
// Internal to the backend's CUDA sources (it names CUDA runtime types).
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/device_state.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/gemm.h"
#include "model/backend.h"
#include "model/model.h"

namespace dsv4::cuda {

class CudaBackend final : public ForwardBackend {
public:
    // With a shard: one rank of a model split over several (model/shard.h). w then holds only
    // that rank's slices (upload_weights with the same plan), shard->comm sums device buffers on
    // this backend's stream (backend/cuda/device_communicators.h), and decode runs without CUDA
    // graphs. The caller runs every rank's forward at once, one thread per rank.
    CudaBackend(const ModelConfig& c, DeviceModelWeights w, const Shard* shard = nullptr);
    ~CudaBackend() override;

    std::string name() const override { return "cuda"; }
    std::string device() const override { return device_; }
    void forward(const int32_t* tokens, int64_t T, State& st, float* logits, const ForwardOptions& opt) const override;
    void mtp_forward(const float* hidden, const int32_t* next, int64_t T, State& st, float* logits,
                     const ForwardOptions& opt) const override;
    void mtp_head(const float* out, int64_t rows, float* logits) const override;
    size_t weight_bytes() const override { return w_.bytes; }
    size_t peak_device_bytes() const override { return peak_used_; }
    double decode_bytes_per_token() const override;
    double prefill_flop_per_token() const override;
    double mtp_bytes_per_token() const override;
    Peak measure_peak() const override;

private:
    // Named device scratch, grown on demand and kept between forwards.
    float* f(const char* slot, int64_t floats) const;
    int32_t* i(const char* slot, int64_t ints) const;
    void* bytes(const char* slot, size_t n) const;

    CudaState& state_of(State& st, const ModelConfig& c) const;
    // Queues the main model's layers (and the head when asked: its logits stay in the "logits"
    // slot) for T tokens at pos0; tokens is host memory (pinned when captured).
    void launch_forward(const int32_t* tokens, int64_t T, int64_t pos0, CudaState& ds, const ForwardOptions& opt,
                        bool want_logits, int64_t first) const;
    // The state's host-side counters, so that a failed capture can be undone.
    struct HostCounters {
        int n_window;
        int64_t comp_rows;
        int comp_buf;
        bool comp_prev;
        int64_t idx_rows;
        int idx_buf;
        bool idx_prev;
        bool operator==(const HostCounters&) const = default;
    };
    static std::vector<HostCounters> counters(const CudaState& ds);
    static void restore(CudaState& ds, const std::vector<HostCounters>& v);
    // Updates (or instantiates) the executable graph kept under key from g, which it destroys.
    void update_exec(cudaGraph_t g, const std::string& key) const;
    // Launches the executable graph kept under key and records graph_done_ after it.
    void launch_exec(const std::string& key) const;
    // Captures one step of T tokens at pos into an executable graph (the state's counters
    // then stand after that step); returns its execs_ key. key_suffix keeps precaptured steps'
    // graphs apart from the one that may still be running.
    std::string capture_step(const int32_t* tokens, int64_t T, int64_t pos, CudaState& ds, const ForwardOptions& opt,
                             bool want_logits, int64_t first, const std::string& key_suffix) const;
    // Decode steps captured ahead: see "Decode graphs" in docs/CUDA.md.
    size_t buffers_fingerprint(const CudaState& ds) const;
    void precapture_next(int64_t pos, CudaState& ds, const ForwardOptions& opt, int64_t first) const;
    bool take_precaptured(int64_t T, int64_t pos, CudaState& ds, const ForwardOptions& opt, bool want_logits,
                          int64_t first) const;
    void run_layer(const ModelConfig& c, int l, const DeviceLayer& L, MlpType mlp, const int32_t* tokens, int64_t T,
                   int64_t pos0, int64_t band, DeviceLayerState& st, float* X) const;
    void attention(const ModelConfig& c, int l, const DeviceLayer& L, const float* a, int64_t T, int64_t pos0,
                   int64_t band, DeviceLayerState& st, float* out) const;
    void compress(DeviceCompressorState& s, const DeviceCompressor& w, const float* a, int64_t T, const float* inv_freq,
                  int rope_dim, float eps, const char* slot_kv, const char* slot_gate, Stream S,
                  GemmWorkspace& ws, const GemmOptions& packed_a) const;
    // x [T, cols] packed once into scratch `slot` for the int8 Q8_0 matvecs among `readers` that
    // read it (each would pack it again); empty options when none of them takes that kernel, or
    // with DSV4_CUDA_PACK_ONCE=0.
    GemmOptions packed(const float* x, int64_t cols, int64_t T, const char* slot,
                       const std::vector<const DeviceMat*>& readers) const;
    // Independent paths of a layer (the attention's key/value and compressor path beside its
    // query path, the shared expert beside the routed experts) run on a side stream: fork()
    // returns it, ordered after the work queued so far on the forward stream, and join() orders
    // the forward stream after the side path (branches of the graph when captured). The side
    // path uses side_ws_, never ws_. With DSV4_CUDA_SIDE=0 all on the forward stream.
    Stream fork() const;
    void join() const;
    GemmWorkspace& side_ws() const { return side_ ? side_ws_ : ws_; }
    void moe(const ModelConfig& c, const DeviceLayer& L, MlpType mlp, const float* x, const int32_t* tokens, int64_t T,
             float* out) const;
    // The head of X[rows] into the "logits" slot, and to host logits when not null.
    void head(const DeviceWeight& fn, const DeviceVec& base, const DeviceVec& scale, const DeviceVec& norm,
              const float* X, int64_t rows, float* logits) const;
    void note_memory() const;
    // A sublayer's partial output made whole (a sum over the shard's ranks; nothing unsharded).
    void sum_over_ranks(float* x, int64_t n) const;

    ModelConfig cfg_, mtp_cfg_;
    bool sharded_ = false;
    Shard shard_;  // when sharded_
    DeviceModelWeights w_;
    std::string device_;
    mutable std::mutex mu_;  // one forward at a time (the scratch is shared)
    mutable std::map<std::string, DeviceBuffer> scratch_;
    mutable GemmWorkspace ws_;
    mutable size_t peak_used_ = 0;
    bool side_ = true;       // DSV4_CUDA_SIDE (default on)
    bool pack_once_ = true;  // DSV4_CUDA_PACK_ONCE (default on): packed()
    mutable Stream side_stream_ = nullptr;  // made at the first fork, on this backend's device
    mutable cudaEvent_t fork_ev_ = nullptr, join_ev_ = nullptr;
    mutable GemmWorkspace side_ws_;
    // Decode graphs (DSV4_CUDA_GRAPHS=0 turns them off).
    bool graphs_ = true;
    mutable bool capturing_ = false;
    mutable std::string topology_;                       // the optional launches of the step being queued
    mutable std::set<int64_t> warm_sizes_;              // token counts that have run once plainly
    mutable std::map<std::string, cudaGraphExec_t> execs_;
    mutable std::vector<DeviceBuffer> graveyard_;        // scratch replaced during a capture
    mutable int32_t* pinned_tokens_ = nullptr;          // host staging of a captured step's token ids
    mutable cudaEvent_t graph_done_ = nullptr;          // recorded after the last graph launched
    // The next decode step, captured while the current one runs (DSV4_CUDA_PRECAPTURE=0 turns
    // it off): one token of the same state at the next position with the same options. It is
    // launched only when the next forward is exactly that step and nothing it captured (state
    // counters, state and scratch buffers) has changed since.
    bool precapture_ = true;
    struct Precaptured {
        bool ready = false;
        uint64_t state = 0;  // CudaState::serial()
        int64_t pos = 0, band = 0, first = 0;  // the step's position and options (it has logits)
        std::vector<HostCounters> before, after;  // the state's counters before and after the step
        size_t buffers = 0;                       // buffers_fingerprint() when captured
        std::string key;                          // its graph in execs_
    };
    mutable Precaptured pre_;
    mutable bool pre_parity_ = false;  // alternates the precaptured graphs: one may still run
    mutable uint64_t last_state_ = 0;  // the state and end position of the last one-token step,
    mutable int64_t last_pos_ = -1;    // to precapture only in a run of plain decode steps
};

}  // namespace dsv4::cuda
