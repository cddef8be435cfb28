// y = x · Wᵀ for any number of tokens (see gemm.h): T <= 8 goes to matvec, larger T (and every
// grouped expert product) to the tiled kernel below.
//
// Tiled kernel: one block of 256 threads computes a tile of kTM = 64 tokens x kTN = 128 output
// rows, walking the columns in steps of kTK = 32 (one Q8_0/MXFP4 block, an eighth of a Q2_K
// super-block, so every format decodes whole pieces of a step):
//   * Each thread fetches 16 consecutive weights of one row (thread t: row t/2, half t%2) in their
//     stored format into registers (raw bytes, no arithmetic), and 8 x values (lane = column,
//     warp w tokens w, w+8, ...), for step s+1 while the block multiplies step s; after a
//     barrier it decodes the weights to float (the CPU reference's arithmetic) and stores both
//     into shared memory: ws[row][k], xs[token][k], rows padded to 36 floats.
//   * Thread (tm, tn) = (t/16, t%16) accumulates tokens tm + 16i (i < 4) x rows tn + 16j (j < 8)
//     in 32 float32 registers; per 4 columns it reads 4 float4 of x (two addresses per warp:
//     broadcasts) and 8 float4 of w (a quarter-warp reads 8 consecutive rows, 36 floats apart, so
//     bank groups 4 apart: no conflicts). The decoded stores are conflict-free too (a quarter
//     warp writes rows r..r+3, halves 0/1, at bank offsets 0, 4, ..., 28).
//   * Columns past cols (plain types with cols % 32 != 0), tokens past the tile's count and rows
//     past w.rows are zero in shared memory, and only valid outputs are written.
// gemm_experts runs the same body with blockIdx.z = expert: the block's tokens are rows
// offsets[e] + 64 * blockIdx.x .. of x, and blocks past the expert's row count return at once.
#include "backend/cuda/gemm.h"

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/matvec.h"

namespace dsv4::cuda {

namespace {

constexpr int kTM = 64, kTN = 128, kTK = 32, kThreads = 256, kLd = kTK + 4;
static_assert(kThreads == 2 * kTN, "one thread per 16-weight half row of a step");
static_assert(kTM % (kThreads / 32) == 0, "x tile rows per warp");

// e2m1 code (bit 3 = sign) -> float without a lookup table: 0, 0.5, then (1 + m/2) * 2^(e-1)
// for e = code bits 1..2, m = bit 0 (the same values as common.cuh's e2m1, bit for bit).
__device__ __forceinline__ float e2m1_bits(unsigned c) {
    const unsigned mag = c & 7u;
    const unsigned bits = mag < 2u ? (mag ? 0x3f000000u : 0u) : (((126u + (mag >> 1)) << 23) | ((mag & 1u) << 22));
    return __uint_as_float(bits | ((c & 8u) << 28));
}

// 16 consecutive weights of one row, columns k0 .. k0+15 (k0 a multiple of 16): fetch reads
// them in the stored format (row null: a row past the matrix, read as zeros), decode turns them
// into float32 exactly as cpu::dequant_row does. vec: rows are 16-byte aligned (plain types).
template <int TYPE>
struct WChunk;

template <>
struct WChunk<kF32> {
    float v[16];
    __device__ __forceinline__ void fetch(const uint8_t* row, int64_t k0, int64_t cols, bool vec) {
        const float* r = reinterpret_cast<const float*>(row);
        if (row && vec && k0 + 16 <= cols) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float4 t = __ldg(reinterpret_cast<const float4*>(r + k0) + q);
                v[4 * q] = t.x;
                v[4 * q + 1] = t.y;
                v[4 * q + 2] = t.z;
                v[4 * q + 3] = t.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < 16; ++j) v[j] = row && k0 + j < cols ? __ldg(r + k0 + j) : 0.0f;
        }
    }
    __device__ __forceinline__ void decode(float (&o)[16]) const {
#pragma unroll
        for (int j = 0; j < 16; ++j) o[j] = v[j];
    }
};

