#include "backend/cpu/quant.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace dsv4::cpu {

namespace {
constexpr float kE2m1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float e8m0_value(uint8_t e) { return std::ldexp(1.0f, int(e) - 127); }

int nearest_e2m1(float x) {
    int best = 0;
    float best_err = std::fabs(x - kE2m1[0]);
    for (int c = 1; c < 16; ++c) {
        float err = std::fabs(x - kE2m1[c]);
        if (err < best_err) {
            best = c;
            best_err = err;
        }
    }
    return best;
}
}  // namespace

float e2m1_value(int code) { return kE2m1[code & 15]; }

bool is_float_weight_type(TensorType t) {
    return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16 || t == TensorType::Q8_0 ||
           t == TensorType::MXFP4;
}

size_t row_bytes(TensorType t, int64_t n) { return gguf::tensor_bytes(t, {n}); }

void dequant_row(TensorType t, const uint8_t* src, int64_t n, float* dst) {
    switch (t) {
        case TensorType::F32:
            std::memcpy(dst, src, size_t(n) * 4);
            return;
        case TensorType::F16:
        case TensorType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, src + 2 * i, 2);
                dst[i] = t == TensorType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
            }
            return;
        case TensorType::Q8_0:
            for (int64_t b = 0; b < n / 32; ++b) {
                const uint8_t* blk = src + 34 * b;
                uint16_t h;
                std::memcpy(&h, blk, 2);
                float d = f16_to_f32(h);
                const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
                for (int j = 0; j < 32; ++j) dst[32 * b + j] = d * float(q[j]);
            }
            return;
        case TensorType::MXFP4:
            for (int64_t b = 0; b < n / 32; ++b) {
                const uint8_t* blk = src + 17 * b;
                float d = e8m0_value(blk[0]);
                for (int j = 0; j < 16; ++j) {
                    dst[32 * b + j] = kE2m1[blk[1 + j] & 15] * d;
                    dst[32 * b + j + 16] = kE2m1[blk[1 + j] >> 4] * d;
                }
            }
            return;
        default:
            fail("cannot read a ", gguf::type_name(t), " tensor as float weights");
    }
}

void quantize_row(TensorType t, const float* src, int64_t n, uint8_t* dst) {
    switch (t) {
        case TensorType::F32:
            std::memcpy(dst, src, size_t(n) * 4);
            return;
        case TensorType::F16:
        case TensorType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h = t == TensorType::F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return;
        case TensorType::Q8_0:
            for (int64_t b = 0; b < n / 32; ++b) {
                const float* x = src + 32 * b;
                float amax = 0;
                for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
                float d = amax / 127.0f;
                uint16_t h = f32_to_f16(d);
                float dq = f16_to_f32(h);  // quantise against the scale that will be read back
                uint8_t* blk = dst + 34 * b;
                std::memcpy(blk, &h, 2);
                for (int j = 0; j < 32; ++j) {
                    float v = dq != 0 ? std::nearbyint(x[j] / dq) : 0.0f;
                    v = std::fmax(-127.0f, std::fmin(127.0f, v));
                    blk[2 + j] = uint8_t(int8_t(v));
                }
            }
            return;
        case TensorType::MXFP4:
            for (int64_t b = 0; b < n / 32; ++b) {
                const float* x = src + 32 * b;
                float amax = 0;
                for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
                int e = amax > 0 ? int(std::ceil(std::log2(amax / 6.0f))) : -127;
                e = e < -127 ? -127 : e > 127 ? 127 : e;
                uint8_t* blk = dst + 17 * b;
                blk[0] = uint8_t(e + 127);
                float inv = std::ldexp(1.0f, -e);
                for (int j = 0; j < 16; ++j) {
                    int lo = nearest_e2m1(x[j] * inv), hi = nearest_e2m1(x[j + 16] * inv);
                    blk[1 + j] = uint8_t(lo | hi << 4);
                }
            }
            return;
        default:
            fail("cannot write float weights as ", gguf::type_name(t));
    }
}

}  // namespace dsv4::cpu
