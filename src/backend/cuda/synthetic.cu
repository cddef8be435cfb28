// Synthetic models: the real shapes of a named architecture with random weights written
// straight into device memory in the chosen formats (no file, no host copy of the weights).
// The values are scaled so that activations stay of unit order through every layer (weights
// of variance ~1/cols), so routing, top-k and softmax behave like a real model's, not degenerate.
#include <random>

#include "backend/cpu/rope.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/forward.h"
#include "core/error.h"

namespace dsv4::cuda {

namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// A uniform value in [-a, a) from the hash of (seed, i).
__device__ __forceinline__ float uniform(uint64_t seed, uint64_t i, float a) {
    const uint32_t r = uint32_t(mix64(seed ^ (i * 0x2545f4914f6cdd1dull)) >> 40);  // 24 bits
    return (float(r) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * a;
}

// One storage block per thread (grid-stride): F32/F16/BF16 one value; Q8_0 34 bytes (its d and
// quants where the device layout puts them: block j of a row of nb at scale_offset(j) and
// quant_offset(j) of rows of row_bytes); MXFP4 17; Q2_K 84. Values have magnitude up to about a
// (uniform).
__global__ void fill_kernel(uint8_t* out, int64_t n_blocks, int type, float a, uint64_t seed, int64_t nb,
                            size_t row_bytes) {
    for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < n_blocks;
         b += int64_t(gridDim.x) * blockDim.x) {
        const uint64_t s = seed + uint64_t(b) * 0x100000001b3ull;
        if (type == kF32) {
            reinterpret_cast<float*>(out)[b] = uniform(s, 0, a);
        } else if (type == kF16) {
            reinterpret_cast<__half*>(out)[b] = __float2half(uniform(s, 0, a));
        } else if (type == kBF16) {
            reinterpret_cast<__nv_bfloat16*>(out)[b] = __float2bfloat16(uniform(s, 0, a));
        } else if (type == kQ8_0) {
            uint8_t* row = out + size_t(b / nb) * row_bytes;
            uint8_t* qs = row + q8dev::quant_offset(b % nb);
            const __half d = __float2half(a / 127.0f);
            memcpy(row + q8dev::scale_offset(b % nb), &d, 2);
            for (int j = 0; j < 32; j += 8) {
                const uint64_t r = mix64(s ^ uint64_t(j));
                for (int k = 0; k < 8; ++k) {
                    const int q = int((r >> (8 * k)) & 0xff) - 128;  // -128 .. 127, kept to -127 .. 127
                    qs[j + k] = uint8_t(int8_t(q < -127 ? -127 : q));
                }
            }
        } else if (type == kMXFP4) {
            uint8_t* blk = out + b * 17;
            blk[0] = uint8_t(127 + int(floorf(log2f(a / 6.0f))));
            const uint64_t r0 = mix64(s), r1 = mix64(s ^ 1);
            for (int k = 0; k < 8; ++k) {
                blk[1 + k] = uint8_t(r0 >> (8 * k));
                blk[9 + k] = uint8_t(r1 >> (8 * k));
            }
        } else {  // Q2_K: value = d * sc * q - dmin * m with sc 1..15, m 0..15, q 0..3
            uint8_t* blk = out + b * 84;
            for (int k = 0; k < 84 - 4; k += 8) {
                const uint64_t r = mix64(s ^ uint64_t(k));
                for (int j = 0; j < 8 && k + j < 80; ++j) blk[k + j] = uint8_t(r >> (8 * j));
            }
            for (int j = 0; j < 16; ++j) blk[j] = uint8_t((blk[j] & 0xf0) | ((blk[j] & 15) | 1));
            const __half d = __float2half(2.0f * a / 45.0f), dmin = __float2half(a / 15.0f);
            memcpy(blk + 80, &d, 2);
            memcpy(blk + 82, &dmin, 2);
        }
    }
}

__global__ void const_kernel(float* out, int64_t n, float v) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}

class Maker {
public:
    explicit Maker(uint64_t seed) : seed_(seed) {}