// F16 and BF16: 8 words of two values each (low half first).
template <int TYPE>
struct WChunk16 {
    uint32_t v[8];
    __device__ __forceinline__ void fetch(const uint8_t* row, int64_t k0, int64_t cols, bool vec) {
        const uint16_t* r = reinterpret_cast<const uint16_t*>(row);
        if (row && vec && k0 + 16 <= cols) {
            const uint4 a = __ldg(reinterpret_cast<const uint4*>(r + k0));
            const uint4 b = __ldg(reinterpret_cast<const uint4*>(r + k0) + 1);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
            v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const uint32_t lo = row && k0 + 2 * j < cols ? __ldg(r + k0 + 2 * j) : 0u;
                const uint32_t hi = row && k0 + 2 * j + 1 < cols ? __ldg(r + k0 + 2 * j + 1) : 0u;
                v[j] = lo | (hi << 16);
            }
        }
    }
    __device__ __forceinline__ void decode(float (&o)[16]) const {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if constexpr (TYPE == kBF16) {
                o[2 * j] = __uint_as_float(v[j] << 16);
                o[2 * j + 1] = __uint_as_float(v[j] & 0xffff0000u);
            } else {
                o[2 * j] = __half2float(__ushort_as_half(uint16_t(v[j] & 0xffffu)));
                o[2 * j + 1] = __half2float(__ushort_as_half(uint16_t(v[j] >> 16)));
            }
        }
    }
};
template <>
struct WChunk<kF16> : WChunk16<kF16> {};
template <>
struct WChunk<kBF16> : WChunk16<kBF16> {};

// Q8_0: blocks of 34 bytes (f16 d, 32 int8); the chunk is half h of block k0/32. Blocks are only
// 2-byte aligned, so the quants are read as 16-bit words.
template <>
struct WChunk<kQ8_0> {
    uint32_t q[4];
    uint32_t d;
    __device__ __forceinline__ void fetch(const uint8_t* row, int64_t k0, int64_t, bool) {
        if (!row) {
            q[0] = q[1] = q[2] = q[3] = d = 0;
            return;
        }
        const uint16_t* blk = reinterpret_cast<const uint16_t*>(row + (k0 / 32) * 34);
        const uint16_t* qs = blk + 1 + 8 * ((k0 / 16) & 1);
        d = __ldg(blk);
#pragma unroll
        for (int j = 0; j < 4; ++j) q[j] = uint32_t(__ldg(qs + 2 * j)) | (uint32_t(__ldg(qs + 2 * j + 1)) << 16);
    }
    __device__ __forceinline__ void decode(float (&o)[16]) const {
        const float s = __half2float(__ushort_as_half(uint16_t(d)));
#pragma unroll
        for (int j = 0; j < 16; ++j) o[j] = s * float(int8_t(uint8_t(q[j / 4] >> (8 * (j % 4)))));
    }
};

// MXFP4: blocks of 17 bytes (e8m0 E, 16 bytes: element j in the low nibble of byte j, element
// j + 16 in the high nibble); the chunk is half h of block k0/32, so both halves read the same bytes.
template <>
struct WChunk<kMXFP4> {
    uint32_t b[4];
    uint32_t e, h;
    __device__ __forceinline__ void fetch(const uint8_t* row, int64_t k0, int64_t, bool) {
        if (!row) {
            b[0] = b[1] = b[2] = b[3] = e = h = 0;
            return;
        }
        const uint8_t* blk = row + (k0 / 32) * 17;
        e = __ldg(blk);
        h = uint32_t((k0 / 16) & 1);
#pragma unroll
        for (int j = 0; j < 4; ++j)
            b[j] = uint32_t(__ldg(blk + 1 + 4 * j)) | (uint32_t(__ldg(blk + 2 + 4 * j)) << 8) |
                   (uint32_t(__ldg(blk + 3 + 4 * j)) << 16) | (uint32_t(__ldg(blk + 4 + 4 * j)) << 24);
    }
    __device__ __forceinline__ void decode(float (&o)[16]) const {
        const float s = e8m0(uint8_t(e));
        const unsigned shift = 4 * h;
#pragma unroll
        for (int j = 0; j < 16; ++j) o[j] = e2m1_bits((b[j / 4] >> (8 * (j % 4) + shift)) & 15u) * s;
    }
};

