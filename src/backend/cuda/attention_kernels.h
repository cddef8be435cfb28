// The attention block's kernels on the device (the CUDA versions of backend/cpu/attention.h and
// rope.h): RoPE, closing compressor windows, the lightning indexer's scores and top-k, and the
// sparse attention with sinks over window + compressed rows. float32 activations; every pointer
// is a device pointer; asynchronous on the stream; bad arguments throw naming the value.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/device_memory.h"

namespace dsv4::cuda {

// cpu::Rope::apply on many rows: row r (at v + r * row_stride, `width` floats) rotates its
// trailing `dim` channels, interleaved pairs (c, c+1), by the angle pos * inv_freq[i] of position
// pos = pos0 + r / per_pos (per_pos rows share a position: the heads of one token); inverse
// rotates by minus that angle. inv_freq: [dim / 2] (cpu::Rope::inv_freq()). The angle is one
// float32 product and cos/sin are taken in double of it, as the CPU does, so results agree to
// float32 rounding.
void rope(float* v, int64_t rows, int width, int64_t row_stride, int per_pos, int64_t pos0, const float* inv_freq,
          int dim, bool inverse, Stream stream = nullptr);

// Closes n_windows compressor windows (cpu attention.cpp close_window, REFERENCE.md §4):
//   kv, gate: [n_windows * ratio, coff * width] raw projections, window i = rows i*ratio ..
//   prev_kv, prev_gate: [ratio, coff * width] raw rows of the window before window 0 (coff == 2
//     only, used when has_prev; window i > 0 uses window i - 1 of kv/gate instead).
//   ape: [ratio, coff * width] position bias added to gate (slot j of a window gets ape[j]).
// For channel ch < width, the slots are: coff == 1: (gate[j][ch] + ape[j][ch], kv[j][ch]) for
// j < ratio; coff == 2: the A halves of the previous window (channel ch: prev gate + ape, prev kv)
// when there is one, then the B halves of this window (channel width + ch). Row = per-channel
// softmax-weighted sum of the values, then RMSNorm(weight norm[width], eps), then RoPE (trailing
// `dim` channels) at position (first_row + i) * ratio. Writes rows[(first_row + i) * width ..].
// The arithmetic is the CPU's (slot order, double sum of squares, no fused multiply-adds); only
// expf differs (<= 2 ulp). coff == 1 ignores has_prev; dim 0 rotates nothing (inv_freq unused).
struct CompressArgs {
    const float* kv = nullptr;
    const float* gate = nullptr;
    const float* prev_kv = nullptr;
    const float* prev_gate = nullptr;
    bool has_prev = false;
    const float* ape = nullptr;
    const float* norm = nullptr;
    float eps = 1e-6f;
    int width = 0, coff = 1, ratio = 0;
    int64_t n_windows = 0;
    int64_t first_row = 0;
    const float* inv_freq = nullptr;
    int dim = 0;
    float* rows = nullptr;
};
void compress_windows(const CompressArgs& a, Stream stream = nullptr);

// The lightning indexer for T queries at positions pos0 ..: query t sees compressed rows
// r < n_visible(t) = min((pos0 + t + 1) / ratio, n_rows). Score of row r:
//   sum_h max(0, q[t, h] · k[r]) * scale * w[t, h]     (q [T, heads, dim], w [T, heads], k [n_rows, dim])
// Selection, as cpu::indexer_select: all visible rows when n_visible <= top_k, else the top_k by
// score (ties: lower index); the picked row ids in ascending order go to picked[t * top_k ..] and
// their count to n_picked[t] (entries past the count are left as they were). Scores are summed
// over heads in ascending h (a float32 sum each) and each dot product repeats cpu::dot's order
// and rounding (no fused multiply-adds), so the scores, and hence the selections, are bitwise
// those of cpu::attention_block (as built here: no FMA contraction on the host side either).
// The workspace holds the scores, [T, n_rows] float32 (indexer_workspace_bytes): after the call
// score(t, r) is at workspace[t * n_rows + r] for r < n_visible(t) of every query with
// n_visible(t) > top_k (queries that take all their visible rows are not scored).
struct IndexerArgs {
    const float* q = nullptr;
    const float* w = nullptr;
    const float* k = nullptr;
    int64_t T = 0, pos0 = 0, n_rows = 0;
    int heads = 0, dim = 0, ratio = 0, top_k = 0;
    float scale = 1.0f;
    int32_t* picked = nullptr;
    int32_t* n_picked = nullptr;
};
size_t indexer_workspace_bytes(int64_t T, int64_t n_rows);
void indexer_topk(const IndexerArgs& a, void* workspace, size_t workspace_bytes, Stream stream = nullptr);

// Sparse attention with sinks (cpu::attend_heads per query, K = V): query t at position
// p = pos0 + t, heads q[t, h, :] (width floats each, H heads), attends over
//   the window: positions j = max(0, p - window + 1, cache_from) .. p, row j read from
//     cache[(j - cache_from) * width] when j < pos0, else chunk[(j - pos0) * width];
//   then compressed rows (comp, [n_comp, width]): none when comp is null; with picked null, rows
//     r < min((p + 1) / ratio, n_comp) (HCA); with picked, rows picked[t * top_k + i] for
//     i < n_picked[t] (CSA).
// out[t, h, :] = sum_j softmax_j({q·k_j * scale} ∪ {sinks[h]}) k_j (the sink has no value).
// Each key row is loaded once per block and shared by the heads of the block (up to 16).
// width: a multiple of 32 up to 512; cache, chunk and comp 16-byte aligned; picked ids must be
// rows of comp (< n_comp); n_picked[t] is clamped to [0, top_k].
// Few queries (decode, verification: when T * ceil(H / 16) is under twice the multiprocessor
// count) and a width that is a multiple of 64 take a split path: each query's keys are cut into
// splits handled by separate blocks, whose partial softmax sums are merged, in a fixed order, by
// a second kernel. It needs a workspace of sparse_attention_workspace_bytes(a) bytes (0 when the
// one-pass kernel runs; it depends on T, H, width, window, pos0, cache_from and the compressed
// rows' bound, not on the device data), 16-byte aligned. Results are bitwise repeatable.
struct SparseAttnArgs {
    const float* q = nullptr;
    int64_t T = 0, pos0 = 0;
    int H = 0, width = 0;
    float scale = 1.0f;
    const float* sinks = nullptr;
    const float* cache = nullptr;
    int64_t cache_from = 0;
    const float* chunk = nullptr;
    int window = 0;
    const float* comp = nullptr;
    int64_t n_comp = 0;
    int ratio = 0;
    const int32_t* picked = nullptr;
    const int32_t* n_picked = nullptr;
    int top_k = 0;
    float* out = nullptr;
};
size_t sparse_attention_workspace_bytes(const SparseAttnArgs& a);
void sparse_attention(const SparseAttnArgs& a, void* workspace, size_t workspace_bytes, Stream stream = nullptr);

}  // namespace dsv4::cuda