    DeviceWeight mat(gguf::TensorType type, int64_t rows, int64_t cols, int64_t count = 1) {
        const int64_t be = gguf::type_block_elems(type);
        if (cols % be != 0) fail("synthetic: ", cols, " columns are not whole ", gguf::type_name(type), " blocks");
        DeviceWeight w;
        w.mat.type = type;
        w.mat.rows = rows;
        w.mat.cols = cols;
        w.mat.row_bytes = device_row_bytes(type, cols);
        w.mat.count = count;
        w.buffer = DeviceBuffer(w.mat.bytes());
        w.mat.data = w.buffer.as<const uint8_t>();
        const int64_t n_blocks = rows * count * (cols / be);
        const float a = std::sqrt(3.0f / float(cols));  // variance 1/cols
        fill_kernel<<<device_limits().sms * 16, 256>>>(w.buffer.as<uint8_t>(), n_blocks, int(type), a, next_seed(),
                                                       cols / be, w.mat.row_bytes);
        DSV4_LAUNCH_CHECK();
        return w;
    }
    DeviceVec value(int64_t n, float v) {
        DeviceVec d;
        d.n = n;
        d.buf = DeviceBuffer(size_t(n) * sizeof(float));
        const_kernel<<<ceil_div(n, 256), 256>>>(d.buf.as<float>(), n, v);
        DSV4_LAUNCH_CHECK();
        return d;
    }
    uint64_t next_seed() { return seed_ = seed_ * 6364136223846793005ull + 1442695040888963407ull; }

private:
    uint64_t seed_;
};

DeviceLayer make_layer(Maker& mk, const ModelConfig& c, int l, MlpType mlp, const SyntheticOptions& o,
                       std::mt19937_64& host_rng) {
    using TT = gguf::TensorType;
    const TT dt = o.dense;
    const int64_t D = c.hidden, Hd = int64_t(c.n_heads) * c.head_dim, nD = int64_t(c.hc_mult) * D;
    const AttnType at = c.attn[size_t(l)];
    DeviceLayer L;
    L.attn_norm = mk.value(D, 1.0f);
    L.ffn_norm = mk.value(D, 1.0f);
    L.hc_attn_fn = mk.mat(TT::F32, c.mix_dim(), nD);
    L.hc_ffn_fn = mk.mat(TT::F32, c.mix_dim(), nD);
    L.hc_attn_base = mk.value(c.mix_dim(), 0.0f);
    L.hc_ffn_base = mk.value(c.mix_dim(), 0.0f);
    L.hc_attn_scale = mk.value(3, 0.5f);
    L.hc_ffn_scale = mk.value(3, 0.5f);
    L.q_a = mk.mat(dt, c.q_lora, D);
    L.q_a_norm = mk.value(c.q_lora, 1.0f);
    L.q_b = mk.mat(dt, Hd, c.q_lora);
    L.kv = mk.mat(dt, c.head_dim, D);
    L.kv_norm = mk.value(c.head_dim, 1.0f);
    L.o_a = mk.mat(dt, int64_t(c.o_groups) * c.o_lora, Hd / c.o_groups);
    L.o_b = mk.mat(dt, D, int64_t(c.o_groups) * c.o_lora);
    L.sinks = mk.value(c.n_heads, 0.0f);
    if (at != AttnType::Sliding) {
        const int coff = at == AttnType::CSA ? 2 : 1, m = c.ratio[size_t(l)];
        L.comp.kv = mk.mat(dt, int64_t(coff) * c.head_dim, D);
        L.comp.gate = mk.mat(dt, int64_t(coff) * c.head_dim, D);
        L.comp.ape = mk.value(int64_t(m) * coff * c.head_dim, 0.0f);
        L.comp.norm = mk.value(c.head_dim, 1.0f);
    }
    if (at == AttnType::CSA) {
        const int m = c.ratio[size_t(l)];
        L.idx_comp.kv = mk.mat(dt, 2 * int64_t(c.index_head_dim), D);
        L.idx_comp.gate = mk.mat(dt, 2 * int64_t(c.index_head_dim), D);
        L.idx_comp.ape = mk.value(int64_t(m) * 2 * c.index_head_dim, 0.0f);
        L.idx_comp.norm = mk.value(c.index_head_dim, 1.0f);
        L.idx_q_b = mk.mat(dt, int64_t(c.index_heads) * c.index_head_dim, c.q_lora);
        L.idx_proj = mk.mat(dt, c.index_heads, D);
    }
    L.gate_inp = mk.mat(TT::F32, c.n_experts, D);
    if (mlp == MlpType::TopK) {
        L.exp_probs_b = mk.value(c.n_experts, 0.0f);
    } else {
        // Hash routing: top_k distinct experts per token id.
        std::vector<int32_t> t(size_t(c.vocab) * size_t(c.top_k));
        for (int64_t v = 0; v < c.vocab; ++v)
            for (int j = 0; j < c.top_k; ++j) {
                int32_t e;
                bool dup;
                do {
                    e = int32_t(host_rng() % uint64_t(c.n_experts));
                    dup = false;
                    for (int q = 0; q < j; ++q) dup = dup || t[size_t(v * c.top_k + q)] == e;
                } while (dup);
                t[size_t(v * c.top_k + j)] = e;
            }
        L.tid2eid = upload_vec(t);
    }
    L.gate_exps = mk.mat(o.experts, c.moe_inter, D, c.n_experts);
    L.up_exps = mk.mat(o.experts, c.moe_inter, D, c.n_experts);
    L.down_exps = mk.mat(o.experts, D, c.moe_inter, c.n_experts);
    L.gate_sh = mk.mat(dt, c.moe_inter, D);
    L.up_sh = mk.mat(dt, c.moe_inter, D);
    L.down_sh = mk.mat(dt, D, c.moe_inter);
    return L;
}

}  // namespace

