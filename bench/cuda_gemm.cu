// Microbenchmark of the prefill projections, y[T, rows] = x[T, cols] · Wᵀ for T > 8, on one
// device, in one run: dsv4's tensor path (Q8_0, x packing included: it is part of every call) in
// its two precisions (float32-grade two limbs, and one f16 limb: DSV4_GEMM_PRECISION=f16),
// dsv4's float32 tiled path (Q8_0), and cuBLAS bf16 GemmEx on a dequantised bf16 copy of the same
// weight (the reference rate) at DeepSeek-V4-Flash shapes for T = 512, 2048, 8192; then the
// grouped expert product (256 experts x [2048, 4096], Q2_K and Q8_0, 2048 and 8192 tokens x top-6 rows
// assigned at random) on both dsv4 paths. Writes one JSON receipt.
//
// Method: random (not zero) weights and activations generated on the device; one warm-up call
// (module load, workspace growth, cuBLAS heuristics), then the median of kReps timings of
// kCalls back-to-back calls, each timed with CUDA events; TFLOP/s counts 2 * T * rows * cols
// (the useful multiply-adds, not the two limbs' MMAs); pct_of_cublas is against cuBLAS bf16 on
// the same shape and T in this run. Before timing, the tensor result is compared with the
// float32 path on the same data (check: ||tensor - simt|| / ||simt||).
//
//   bench_cuda_gemm --out receipt.json [--commit HASH] [--command "how it was run"] [--quick]
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/common.cuh"
#include "bench_fill.cuh"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gemm.h"

using dsv4::gguf::TensorType;
namespace cuda = dsv4::cuda;
using json = nlohmann::json;

#define CUBLAS_CHECK(expr)                                                                     \
    do {                                                                                       \
        cublasStatus_t st_ = (expr);                                                           \
        if (st_ != CUBLAS_STATUS_SUCCESS) dsv4::fail("cuBLAS error ", int(st_), " in ", #expr); \
    } while (0)

namespace {

using bench::f32_to_bf16;
using bench::fill_bf16;
using bench::fill_f32;
using bench::fill_q2_k;
using bench::fill_q8_0;

// Q8_0 [rows, cols] (device layout) -> bf16 (d * q rounded to bf16): cuBLAS's copy of the same
// weight.
__global__ void q8_0_to_bf16(const uint8_t* w, __nv_bfloat16* out, size_t n, int64_t cols) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const size_t r = i / size_t(cols), k = i % size_t(cols);
        const uint8_t* row = w + r * dsv4::cuda::q8dev::row_bytes(cols);
        const uint8_t* ds = row + dsv4::cuda::q8dev::scale_offset(int64_t(k / 32));
        const float d = __half2float(__ushort_as_half(uint16_t(ds[0] | (ds[1] << 8))));
        out[i] = __float2bfloat16(d * float(int8_t(row[dsv4::cuda::q8dev::quant_offset(int64_t(k / 32)) + k % 32])));
    }
}

unsigned grid_for(size_t n) { return unsigned(std::min<size_t>((n + 255) / 256, 132 * 64)); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct Timing {
    double median_us = 0, min_us = 0, max_us = 0;
    int calls = 0, reps = 0;
};

// One warm-up call, then reps timings of `calls` back-to-back calls (CUDA events); per-call times.
Timing time_calls(cudaStream_t s, int calls, int reps, const std::function<void()>& call) {
    call();
    DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1;
    DSV4_CUDA_CHECK(cudaEventCreate(&e0));
    DSV4_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<double> per;
    for (int r = 0; r < reps; ++r) {
        DSV4_CUDA_CHECK(cudaEventRecord(e0, s));
        for (int i = 0; i < calls; ++i) call();
        DSV4_CUDA_CHECK(cudaEventRecord(e1, s));
        DSV4_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        per.push_back(1000.0 * ms / calls);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    Timing t;
    t.median_us = median(per);
    t.min_us = *std::min_element(per.begin(), per.end());
    t.max_us = *std::max_element(per.begin(), per.end());
    t.calls = calls;
    t.reps = reps;
    return t;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0, r = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = double(a[i]) - double(b[i]);
        e += d * d;
        r += double(b[i]) * b[i];
    }
    return (std::isfinite(e) && r > 0) ? std::sqrt(e / r) : INFINITY;
}

std::vector<float> download(const cuda::DeviceBuffer& b, size_t n) {
    std::vector<float> h(n);
    b.download(h.data(), n * 4);
    return h;
}

}  // namespace

