#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
#include <algorithm>
#include <functional>
using std::min; using std::max;
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
struct uint3_ { unsigned x = 0, y = 0, z = 0; };
extern thread_local uint3_ threadIdx;
extern uint3_ blockIdx, blockDim, gridDim;
extern float* g_smem;
extern float g_sstat[4096];
extern std::barrier<>* g_block_bar;
extern std::vector<std::unique_ptr<std::barrier<>>> g_warp_bar;
extern float g_shfl[32][32];
inline void __syncthreads() { g_block_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    g_shfl[w][lane] = v;
    g_warp_bar[w]->arrive_and_wait();
    const float r = g_shfl[w][lane ^ o];
    g_warp_bar[w]->arrive_and_wait();
    return r;
}
inline float __shfl_sync(unsigned, float v, int s) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    g_shfl[w][lane] = v;
    g_warp_bar[w]->arrive_and_wait();
    const float r = g_shfl[w][s];
    g_warp_bar[w]->arrive_and_wait();
    return r;
}
// cp.async: per-thread deferred groups
struct CpOp { void* d; const void* s; };
extern thread_local std::vector<CpOp> t_pending;
extern thread_local std::vector<std::vector<CpOp>> t_groups;
extern thread_local long t_oob;
extern const char* g_src_lo[8]; extern const char* g_src_hi[8]; extern int g_nsrc;
inline void check_src(const void* s) {
    const char* p = (const char*)s;
    for (int i = 0; i < g_nsrc; ++i) if (p >= g_src_lo[i] && p + 16 <= g_src_hi[i]) return;
    ++t_oob;
}
inline void cp_async16(void* d, const void* s) { check_src(s); if (((uintptr_t)s & 15) || ((uintptr_t)d & 15)) ++t_oob; t_pending.push_back({d, s}); }
inline void cp_async_commit() { t_groups.push_back(std::move(t_pending)); t_pending.clear(); }
template <int N> inline void cp_async_wait() {
    while (int(t_groups.size()) > N) {
        for (auto& op : t_groups.front()) std::memcpy(op.d, op.s, 16);
        t_groups.erase(t_groups.begin());
    }
}
constexpr unsigned kFull = 0xffffffffu;
template <class A, class B> inline auto ceil_div(A a, B b) { return (a + b - 1) / b; }
struct DevLimits { int sms = 132; };
inline DevLimits device_limits() { return {}; }

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