ModelConfig synthetic_config(const SyntheticOptions& o) {
    if (o.shape != "flash") throw UsageError(cat("--synthetic ", o.shape, ": unknown shape (known: flash)"));
    ModelConfig c;
    c.vocab = 129280;
    c.hidden = 4096;
    c.n_heads = 64;
    c.head_dim = 512;
    c.rope_dim = 64;
    c.q_lora = 1024;
    c.o_groups = 8;
    c.o_lora = 1024;
    c.window = 128;
    c.index_heads = 64;
    c.index_head_dim = 128;
    c.index_topk = 512;
    c.n_experts = 256;
    c.top_k = 6;
    c.n_shared = 1;
    c.moe_inter = 2048;
    c.hc_mult = 4;
    c.hc_iters = 20;
    c.routed_scale = 1.5;
    c.swiglu_limit = 10.0;
    c.max_positions = 1048576;
    c.n_nextn = o.mtp ? 1 : 0;
    c.rope_main.theta = 10000;
    c.rope_compress.theta = 160000;
    c.rope_compress.yarn = true;
    c.rope_compress.factor = 16;
    c.rope_compress.original_context = 65536;
    const int full = 43;
    if (o.layers < 0 || o.layers > full) throw UsageError(cat("--layers ", o.layers, ": flash has 1..", full));
    c.n_layers = o.layers ? o.layers : full;
    for (int l = 0; l < c.n_layers; ++l) {  // REFERENCE.md §1.2
        const int r = l < 2 ? 0 : (l % 2 == 0 ? 4 : 128);
        c.ratio.push_back(r);
        c.attn.push_back(r == 0 ? AttnType::Sliding : r == 4 ? AttnType::CSA : AttnType::HCA);
        c.mlp.push_back(l < 3 ? MlpType::Hash : MlpType::TopK);
    }
    c.validate("synthetic " + o.shape);
    return c;
}

std::unique_ptr<Model> make_synthetic_model(const SyntheticOptions& o) {
    const ModelConfig c = synthetic_config(o);
    if (device_count() == 0) fail("--synthetic ", o.shape, ": no CUDA device is visible (synthetic models run on CUDA)");
    using TT = gguf::TensorType;
    Maker mk(o.seed);
    std::mt19937_64 host_rng(o.seed);
    DeviceModelWeights w;
    w.embed = mk.mat(o.dense, c.vocab, c.hidden);
    w.output = mk.mat(o.dense, c.vocab, c.hidden);
    w.output_norm = mk.value(c.hidden, 1.0f);
    w.hc_head_fn = mk.mat(TT::F32, c.hc_mult, int64_t(c.hc_mult) * c.hidden);
    w.hc_head_base = mk.value(c.hc_mult, 0.0f);
    w.hc_head_scale = mk.value(1, 0.5f);
    for (int l = 0; l < c.n_layers; ++l) w.layers.push_back(make_layer(mk, c, l, c.mlp[size_t(l)], o, host_rng));
    if (o.mtp) {
        const ModelConfig mc = mtp_block_config(c);
        DeviceMtp m;
        m.block = make_layer(mk, mc, 0, MlpType::TopK, o, host_rng);
        m.e_proj = mk.mat(o.dense, c.hidden, c.hidden);
        m.h_proj = mk.mat(o.dense, c.hidden, c.hidden);
        m.enorm = mk.value(c.hidden, 1.0f);
        m.hnorm = mk.value(c.hidden, 1.0f);
        m.norm = mk.value(c.hidden, 1.0f);
        m.hc_head_fn = mk.mat(TT::F32, c.hc_mult, int64_t(c.hc_mult) * c.hidden);
        m.hc_head_base = mk.value(c.hc_mult, 0.0f);
        m.hc_head_scale = mk.value(1, 0.5f);
        w.mtp.push_back(std::move(m));
    }
    w.rope_main = upload_vec(cpu::Rope(c.rope_main, c.rope_dim).inv_freq());
    w.rope_compress = upload_vec(cpu::Rope(c.rope_compress, c.rope_dim).inv_freq());
    w.bytes = weight_bytes(w);
    synchronize();
    const std::string name = cat("synthetic:", o.shape, " (", c.n_layers, " layers, dense ", gguf::type_name(o.dense),
                                 ", experts ", gguf::type_name(o.experts), ")");
    return std::make_unique<Model>(c, std::make_unique<CudaBackend>(c, std::move(w)), name);
}

}  // namespace dsv4::cuda