// Q2_K: super-blocks of 84 bytes (4-byte aligned: rows are whole super-blocks and the matrix
// base is aligned). Columns i0 .. i0+15 of a super-block (i0 % 16 == 0) share one scale/min byte
// (sub-block i0/16) and one shift, 2 * ((i0 % 128) / 32), and their quants are the 16 consecutive
// bytes at 16 + 32 * (i0 / 128) + i0 % 32.
template <>
struct WChunk<kQ2_K> {
    uint32_t q[4];
    uint32_t dd, sc, shift;
    __device__ __forceinline__ void fetch(const uint8_t* row, int64_t k0, int64_t, bool) {
        if (!row) {
            q[0] = q[1] = q[2] = q[3] = dd = sc = shift = 0;
            return;
        }
        const uint8_t* sb = row + (k0 / 256) * 84;
        const int i0 = int(k0 % 256);
        sc = __ldg(sb + i0 / 16);
        dd = __ldg(reinterpret_cast<const uint32_t*>(sb + 80));  // f16 d (low half), f16 dmin
        shift = uint32_t(2 * ((i0 % 128) / 32));
        const uint32_t* qs = reinterpret_cast<const uint32_t*>(sb + 16 + 32 * (i0 / 128) + i0 % 32);
#pragma unroll
        for (int j = 0; j < 4; ++j) q[j] = __ldg(qs + j);
    }
    __device__ __forceinline__ void decode(float (&o)[16]) const {
        const float d = __half2float(__ushort_as_half(uint16_t(dd & 0xffffu)));
        const float dmin = __half2float(__ushort_as_half(uint16_t(dd >> 16)));
        // The CPU's a * q - m with a = d * (sc & 15), m = dmin * (sc >> 4), each operation
        // rounded on its own (no fused multiply-add), so the decoded values are identical.
        const float a = __fmul_rn(d, float(sc & 15u)), m = __fmul_rn(dmin, float(sc >> 4));
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const uint32_t qv = (q[j / 4] >> (8 * (j % 4) + shift)) & 3u;
            o[j] = __fsub_rn(__fmul_rn(a, float(qv)), m);
        }
    }
};

struct GemmParams {
    const uint8_t* w;     // matrix 0
    size_t row_bytes, matrix_bytes;
    int64_t rows, cols;
    const float* x;
    int64_t ldx;
    float* y;
    int64_t ldy;
    int64_t T;                 // gemm: tokens
    const int32_t* offsets;    // gemm_experts: [count + 1]
    int vec;                   // plain-type rows are 16-byte aligned (vector loads)
};

