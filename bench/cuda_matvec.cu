// Microbenchmark of the decode-critical op, y[T, rows] = x[T, cols] · Wᵀ, on one device, in
// one run: the HBM ceiling (a read kernel and a device-to-device copy), dsv4's matvec on Q8_0
// weights at DeepSeek-V4-Flash shapes for T = 1, 2, 4, 5, 8 (tensor path alone, with its x packing, and
// the simple oracle kernel), dsv4's BF16 tensor path, and cuBLAS bf16 on the same shapes. Writes
// one JSON receipt (docs/PERFORMANCE.md explains every key).
//
// Method (../.library METHOD.md): random weights generated on the device; weights rotated over
// enough copies (or expert sets) that every call reads from HBM, not L2; each figure is the
// median over replays of a CUDA graph of 20 calls (graph replay leaves host launch cost out, as
// decode with graphs will), with the spread over replays; bytes are the fewest the op must move
// (weights read once, x read, y written); the roofline is the read kernel's bandwidth.
//
//   bench_cuda_matvec --out receipt.json [--commit HASH] [--command "how it was run"]
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/common.cuh"
#include "bench_fill.cuh"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/matvec.h"

using dsv4::gguf::TensorType;
namespace cuda = dsv4::cuda;
using json = nlohmann::json;

#define CUBLAS_CHECK(expr)                                                                          \
    do {                                                                                            \
        cublasStatus_t st_ = (expr);                                                                \
        if (st_ != CUBLAS_STATUS_SUCCESS) dsv4::fail("cuBLAS error ", int(st_), " in ", #expr);      \
    } while (0)

namespace {

using bench::f32_to_bf16;
using bench::fill_bf16;
using bench::fill_f32;
using bench::fill_q2_k;
using bench::fill_q8_0;

// Reads n 16-byte words, four independent loads in flight per thread; the XOR goes to *sink
// only under a condition the data never meets, so the loads cannot be dropped.
__global__ void read_kernel(const uint4* p, size_t n, unsigned* sink) {
    uint4 acc = make_uint4(0, 0, 0, 0);
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            acc.x ^= v[u].x;
            acc.y ^= v[u].y;
            acc.z ^= v[u].z;
            acc.w ^= v[u].w;
        }
    }
    for (; i < n; i += stride) {
        const uint4 v = __ldcs(p + i);
        acc.x ^= v.x;
        acc.y ^= v.y;
    }
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u) *sink = acc.x;
}

void fill_launch_dims(size_t n, unsigned& grid) { grid = unsigned(std::min<size_t>((n + 255) / 256, 132 * 64)); }

struct Timing {
    double median_us = 0, min_us = 0, max_us = 0;
    std::string method;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Times call(i) for i = 0..: captures kCalls calls into a graph and times kReplays replays
// (falls back to timing plain launches when capture fails, and says so).
Timing time_calls(cudaStream_t s, const std::function<void(int)>& call) {
    constexpr int kCalls = 20, kReplays = 7;
    for (int i = 0; i < 3; ++i) call(i);  // warm-up: module load, attribute setting, cuBLAS workspace
    DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1;
    DSV4_CUDA_CHECK(cudaEventCreate(&e0));
    DSV4_CUDA_CHECK(cudaEventCreate(&e1));
    Timing t;
    std::vector<double> per_call;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    bool captured = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess;
    if (captured) {
        for (int i = 0; i < kCalls; ++i) call(i);
        captured = cudaStreamEndCapture(s, &graph) == cudaSuccess && graph &&
                   cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    }
    if (!captured) (void)cudaGetLastError();
    if (captured) {
        t.method = "cuda_graph_of_20_calls";
        DSV4_CUDA_CHECK(cudaGraphLaunch(exec, s));  // one untimed replay
        for (int r = 0; r < kReplays; ++r) {
            DSV4_CUDA_CHECK(cudaEventRecord(e0, s));
            DSV4_CUDA_CHECK(cudaGraphLaunch(exec, s));
            DSV4_CUDA_CHECK(cudaEventRecord(e1, s));
            DSV4_CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            per_call.push_back(1000.0 * ms / kCalls);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
    } else {
        t.method = "stream_launches_of_20_calls";
        for (int r = 0; r < kReplays; ++r) {
            DSV4_CUDA_CHECK(cudaEventRecord(e0, s));
            for (int i = 0; i < kCalls; ++i) call(r * kCalls + i);
            DSV4_CUDA_CHECK(cudaEventRecord(e1, s));
            DSV4_CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            per_call.push_back(1000.0 * ms / kCalls);
        }
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    t.median_us = median(per_call);
    t.min_us = *std::min_element(per_call.begin(), per_call.end());
    t.max_us = *std::max_element(per_call.begin(), per_call.end());
    return t;
}

struct Shape {
    std::string name;
    int64_t rows, cols;
    int64_t stack;  // matrices in the stack (1: a dense weight)
    int active;     // problems per call (experts in use)
    bool shared_x;  // every problem reads the same x (gate/up) or its own (down)
};

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0, r = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = double(a[i]) - double(b[i]);
        e += d * d;
        r += double(b[i]) * b[i];
    }
    return (std::isfinite(e) && r > 0) ? std::sqrt(e / r) : INFINITY;
}

}  // namespace