int main(int argc, char** argv) {
    std::string out_path = "cuda_gemm_receipt.json", commit = "unknown", command;
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_cuda_gemm: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--out") out_path = next();
        else if (a == "--commit") commit = next();
        else if (a == "--command") command = next();
        else if (a == "--quick") quick = true;
        else {
            std::fprintf(stderr, "bench_cuda_gemm: unknown argument %s (--out FILE --commit HASH --command TEXT --quick)\n",
                         a.c_str());
            return 2;
        }
    }
    if (command.empty())
        for (int i = 0; i < argc; ++i) {
            if (i) command += ' ';
            command += argv[i];
        }
    try {
        if (cuda::device_count() == 0) {
            std::fprintf(stderr, "bench_cuda_gemm: no CUDA device\n");
            return 1;
        }
        const auto wall0 = std::chrono::steady_clock::now();
        cudaDeviceProp prop{};
        DSV4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        cudaStream_t s;
        DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        json receipt;
        receipt["bench"] = "cuda_gemm";
        receipt["commit"] = commit;
        receipt["command"] = command;
        receipt["device"] = prop.name;
        receipt["sm_count"] = prop.multiProcessorCount;
        receipt["model"] = "synthetic: random weights at DeepSeek-V4-Flash matrix shapes";
        receipt["flops_counted"] = "2 * T * rows * cols per call (useful multiply-adds)";

        cublasHandle_t cublas;
        CUBLAS_CHECK(cublasCreate(&cublas));
        CUBLAS_CHECK(cublasSetStream(cublas, s));
        cuda::GemmWorkspace ws;
        cuda::GemmOptions tensor, tensor16, simt;
        tensor.path = cuda::GemmPath::Tensor;
        tensor.precision = cuda::GemmPrecision::F32;
        tensor16.path = cuda::GemmPath::Tensor;
        tensor16.precision = cuda::GemmPrecision::F16;
        simt.path = cuda::GemmPath::Simt;
        std::mt19937_64 rng(1234);
        json results = json::array();
        const int reps = quick ? 3 : 7;

        struct Shape {
            std::string name;
            int64_t rows, cols;
        };
        const std::vector<Shape> shapes = {{"32768x1024", 32768, 1024},
                                           {"4096x8192", 4096, 8192},
                                           {"1024x4096", 1024, 4096},
                                           {"2048x4096", 2048, 4096}};
        const std::vector<int64_t> Ts = quick ? std::vector<int64_t>{512, 2048} : std::vector<int64_t>{512, 2048, 8192};
        double cublas_2048x4096_8192 = 0;

        for (const Shape& sh : shapes) {
            const size_t q8_row = cuda::q8dev::row_bytes(sh.cols), nw = size_t(sh.rows * sh.cols);
            cuda::DeviceBuffer wq(q8_row * sh.rows), wb(nw * 2);
            fill_q8_0<<<grid_for(nw / 32), 256, 0, s>>>(wq.as<uint8_t>(), sh.rows, sh.cols, rng());
            q8_0_to_bf16<<<grid_for(nw), 256, 0, s>>>(wq.as<const uint8_t>(), wb.as<__nv_bfloat16>(), nw, sh.cols);
            DSV4_LAUNCH_CHECK();
            cuda::DeviceMat m;
            m.type = TensorType::Q8_0;
            m.rows = sh.rows;
            m.cols = sh.cols;
            m.row_bytes = q8_row;
            m.data = wq.as<const uint8_t>();

            for (int64_t T : Ts) {
                const size_t xn = size_t(T * sh.cols), yn = size_t(T * sh.rows);
                cuda::DeviceBuffer x(xn * 4), xb(xn * 2), y(yn * 4), y2(yn * 4), yb(yn * 4);
                fill_f32<<<grid_for(xn), 256, 0, s>>>(x.as<float>(), xn, rng());
                f32_to_bf16<<<grid_for(xn), 256, 0, s>>>(x.as<const float>(), xb.as<__nv_bfloat16>(), xn);
                DSV4_LAUNCH_CHECK();
                const double flop = 2.0 * double(T) * double(sh.rows) * double(sh.cols);

                auto tensor_with = [&](const cuda::GemmOptions& o) {
                    return [&, o] { cuda::gemm(m, x.as<const float>(), sh.cols, T, y.as<float>(), sh.rows, ws, s, o); };
                };
                const auto run_tensor = tensor_with(tensor);
                const auto run_tensor16 = tensor_with(tensor16);
                auto run_simt = [&] { cuda::gemm(m, x.as<const float>(), sh.cols, T, y2.as<float>(), sh.rows, ws, s, simt); };
                const float one = 1.0f, zero = 0.0f;
                auto run_cublas = [&] {
                    CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(sh.rows), int(T), int(sh.cols), &one,
                                              wb.get(), CUDA_R_16BF, int(sh.cols), xb.get(), CUDA_R_16BF, int(sh.cols),
                                              &zero, yb.get(), CUDA_R_32F, int(sh.rows), CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT));
                };
                run_tensor16();
                DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
                const std::vector<float> h16 = download(y, yn);
                run_tensor();
                run_simt();
                run_cublas();
                DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
                const std::vector<float> ht = download(y, yn), hs = download(y2, yn), hb = download(yb, yn);
                const double check = rel_l2(ht, hs), check16 = rel_l2(h16, hs), check_cublas = rel_l2(hb, hs);

                // Fewer calls where one call is long (the float32 path at 8K tokens: ~10 ms).
                const int calls = flop > 1e11 ? 2 : 10;
                const Timing tc = time_calls(s, calls, reps, run_cublas);
                const Timing tt = time_calls(s, calls, reps, run_tensor);
                const Timing t16 = time_calls(s, calls, reps, run_tensor16);
                const Timing tsim = time_calls(s, std::max(1, calls / 2), quick ? 1 : 3, run_simt);
                const double cublas_tf = flop / (tc.median_us * 1e6);
                if (sh.name == "2048x4096" && T == 8192) cublas_2048x4096_8192 = cublas_tf;
                struct Row {
                    const char* impl;
                    const char* wt;
                    Timing t;
                    double check;
                    const char* what;
                };
                for (const Row& r : {Row{"dsv4_tensor", "Q8_0", tt, check, "rel_l2_vs_dsv4_simt"},
                                     Row{"dsv4_tensor_f16", "Q8_0", t16, check16, "rel_l2_vs_dsv4_simt"},
                                     Row{"dsv4_simt", "Q8_0", tsim, 0.0, "oracle"},
                                     Row{"cublas_bf16_gemmex", "BF16", tc, check_cublas,
                                         "rel_l2_vs_dsv4_simt (cuBLAS rounds x and w to bf16)"}}) {
                    const double tf = flop / (r.t.median_us * 1e6);
                    results.push_back({{"shape", sh.name},
                                       {"rows", sh.rows},
                                       {"cols", sh.cols},
                                       {"T", T},
                                       {"impl", r.impl},
                                       {"weight_type", r.wt},
                                       {"time_us", r.t.median_us},
                                       {"time_min_us", r.t.min_us},
                                       {"time_max_us", r.t.max_us},
                                       {"calls_per_timing", r.t.calls},
                                       {"timings", r.t.reps},
                                       {"flop", flop},
                                       {"tflop_s", tf},
                                       {"pct_of_cublas", 100.0 * tf / cublas_tf},
                                       {"check", r.check},
                                       {"check_what", r.what}});
                    std::printf("%-12s T=%-5lld %-20s %-5s %11.1f us %7.1f TFLOP/s %6.1f%% of cuBLAS  check %.2e\n",
                                sh.name.c_str(), (long long)T, r.impl, r.wt, r.t.median_us, tf, 100.0 * tf / cublas_tf,
                                r.check);
                    std::fflush(stdout);
                }
            }
        }

        // ---- routed experts: 256 x [2048, 4096], 2048 (a prefill band: 48 rows an expert) and 8192
        // tokens x top-6 ----
        for (const int64_t T : quick ? std::vector<int64_t>{2048} : std::vector<int64_t>{2048, 8192}) {
            const int64_t E = 256, rows = 2048, cols = 4096, topk = 6, N = T * topk;
            std::vector<int32_t> counts(size_t(E), 0);
            std::vector<int32_t> pool(static_cast<size_t>(E));
            for (int64_t e = 0; e < E; ++e) pool[size_t(e)] = int32_t(e);
            for (int64_t t = 0; t < T; ++t) {
                for (int j = 0; j < topk; ++j) {  // topk distinct experts per token
                    const size_t k = size_t(j) + size_t(rng() % uint64_t(E - j));
                    std::swap(pool[size_t(j)], pool[k]);
                    ++counts[size_t(pool[size_t(j)])];
                }
            }
            std::vector<int32_t> offsets(size_t(E) + 1, 0);
            for (int64_t e = 0; e < E; ++e) offsets[size_t(e) + 1] = offsets[size_t(e)] + counts[size_t(e)];
            const int32_t most = *std::max_element(counts.begin(), counts.end());
            cuda::DeviceBuffer doff(offsets.size() * 4), x(size_t(N * cols) * 4), y(size_t(N * rows) * 4),
                y2(size_t(N * rows) * 4);
            doff.upload(offsets.data(), offsets.size() * 4);
            fill_f32<<<grid_for(size_t(N * cols)), 256, 0, s>>>(x.as<float>(), size_t(N * cols), rng());
            DSV4_LAUNCH_CHECK();
            const double flop = 2.0 * double(N) * double(rows) * double(cols);
            for (TensorType type : {TensorType::Q2_K, TensorType::Q8_0}) {
                const bool q2 = type == TensorType::Q2_K;
                const size_t rb = q2 ? size_t(cols / 256) * 84 : cuda::q8dev::row_bytes(cols);
                cuda::DeviceBuffer w(rb * size_t(rows * E));
                if (q2)
                    fill_q2_k<<<grid_for(w.size() / 84), 256, 0, s>>>(w.as<uint8_t>(), w.size() / 84, rng());
                else
                    fill_q8_0<<<grid_for(size_t(rows * E) * (cols / 32)), 256, 0, s>>>(w.as<uint8_t>(), rows * E, cols,
                                                                                       rng());
                DSV4_LAUNCH_CHECK();
                cuda::DeviceMat m;
                m.type = type;
                m.rows = rows;
                m.cols = cols;
                m.row_bytes = rb;
                m.count = E;
                m.data = w.as<const uint8_t>();
                // max_rows = T, as the model passes it (a token picks an expert at most once).
                auto tensor_with = [&](const cuda::GemmOptions& o) {
                    return [&, o] {
                        cuda::gemm_experts(m, x.as<const float>(), doff.as<const int32_t>(), T, N, y.as<float>(), ws, s, o);
                    };
                };
                const auto run_tensor = tensor_with(tensor);
                const auto run_tensor16 = tensor_with(tensor16);
                auto run_simt = [&] {
                    cuda::gemm_experts(m, x.as<const float>(), doff.as<const int32_t>(), T, y2.as<float>(), s);
                };
                run_tensor16();
                DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
                const std::vector<float> h16 = download(y, size_t(N * rows));
                run_tensor();
                run_simt();
                DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
                const std::vector<float> hs = download(y2, size_t(N * rows));
                const double check = rel_l2(download(y, size_t(N * rows)), hs), check16 = rel_l2(h16, hs);
                const Timing tt = time_calls(s, 2, reps, run_tensor);
                const Timing t16 = time_calls(s, 2, reps, run_tensor16);
                const Timing tsim = time_calls(s, 1, quick ? 1 : 3, run_simt);
                for (const auto& [impl, tm, chk] :
                     {std::tuple<const char*, Timing, double>{"dsv4_tensor", tt, check}, {"dsv4_tensor_f16", t16, check16},
                      {"dsv4_simt", tsim, 0.0}}) {
                    const double tf = flop / (tm.median_us * 1e6);
                    json r = {{"shape", "experts_256x2048x4096_top6"},
                              {"rows", rows},
                              {"cols", cols},
                              {"experts", E},
                              {"T", T},
                              {"rows_of_x", N},
                              {"max_rows_per_expert", most},
                              {"impl", impl},
                              {"weight_type", q2 ? "Q2_K" : "Q8_0"},
                              {"time_us", tm.median_us},
                              {"time_min_us", tm.min_us},
                              {"time_max_us", tm.max_us},
                              {"flop", flop},
                              {"tflop_s", tf},
                              {"check", chk},
                              {"check_what", chk == 0.0 ? "oracle" : "rel_l2_vs_dsv4_simt"}};
                    if (cublas_2048x4096_8192 > 0) {
                        r["pct_of_cublas"] = 100.0 * tf / cublas_2048x4096_8192;
                        r["pct_of_cublas_what"] = "cuBLAS bf16 dense 2048x4096 at T=8192 in this run";
                    }
                    results.push_back(r);
                    std::printf("experts 256x[2048,4096] T=%lld x6 %-12s %-5s %11.1f us %7.1f TFLOP/s  check %.2e\n",
                                (long long)T, impl, q2 ? "Q2_K" : "Q8_0", tm.median_us, tf, chk);
                    std::fflush(stdout);
                }
            }
        }

        cublasDestroy(cublas);
        receipt["results"] = results;
        receipt["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
        std::ofstream out(out_path);
        if (!out) dsv4::fail("cannot write ", out_path);
        out << receipt.dump(2) << "\n";
        std::printf("wrote %s\n", out_path.c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cuda_gemm: %s\n", e.what());
        return 1;
    }
}