template <int TYPE, bool EXPERTS>
__global__ void __launch_bounds__(kThreads, 2) gemm_kernel(const GemmParams p) {
    __shared__ __align__(16) float xs[kTM * kLd];
    __shared__ __align__(16) float ws[kTN * kLd];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    // The block's tokens: [m0, m0 + ntok) of x / y, and its weight matrix.
    int64_t m0, ntok;
    const uint8_t* wmat = p.w;
    if constexpr (EXPERTS) {
        const int e = int(blockIdx.z);
        const int64_t begin = p.offsets[e], end = p.offsets[e + 1];
        m0 = begin + int64_t(blockIdx.x) * kTM;
        if (m0 >= end) return;  // the whole block: no barrier has been reached yet
        ntok = min(int64_t(kTM), end - m0);
        wmat += size_t(e) * p.matrix_bytes;
    } else {
        m0 = int64_t(blockIdx.x) * kTM;
        ntok = min(int64_t(kTM), p.T - m0);
    }
    const int64_t n0 = int64_t(blockIdx.y) * kTN;
    const float* xb = p.x + m0 * p.ldx;
    const bool vec = p.vec != 0;

    // Loader roles: weights of row n0 + lr, columns 16 * lh .. + 15 of the step; x column lane
    // for tokens warp + 8 * i.
    const int lr = tid >> 1, lh = tid & 1;
    const uint8_t* wrow = n0 + lr < p.rows ? wmat + size_t(n0 + lr) * p.row_bytes : nullptr;
    constexpr int kXPer = kTM / (kThreads / 32);

    WChunk<TYPE> wc;
    float xr[kXPer];
    auto fetch = [&](int64_t kt) {
        wc.fetch(wrow, kt + 16 * lh, p.cols, vec);
        const int64_t k = kt + lane;
#pragma unroll
        for (int i = 0; i < kXPer; ++i) {
            const int m = warp + 8 * i;
            xr[i] = m < ntok && k < p.cols ? __ldg(xb + int64_t(m) * p.ldx + k) : 0.0f;
        }
    };
    auto store = [&]() {
        float o[16];
        wc.decode(o);
        float4* dst = reinterpret_cast<float4*>(ws + lr * kLd + 16 * lh);
#pragma unroll
        for (int q = 0; q < 4; ++q) dst[q] = make_float4(o[4 * q], o[4 * q + 1], o[4 * q + 2], o[4 * q + 3]);
#pragma unroll
        for (int i = 0; i < kXPer; ++i) xs[(warp + 8 * i) * kLd + lane] = xr[i];
    };

    const int tm = tid >> 4, tn = tid & 15;
    float acc[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    fetch(0);
    for (int64_t kt = 0; kt < p.cols; kt += kTK) {
        store();
        __syncthreads();
        if (kt + kTK < p.cols) fetch(kt + kTK);  // in flight while this step is multiplied
#pragma unroll
        for (int kk = 0; kk < kTK; kk += 4) {
            float4 xv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) xv[i] = *reinterpret_cast<const float4*>(xs + (tm + 16 * i) * kLd + kk);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float4 wv = *reinterpret_cast<const float4*>(ws + (tn + 16 * j) * kLd + kk);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    acc[i][j] = fmaf(xv[i].x, wv.x, acc[i][j]);
                    acc[i][j] = fmaf(xv[i].y, wv.y, acc[i][j]);
                    acc[i][j] = fmaf(xv[i].z, wv.z, acc[i][j]);
                    acc[i][j] = fmaf(xv[i].w, wv.w, acc[i][j]);
                }
            }
        }
        __syncthreads();  // every thread is done with this step's tiles before they are replaced
    }

    float* yb = p.y + m0 * p.ldy;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int m = tm + 16 * i;
        if (m >= ntok) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int64_t n = n0 + tn + 16 * j;
            if (n < p.rows) yb[int64_t(m) * p.ldy + n] = acc[i][j];
        }
    }
}

// ---- host side ----

bool tiled_type(int t) { return t == kF32 || t == kF16 || t == kBF16 || t == kQ8_0 || t == kMXFP4 || t == kQ2_K; }

// The weight checks both entry points share.
void check_weight(const DeviceMat& w, const char* who) {
    if (!w.data) fail(who, ": the weight has no device data");
    if (w.rows < 1 || w.cols < 1 || w.count < 1) fail(who, ": weight shape [", w.rows, ", ", w.cols, "] x ", w.count);
    const int t = int(w.type);
    if (!tiled_type(t)) fail(who, ": unsupported weight type ", gguf::type_name(w.type));
    const int64_t be = gguf::type_block_elems(w.type);
    if (w.cols % be != 0)
        fail(who, ": ", gguf::type_name(w.type), " rows of ", w.cols, " values are not whole blocks of ", be);
    const size_t need = size_t(w.cols / be) * gguf::type_block_bytes(w.type);
    if (w.row_bytes < need)
        fail(who, ": row_bytes ", w.row_bytes, " < ", need, " for ", w.cols, " ", gguf::type_name(w.type), " values");
    // The kernels read F32 and Q2_K (d, dmin, quants) as 4-byte words, F16/BF16/Q8_0 as 2-byte ones.
    const size_t align = (t == kF32 || t == kQ2_K) ? 4 : t == kMXFP4 ? 1 : 2;
    if (w.row_bytes % align != 0 || reinterpret_cast<uintptr_t>(w.data) % align != 0)
        fail(who, ": ", gguf::type_name(w.type), " rows of ", w.row_bytes, " bytes at ",
             static_cast<const void*>(w.data), " are not ", align, "-byte aligned");
}

GemmParams make_params(const DeviceMat& w, const float* x, int64_t ldx, float* y, int64_t ldy) {
    GemmParams p{};
    p.w = w.data;
    p.row_bytes = w.row_bytes;
    p.matrix_bytes = w.matrix_bytes();
    p.rows = w.rows;
    p.cols = w.cols;
    p.x = x;
    p.ldx = ldx;
    p.y = y;
    p.ldy = ldy;
    p.vec = w.row_bytes % 16 == 0 && (reinterpret_cast<uintptr_t>(w.data) & 15) == 0;
    return p;
}