int main(int argc, char** argv) {
    std::string out_path = "cuda_matvec_receipt.json", commit = "unknown", command;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_cuda_matvec: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--out") out_path = next();
        else if (a == "--commit") commit = next();
        else if (a == "--command") command = next();
        else {
            std::fprintf(stderr, "bench_cuda_matvec: unknown argument %s (--out FILE --commit HASH --command TEXT)\n",
                         a.c_str());
            return 2;
        }
    }
    if (command.empty())
        for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
    try {
        if (cuda::device_count() == 0) {
            std::fprintf(stderr, "bench_cuda_matvec: no CUDA device\n");
            return 1;
        }
        const auto wall0 = std::chrono::steady_clock::now();
        cudaDeviceProp prop{};
        DSV4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        cudaStream_t s;
        DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        json receipt;
        receipt["bench"] = "cuda_matvec";
        receipt["commit"] = commit;
        receipt["command"] = command;
        receipt["device"] = prop.name;
        receipt["sm_count"] = prop.multiProcessorCount;
        receipt["l2_bytes"] = prop.l2CacheSize;
        receipt["device_memory_bytes"] = prop.totalGlobalMem;
        receipt["model"] = "synthetic: random weights at DeepSeek-V4-Flash matrix shapes";

        // ---- HBM ceilings ----
        const size_t hbm_bytes = size_t(4) << 30;
        cuda::DeviceBuffer big(hbm_bytes), sinkbuf(64);
        {
            unsigned grid;
            fill_launch_dims(hbm_bytes / 4, grid);
            fill_f32<<<grid, 256, 0, s>>>(big.as<float>(), hbm_bytes / 4, 7);
            DSV4_LAUNCH_CHECK();
        }
        const Timing read_t = time_calls(s, [&](int) {
            read_kernel<<<unsigned(prop.multiProcessorCount) * 8, 512, 0, s>>>(big.as<const uint4>(), hbm_bytes / 16,
                                                                           sinkbuf.as<unsigned>());
        });
        const size_t half = hbm_bytes / 2;
        const Timing copy_t = time_calls(s, [&](int) {
            DSV4_CUDA_CHECK(cudaMemcpyAsync(big.as<uint8_t>() + half, big.get(), half, cudaMemcpyDeviceToDevice, s));
        });
        const double read_gbs = double(hbm_bytes) / (read_t.median_us * 1e3);
        const double copy_gbs = double(2 * half) / (copy_t.median_us * 1e3);
        receipt["hbm"] = {{"read_kernel_bytes", hbm_bytes},      {"read_kernel_time_us", read_t.median_us},
                          {"read_kernel_GB_s", read_gbs},        {"copy_bytes_read_plus_written", 2 * half},
                          {"copy_time_us", copy_t.median_us},    {"copy_GB_s", copy_gbs}};
        receipt["roofline"] = "hbm.read_kernel_GB_s (measured in this run)";
        receipt["roofline_GB_s"] = read_gbs;
        std::printf("HBM read kernel %.0f GB/s, device copy %.0f GB/s (read + write)\n", read_gbs, copy_gbs);
        big = cuda::DeviceBuffer();

        cublasHandle_t cublas;
        CUBLAS_CHECK(cublasCreate(&cublas));
        CUBLAS_CHECK(cublasSetStream(cublas, s));

        const std::vector<Shape> shapes = {
            {"attn_proj_4096x4096", 4096, 4096, 1, 1, true},
            {"dense_16384x4096", 16384, 4096, 1, 1, true},
            {"experts_gate_6of256_2048x4096", 2048, 4096, 256, 6, true},
            {"experts_down_6of256_4096x2048", 4096, 2048, 256, 6, false},
            {"lm_head_129280x4096", 129280, 4096, 1, 1, true},
            {"router_256x4096", 256, 4096, 1, 1, true},
        };
        const int Ts[] = {1, 2, 4, 5, 8};  // 4 | 5: where matvec switches Q8_0 from the int8 kernel to the 16-bit one
        constexpr size_t kRotateBytes = size_t(256) << 20;  // > 4x the 60 MB L2
        std::mt19937 rng(1234);
        json results = json::array();
        std::vector<std::string> table;

        for (const Shape& sh : shapes) {
            const size_t q8_row = cuda::q8dev::row_bytes(sh.cols), bf_row = size_t(sh.cols) * 2;
            const size_t q8_mat = q8_row * sh.rows, bf_mat = bf_row * sh.rows;
            // Dense weights rotate over copies; stacks rotate over expert sets.
            const int copies = sh.stack > 1 ? 1 : int(std::clamp<size_t>((kRotateBytes + q8_mat - 1) / q8_mat, 1, 16));
            const int bf_copies = sh.stack > 1 ? 1 : int(std::clamp<size_t>((kRotateBytes + bf_mat - 1) / bf_mat, 1, 16));
            unsigned grid;
            // Q2_K for the expert stacks (the 2-bit expert format), F32 for the router.
            const bool with_q2 = sh.stack > 1, with_f32 = sh.name.rfind("router", 0) == 0;
            const size_t q2_row = size_t(sh.cols / 256) * 84, q2_mat = q2_row * sh.rows;
            const size_t f32_row = size_t(sh.cols) * 4, f32_mat = f32_row * sh.rows;
            const int f32_copies = int(std::clamp<size_t>((kRotateBytes + f32_mat - 1) / f32_mat, 1, 64));
            cuda::DeviceBuffer wq(q8_mat * sh.stack * copies), wb(bf_mat * sh.stack * bf_copies);
            cuda::DeviceBuffer w2(with_q2 ? q2_mat * sh.stack : 0), wf(with_f32 ? f32_mat * f32_copies : 0);
            if (with_q2) {
                fill_launch_dims(w2.size() / 84, grid);
                fill_q2_k<<<grid, 256, 0, s>>>(w2.as<uint8_t>(), w2.size() / 84, 19 + rng());
            }
            if (with_f32) {
                fill_launch_dims(wf.size() / 4, grid);
                fill_f32<<<grid, 256, 0, s>>>(wf.as<float>(), wf.size() / 4, 23 + rng());
            }
            const int64_t q8_rows = sh.rows * sh.stack * copies;  // every copy of every matrix
            fill_launch_dims(size_t(q8_rows) * (sh.cols / 32), grid);
            fill_q8_0<<<grid, 256, 0, s>>>(wq.as<uint8_t>(), q8_rows, sh.cols, 11 + rng());
            fill_launch_dims(wb.size() / 2, grid);
            fill_bf16<<<grid, 256, 0, s>>>(wb.as<uint16_t>(), wb.size() / 2, 13 + rng(), 0.05f);
            DSV4_LAUNCH_CHECK();

            constexpr int kSets = 40;
            std::vector<int32_t> ids(size_t(kSets) * sh.active);
            for (int k = 0; k < kSets; ++k) {
                std::vector<int32_t> all(size_t(sh.stack));
                for (int64_t e = 0; e < sh.stack; ++e) all[size_t(e)] = int32_t(e);
                std::shuffle(all.begin(), all.end(), rng);
                for (int j = 0; j < sh.active; ++j) ids[size_t(k) * sh.active + j] = all[size_t(j)];
            }
            cuda::DeviceBuffer dids(ids.size() * 4);
            dids.upload(ids.data(), ids.size() * 4);

            for (int T : Ts) {
                const int n_x = sh.shared_x ? 1 : sh.active;
                const size_t xn = size_t(n_x) * T * sh.cols, yn = size_t(sh.active) * T * sh.rows;
                cuda::DeviceBuffer x(xn * 4), xb(xn * 2), y(yn * 4), y2(yn * 4), yb(yn * 4);
                fill_launch_dims(xn, grid);
                fill_f32<<<grid, 256, 0, s>>>(x.as<float>(), xn, 17 + rng());
                f32_to_bf16<<<grid, 256, 0, s>>>(x.as<const float>(), xb.as<__nv_bfloat16>(), xn);
                DSV4_LAUNCH_CHECK();

                auto mat_at = [&](const cuda::DeviceBuffer& buf, TensorType type, size_t row_bytes, size_t mat_bytes,
                                  int copy) {
                    cuda::DeviceMat m;
                    m.type = type;
                    m.rows = sh.rows;
                    m.cols = sh.cols;
                    m.row_bytes = row_bytes;
                    m.count = sh.stack;
                    m.data = buf.as<const uint8_t>() + size_t(copy) * mat_bytes * sh.stack;
                    return m;
                };
                auto args_for = [&](int i, float* yout) {
                    cuda::MatvecArgs a;
                    a.x = x.as<const float>();
                    a.ldx = sh.cols;
                    a.x_stride = sh.shared_x ? 0 : int64_t(T) * sh.cols;
                    a.T = T;
                    a.y = yout;
                    a.ldy = sh.rows;
                    a.y_stride = int64_t(T) * sh.rows;
                    a.n = sh.active;
                    a.ids = sh.stack > 1 ? dids.as<const int32_t>() + size_t(i % kSets) * sh.active : nullptr;
                    return a;
                };
                const cuda::DeviceMat mq0 = mat_at(wq, TensorType::Q8_0, q8_row, q8_mat, 0);
                const cuda::DeviceMat mb0 = mat_at(wb, TensorType::BF16, bf_row, bf_mat, 0);
                const size_t ws_q = cuda::matvec_workspace_bytes(mq0, args_for(0, y.as<float>()));
                const size_t ws_b = cuda::matvec_workspace_bytes(mb0, args_for(0, y.as<float>()));
                cuda::DeviceBuffer wsq(ws_q), wsb(ws_b);

                // Correctness on these shapes before timing: tensor vs simple path, same data.
                cuda::MatvecOptions simple;
                simple.path = cuda::MatvecPath::Simple;
                std::vector<float> h1(yn), h2(yn);
                cuda::matvec(mq0, args_for(0, y.as<float>()), wsq.get(), ws_q, s);
                cuda::matvec(mq0, args_for(0, y2.as<float>()), nullptr, 0, s, simple);
                DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
                y.download(h1.data(), yn * 4);
                y2.download(h2.data(), yn * 4);
                const double q8_check = rel_l2(h1, h2);
                cuda::matvec(mb0, args_for(0, y.as<float>()), wsb.get(), ws_b, s);
                cuda::matvec(mb0, args_for(0, y2.as<float>()), nullptr, 0, s, simple);
                DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
                y.download(h1.data(), yn * 4);
                y2.download(h2.data(), yn * 4);
                const double bf_check = rel_l2(h1, h2);

                // cuBLAS bf16: y_p^T [rows, T] = W_p [rows, cols] · x_p^T, one GEMM (dense) or a
                // batched GEMM over the active experts' pointers.
                const float one = 1.0f, zero = 0.0f;
                std::vector<const void*> hA(size_t(kSets) * sh.active), hB(hA.size());
                std::vector<void*> hC(hA.size());
                for (int k = 0; k < kSets; ++k)
                    for (int j = 0; j < sh.active; ++j) {
                        const size_t q = size_t(k) * sh.active + j;
                        const int64_t e = sh.stack > 1 ? ids[q] : 0;
                        hA[q] = wb.as<const uint8_t>() + size_t(e) * bf_mat;
                        hB[q] = xb.as<const __nv_bfloat16>() + (sh.shared_x ? 0 : size_t(j) * T * sh.cols);
                        hC[q] = yb.as<float>() + size_t(j) * T * sh.rows;
                    }
                cuda::DeviceBuffer dA(hA.size() * 8), dB(hB.size() * 8), dC(hC.size() * 8);
                dA.upload(hA.data(), hA.size() * 8);
                dB.upload(hB.data(), hB.size() * 8);
                dC.upload(hC.data(), hC.size() * 8);
                auto cublas_call = [&](int i) {
                    if (sh.stack == 1) {
                        const void* A = wb.as<const uint8_t>() + size_t(i % bf_copies) * bf_mat;
                        CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(sh.rows), T, int(sh.cols), &one,
                                                  A, CUDA_R_16BF, int(sh.cols), xb.get(), CUDA_R_16BF, int(sh.cols),
                                                  &zero, yb.get(), CUDA_R_32F, int(sh.rows), CUBLAS_COMPUTE_32F,
                                                  CUBLAS_GEMM_DEFAULT));
                    } else {
                        const size_t q = size_t(i % kSets) * sh.active;
                        CUBLAS_CHECK(cublasGemmBatchedEx(
                            cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(sh.rows), T, int(sh.cols), &one,
                            dA.as<const void*>() + q, CUDA_R_16BF, int(sh.cols), dB.as<const void*>() + q, CUDA_R_16BF,
                            int(sh.cols), &zero, dC.as<void*>() + q, CUDA_R_32F, int(sh.rows), sh.active,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                    }
                };
                cublas_call(0);
                cuda::matvec(mb0, args_for(0, y.as<float>()), wsb.get(), ws_b, s);  // set 0, as cuBLAS
                DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
                y.download(h1.data(), yn * 4);
                yb.download(h2.data(), yn * 4);
                const double bf_vs_cublas = rel_l2(h1, h2);

                const size_t x_bytes = xn * 4, y_bytes = yn * 4;
                const size_t q8_bytes = q8_mat * sh.active + x_bytes + y_bytes;
                const size_t bf_bytes = bf_mat * sh.active + x_bytes + y_bytes;
                const size_t cublas_bytes = bf_mat * sh.active + xn * 2 + y_bytes;

                struct Impl {
                    std::string name, weight_type;
                    size_t bytes;
                    std::function<void(int)> call;
                    double check;
                    std::string check_what;
                };
                std::vector<Impl> impls;
                impls.push_back({"dsv4_tensor", "Q8_0", q8_bytes,
                                 [&](int i) {
                                     cuda::matvec(mat_at(wq, TensorType::Q8_0, q8_row, q8_mat, i % copies),
                                                  args_for(i, y.as<float>()), wsq.get(), ws_q, s);
                                 },
                                 q8_check, "rel_l2_vs_dsv4_simple"});
                impls.push_back({"dsv4_simple", "Q8_0", q8_bytes,
                                 [&](int i) {
                                     cuda::matvec(mat_at(wq, TensorType::Q8_0, q8_row, q8_mat, i % copies),
                                                  args_for(i, y2.as<float>()), nullptr, 0, s, simple);
                                 },
                                 0.0, "oracle"});
                impls.push_back({"dsv4_tensor", "BF16", bf_bytes,
                                 [&](int i) {
                                     cuda::matvec(mat_at(wb, TensorType::BF16, bf_row, bf_mat, i % bf_copies),
                                                  args_for(i, y.as<float>()), wsb.get(), ws_b, s);
                                 },
                                 bf_check, "rel_l2_vs_dsv4_simple"});
                impls.push_back({"cublas_gemm", "BF16", cublas_bytes, cublas_call, bf_vs_cublas,
                                 "rel_l2_dsv4_bf16_vs_cublas (cuBLAS rounds x to bf16)"});
                // The dedicated CUDA-core kernels (Auto), checked against the oracle on set 0.
                auto add_dedicated = [&](TensorType type, const cuda::DeviceBuffer& buf, size_t row_bytes,
                                         size_t mat_bytes, int n_copies) {
                    const cuda::DeviceMat m0 = mat_at(buf, type, row_bytes, mat_bytes, 0);
                    const size_t wsn = cuda::matvec_workspace_bytes(m0, args_for(0, y.as<float>()));
                    auto wsd = std::make_shared<cuda::DeviceBuffer>(wsn);  // Q2_K's int8 kernel packs x here
                    cuda::matvec(m0, args_for(0, y.as<float>()), wsd->get(), wsn, s);
                    cuda::matvec(m0, args_for(0, y2.as<float>()), nullptr, 0, s, simple);
                    DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
                    y.download(h1.data(), yn * 4);
                    y2.download(h2.data(), yn * 4);
                    impls.push_back({"dsv4_auto", dsv4::gguf::type_name(type), mat_bytes * sh.active + x_bytes + y_bytes,
                                     [&, type, row_bytes, mat_bytes, n_copies, wsd, wsn](int i) {
                                         cuda::matvec(mat_at(buf, type, row_bytes, mat_bytes, i % n_copies),
                                                      args_for(i, y.as<float>()), wsd->get(), wsn, s);
                                     },
                                     rel_l2(h1, h2), "rel_l2_vs_dsv4_simple"});
                };
                if (with_q2) add_dedicated(TensorType::Q2_K, w2, q2_row, q2_mat, 1);
                if (with_f32) add_dedicated(TensorType::F32, wf, f32_row, f32_mat, f32_copies);

                for (const Impl& im : impls) {
                    const Timing tm = time_calls(s, im.call);
                    const double gbs = double(im.bytes) / (tm.median_us * 1e3);
                    json r = {{"shape", sh.name},
                              {"rows", sh.rows},
                              {"cols", sh.cols},
                              {"matrices_in_stack", sh.stack},
                              {"matrices_per_call", sh.active},
                              {"x_shared", sh.shared_x},
                              {"T", T},
                              {"impl", im.name},
                              {"weight_type", im.weight_type},
                              {"time_us", tm.median_us},
                              {"time_min_us", tm.min_us},
                              {"time_max_us", tm.max_us},
                              {"timing", tm.method},
                              {"bytes", im.bytes},
                              {"GB_s", gbs},
                              {"roofline_pct", 100.0 * gbs / read_gbs},
                              {"check", im.check},
                              {"check_what", im.check_what}};
                    results.push_back(r);
                    char line[256];
                    std::snprintf(line, sizeof line, "%-32s T=%d %-22s %-5s %9.2f us %7.0f GB/s %5.1f%%", sh.name.c_str(),
                                  T, im.name.c_str(), im.weight_type.c_str(), tm.median_us, gbs, 100.0 * gbs / read_gbs);
                    table.push_back(line);
                    std::printf("%s\n", line);
                    std::fflush(stdout);
                }
            }
        }
        cublasDestroy(cublas);
        receipt["results"] = results;
        receipt["wall_s"] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
        std::ofstream out(out_path);
        if (!out) dsv4::fail("cannot write ", out_path);
        out << receipt.dump(2) << "\n";
        std::printf("wrote %s\n", out_path.c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cuda_matvec: %s\n", e.what());
        return 1;
    }
}
