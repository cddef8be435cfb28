// Registration of the CUDA backend, and what bench needs of it: the traffic per token of the
// uploaded weights and the device's measured ceilings.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/forward.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/sharded_backend.h"

namespace dsv4::cuda {

namespace {

std::unique_ptr<ForwardBackend> open_cuda(const Model& m, int gpus) {
    if (device_count() == 0) fail("--backend cuda: no CUDA device is visible (cudaGetDeviceCount found none)");
    if (!m.has_file()) fail(m.name(), ": a model without a file cannot be uploaded");
    gemm_env_precision();  // a bad DSV4_GEMM_PRECISION stops here, before the upload
    if (gpus > 1) return make_sharded_backend(m, gpus);
    return std::make_unique<CudaBackend>(m.config(), upload_weights(m.config(), m.weights()));
}

double elements(const DeviceWeight& w) { return double(w.mat.rows) * double(w.mat.cols) * double(w.mat.count); }
double bytes_of(const DeviceWeight& w) { return double(w.mat.bytes()); }

// Every matrix of a layer with whether it is a routed expert stack.
template <class F>
void each_matrix(const DeviceLayer& L, F&& f) {
    for (const DeviceWeight* w : {&L.hc_attn_fn, &L.hc_ffn_fn, &L.q_a, &L.q_b, &L.kv, &L.o_a, &L.o_b, &L.comp.kv,
                                  &L.comp.gate, &L.idx_comp.kv, &L.idx_comp.gate, &L.idx_q_b, &L.idx_proj,
                                  &L.gate_inp, &L.gate_sh, &L.up_sh, &L.down_sh})
        f(*w, false);
    for (const DeviceWeight* w : {&L.gate_exps, &L.up_exps, &L.down_exps}) f(*w, true);
}

__global__ void read_kernel(const int4* p, int64_t n, int* sink) {
    int acc = 0;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        int4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff) *sink = acc;  // practically never: keeps the loads alive
}

// cuBLAS is opened at run time, so that the dsv4 binary needs no cuBLAS to start.
using cublasHandle = void*;
using CreateFn = int (*)(cublasHandle*);
using DestroyFn = int (*)(cublasHandle);
using GemmExFn = int (*)(cublasHandle, int, int, int, int, int, const void*, const void*, int, int, const void*, int,
                         int, const void*, void*, int, int, int, int);

}  // namespace

void register_cuda_backend() { register_backend("cuda", open_cuda); }

double CudaBackend::decode_bytes_per_token() const {
    const double share = cfg_.n_experts > 0 ? double(cfg_.top_k) / double(cfg_.n_experts) : 1.0;
    double b = double(w_.embed.mat.row_bytes) + bytes_of(w_.output) + bytes_of(w_.hc_head_fn);
    for (const DeviceLayer& L : w_.layers) each_matrix(L, [&](const DeviceWeight& w, bool expert) {
        b += bytes_of(w) * (expert ? share : 1.0);
    });
    return b;
}

double CudaBackend::mtp_bytes_per_token() const {
    if (w_.mtp.empty()) return 0;
    const double share = cfg_.n_experts > 0 ? double(cfg_.top_k) / double(cfg_.n_experts) : 1.0;
    const DeviceMtp& m = w_.mtp[0];
    double b = bytes_of(w_.output) + bytes_of(m.e_proj) + bytes_of(m.h_proj) + bytes_of(m.hc_head_fn);
    each_matrix(m.block, [&](const DeviceWeight& w, bool expert) { b += bytes_of(w) * (expert ? share : 1.0); });
    return b;
}

double CudaBackend::prefill_flop_per_token() const {
    const double share = cfg_.n_experts > 0 ? double(cfg_.top_k) / double(cfg_.n_experts) : 1.0;
    double f = 0;
    for (const DeviceLayer& L : w_.layers) each_matrix(L, [&](const DeviceWeight& w, bool expert) {
        f += 2.0 * elements(w) * (expert ? share : 1.0);
    });
    return f;
}

ForwardBackend::Peak CudaBackend::measure_peak() const {
    std::lock_guard<std::mutex> lk(mu_);
    Peak p;
    cudaEvent_t e0, e1;
    DSV4_CUDA_CHECK(cudaEventCreate(&e0));
    DSV4_CUDA_CHECK(cudaEventCreate(&e1));
    auto time_ms = [&](auto&& launch) {
        float best = 1e30f;
        for (int rep = 0; rep < 6; ++rep) {
            DSV4_CUDA_CHECK(cudaEventRecord(e0));
            launch();
            DSV4_CUDA_CHECK(cudaEventRecord(e1));
            DSV4_CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep > 0) best = std::min(best, ms);  // the first is a warm-up
        }
        return double(best);
    };
    {
        const size_t n = size_t(1) << 30;  // 1 GiB, far beyond the L2
        DeviceBuffer buf(n), sink(sizeof(int));
        buf.fill_bytes(1);
        const int blocks = device_limits().sms * 8;
        double ms = time_ms([&] {
            read_kernel<<<blocks, 512>>>(buf.as<const int4>(), int64_t(n / 16), sink.as<int>());
        });
        p.read_bytes_s = double(n) / (ms * 1e-3);
    }
    std::string flop_method = "cuBLAS not found (libcublas.so.13): no tensor-core peak";
    void* lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("/usr/local/cuda/lib64/libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
        auto create = reinterpret_cast<CreateFn>(dlsym(lib, "cublasCreate_v2"));
        auto destroy = reinterpret_cast<DestroyFn>(dlsym(lib, "cublasDestroy_v2"));
        auto gemm_ex = reinterpret_cast<GemmExFn>(dlsym(lib, "cublasGemmEx"));
        cublasHandle h = nullptr;
        if (create && destroy && gemm_ex && create(&h) == 0) {
            const int n = 8192;
            DeviceBuffer a(size_t(n) * n * 2), b(size_t(n) * n * 2), c(size_t(n) * n * 4);
            a.fill_bytes(0x3c);  // bf16 0x3c3c: about 0.0115, finite
            b.fill_bytes(0x3c);
            const float one = 1.0f, zero = 0.0f;
            // CUBLAS_OP_N = 0, CUDA_R_16BF = 14, CUDA_R_32F = 0, CUBLAS_COMPUTE_32F = 68,
            // CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 (the public enum values of cublas_api.h / library_types.h).
            int status = 0;
            double ms = time_ms([&] {
                status |= gemm_ex(h, 0, 0, n, n, n, &one, a.get(), 14, n, b.get(), 14, n, &zero, c.get(), 0, n, 68, 99);
            });
            if (status == 0) {
                p.flop_s = 2.0 * double(n) * n * n / (ms * 1e-3);
                flop_method = "cuBLAS cublasGemmEx bf16 x bf16 -> f32, 8192^3, best of 5";
            } else {
                flop_method = "cuBLAS GemmEx failed: no tensor-core peak";
            }
            destroy(h);
        }
    }
    DSV4_CUDA_CHECK(cudaEventDestroy(e0));
    DSV4_CUDA_CHECK(cudaEventDestroy(e1));
    p.method = "HBM: a streaming read kernel over 1 GiB (16-byte __ldcs loads), best of 5; " + flop_method;
    return p;
}

}  // namespace dsv4::cuda