template <bool EXPERTS>
void launch(const DeviceMat& w, const GemmParams& p, dim3 grid, cudaStream_t stream) {
    dispatch_wtype(int(w.type), [&]<int TYPE>() { gemm_kernel<TYPE, EXPERTS><<<grid, kThreads, 0, stream>>>(p); });
    DSV4_LAUNCH_CHECK();
}

}  // namespace

DeviceMat slice_rows(const DeviceMat& w, int64_t r0, int64_t r1) {
    if (w.count != 1) fail("CUDA slice_rows: the weight is a stack of ", w.count, " matrices, not one");
    if (r0 < 0 || r1 <= r0 || r1 > w.rows)
        fail("CUDA slice_rows: rows [", r0, ", ", r1, ") of a matrix of ", w.rows, " rows");
    DeviceMat s = w;
    s.rows = r1 - r0;
    s.data = w.data ? w.data + size_t(r0) * w.row_bytes : nullptr;
    return s;
}

void* GemmWorkspace::get(size_t bytes) {
    if (bytes > buf_.size()) {
        // Work queued earlier may still read the old buffer: wait for it before freeing.
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        buf_ = DeviceBuffer();
        buf_ = DeviceBuffer((bytes + 255) / 256 * 256);
    }
    return buf_.get();
}

void gemm(const DeviceMat& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy, GemmWorkspace& ws,
          Stream stream) {
    if (T < 0) fail("CUDA gemm: T = ", T, " tokens");
    if (T == 0) return;
    check_weight(w, "CUDA gemm");
    if (w.count != 1) fail("CUDA gemm: the weight is a stack of ", w.count, " matrices (gemm_experts takes stacks)");
    if (!x || !y) fail("CUDA gemm: null x or y");
    if (T > 1 && ldx < w.cols) fail("CUDA gemm: ldx ", ldx, " < cols ", w.cols);
    if (T > 1 && ldy < w.rows) fail("CUDA gemm: ldy ", ldy, " < rows ", w.rows);

    if (T <= kMaxMatvecTokens) {
        MatvecArgs a;
        a.x = x;
        a.ldx = ldx;
        a.T = int(T);
        a.y = y;
        a.ldy = ldy;
        a.n = 1;
        const size_t bytes = matvec_workspace_bytes(w, a);
        void* buf = bytes ? ws.get(bytes) : nullptr;
        matvec(w, a, buf, bytes, stream);
        return;
    }

    const int64_t row_tiles = (w.rows + kTN - 1) / kTN, tok_tiles = (T + kTM - 1) / kTM;
    if (row_tiles > 65535) fail("CUDA gemm: ", w.rows, " rows make ", row_tiles, " row tiles (at most 65535)");
    if (tok_tiles > 0x7fffffff) fail("CUDA gemm: T = ", T, " tokens");
    GemmParams p = make_params(w, x, ldx, y, ldy);
    p.T = T;
    launch<false>(w, p, dim3(unsigned(tok_tiles), unsigned(row_tiles), 1), stream);
}

void gemm_experts(const DeviceMat& w, const float* x, const int32_t* offsets, int64_t max_rows, float* y,
                  Stream stream) {
    if (max_rows < 0) fail("CUDA gemm_experts: max_rows = ", max_rows);
    check_weight(w, "CUDA gemm_experts");
    if (!x || !y || !offsets) fail("CUDA gemm_experts: null x, y or offsets");
    if (max_rows == 0) return;
    const int64_t row_tiles = (w.rows + kTN - 1) / kTN, tok_tiles = (max_rows + kTM - 1) / kTM;
    if (row_tiles > 65535) fail("CUDA gemm_experts: ", w.rows, " rows make ", row_tiles, " row tiles (at most 65535)");
    if (w.count > 65535) fail("CUDA gemm_experts: ", w.count, " experts (at most 65535)");
    if (tok_tiles > 0x7fffffff) fail("CUDA gemm_experts: max_rows = ", max_rows);
    GemmParams p = make_params(w, x, w.cols, y, w.rows);
    p.offsets = offsets;
    launch<true>(w, p, dim3(unsigned(tok_tiles), unsigned(row_tiles), unsigned(w.count)), stream);
}

}  // namespace dsv4::cuda
