#include "backend/cpu/quant.h"

#include <algorithm>
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
// ---- Q2_K (llama.cpp's block_q2_K) ----
// A super-block of 256 values is 84 bytes: scales[16] at 0, qs[64] at 16, f16 d at 80, f16 dmin
// at 82. Sub-block s (values 16s .. 16s+15) decodes as d*(scales[s] & 15)*q - dmin*(scales[s] >> 4).
// The 2-bit quants are interleaved as ggml's kernels read them: each half of 128 values owns 32
// qs bytes, and bit pair k (shift 2k) of byte l in that half holds value 32k + l of the half.
constexpr int kQ2kValues = 256, kQ2kBytes = 84, kQ2kQs = 16, kQ2kD = 80, kQ2kDmin = 82;

int q2k_qs_byte(int i) { return kQ2kQs + 32 * (i / 128) + i % 32; }
int q2k_shift(int i) { return 2 * ((i % 128) / 32); }

float read_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}

void q2k_check_length(int64_t n) {
    if (n % kQ2kValues != 0) fail("a Q2_K row holds whole super-blocks of 256 values, not ", n);
}

void dequant_q2k_block(const uint8_t* blk, float* y) {
    const float d = read_f16(blk + kQ2kD), dmin = read_f16(blk + kQ2kDmin);
    for (int s = 0; s < 16; ++s) {
        const float a = d * float(blk[s] & 15), m = dmin * float(blk[s] >> 4);
        for (int j = 0; j < 16; ++j) {
            const int i = 16 * s + j;
            y[i] = a * float((blk[q2k_qs_byte(i)] >> q2k_shift(i)) & 3) - m;
        }
    }
}

// The nearest of the levels a*q - m (q = 0..3) for each of 16 values; returns the squared error
// and, when q is given, the quants. Clamping happens in float so that no value can overflow int.
float q2k_sub_error(const float* x, float a, float m, uint8_t* q) {
    // The quantiser calls this for every candidate, so it avoids library calls (nearbyint, fmin
    // and fmax are calls on baseline x86-64): clamp with comparisons (a NaN goes to 0), then
    // round the value, now in [0, 3], by adding 0.5 and truncating.
    const float inv = a > 0 ? 1.0f / a : 0.0f;
    float err = 0;
    for (int j = 0; j < 16; ++j) {
        float v = (x[j] + m) * inv;
        v = v > 0.0f ? v : 0.0f;
        v = v < 3.0f ? v : 3.0f;
        float t = float(int(v + 0.5f));
        float e = x[j] - (a * t - m);
        err += e * e;
        if (q) q[j] = uint8_t(t);
    }
    return err;
}

// Least-squares a, b of x ~ a*q + b for fixed quants, under the format's constraints a >= 0 and
// b <= 0 (b is stored negated, as the unsigned min).
void q2k_refit(const float* x, const uint8_t* q, float& a, float& b) {
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int j = 0; j < 16; ++j) {
        sq += q[j];
        sqq += double(q[j]) * q[j];
        sx += x[j];
        sqx += double(q[j]) * x[j];
    }
    const double det = 16 * sqq - sq * sq;
    double A = a, B;
    if (det > 0) {
        A = (16 * sqx - sq * sx) / det;
        B = (sqq * sx - sq * sqx) / det;
    } else {  // every quant equal: the scale is free, the offset is the mean residual
        B = (sx - A * sq) / 16;
    }
    if (B > 0) {  // a positive offset is not representable: refit the scale alone
        B = 0;
        A = sqq > 0 ? sqx / sqq : 0;
    }
    if (A < 0) {
        A = 0;
        B = std::fmin(0.0, sx / 16);
    }
    a = float(A);
    b = float(B);
}

struct Q2kFit {
    float a = 0, m = 0;  // x ~ a*q - m
};

// Unconstrained-precision scale and min of one sub-block of 16: candidate step sizes spanning the
// range [min(x, 0), max(x)] in 2.5 to 4 steps (fewer steps give headroom above the top value, more
// let the extremes saturate), each refined by two rounds of nearest-level assignment and
// least-squares refit; the candidate of least squared error wins. Min/max alone (3 steps) is one
// of the candidates, so the search is never worse than it.
Q2kFit q2k_fit_sub(const float* x) {
    float lo = 0, hi = x[0];
    for (int j = 0; j < 16; ++j) {
        lo = std::fmin(lo, x[j]);
        hi = std::fmax(hi, x[j]);
    }
    if (!(hi > lo)) return {0.0f, -lo};  // constant (or all-zero) sub-block: the min alone
    Q2kFit best;
    float best_err = INFINITY;
    uint8_t q[16];
    for (int k = 0; k <= 15; ++k) {
        float a = (hi - lo) / (2.5f + 0.1f * float(k)), b = lo;
        for (int round = 0; round < 2; ++round) {
            q2k_sub_error(x, a, -b, q);
            q2k_refit(x, q, a, b);
        }
        float err = q2k_sub_error(x, a, -b, nullptr);
        if (err < best_err) {
            best_err = err;
            best = {a, -b};
        }
    }
    return best;
}

// The 4-bit codes of one sub-block for the stored super-block scales: every pair within one
// code of the continuous fit (and one more above it), by the exact decoded error.
float q2k_pick_codes(const float* x, const Q2kFit& f, float d, float dmin, uint8_t& sc, uint8_t& mc) {
    const float cs = d > 0 ? f.a / d : 0.0f, cm = dmin > 0 ? f.m / dmin : 0.0f;
    const int s0 = int(std::fmin(std::fmax(std::floor(cs), 0.0f), 14.0f));
    const int m0 = int(std::fmin(std::fmax(std::floor(cm), 0.0f), 14.0f));
    float best = INFINITY;
    for (int s = std::max(s0 - 1, 0); s <= std::min(s0 + 2, 15); ++s)
        for (int m = std::max(m0 - 1, 0); m <= std::min(m0 + 2, 15); ++m) {
            float err = q2k_sub_error(x, d * float(s), dmin * float(m), nullptr);
            if (err < best) {
                best = err;
                sc = uint8_t(s);
                mc = uint8_t(m);
            }
        }
    return best;
}

// An f16 super-block scale: non-negative and finite (values beyond 15 * 65504 are not
// representable; they saturate rather than decode as inf).
uint16_t q2k_scale_f16(double v) { return f32_to_f16(float(std::fmin(std::fmax(v, 0.0), 65504.0))); }

void quantize_q2k_block(const float* x, uint8_t* blk) {
    Q2kFit fit[16];
    float amax = 0, mmax = 0;
    for (int s = 0; s < 16; ++s) {
        fit[s] = q2k_fit_sub(x + 16 * s);
        amax = std::fmax(amax, fit[s].a);
        mmax = std::fmax(mmax, fit[s].m);
    }
    // Start with the largest scale and the largest min at code 15, then alternate: the codes for
    // the stored (f16) super-block scales, and the least-squares super-block scales for those
    // codes and quants. Each accepted step lowers the squared error of the decoded block.
    uint16_t hd = q2k_scale_f16(amax / 15.0), hm = q2k_scale_f16(mmax / 15.0);
    uint8_t sc[16], mc[16], q[kQ2kValues];
    auto encode = [&](uint16_t d16, uint16_t m16, uint8_t* s_out, uint8_t* m_out) {
        float err = 0;
        for (int s = 0; s < 16; ++s)
            err += q2k_pick_codes(x + 16 * s, fit[s], f16_to_f32(d16), f16_to_f32(m16), s_out[s], m_out[s]);
        return err;
    };
    float err = encode(hd, hm, sc, mc);
    for (int iter = 0; iter < 3; ++iter) {
        const float d = f16_to_f32(hd), dmin = f16_to_f32(hm);
        double suu = 0, suv = 0, svv = 0, sux = 0, svx = 0;
        for (int s = 0; s < 16; ++s) {
            q2k_sub_error(x + 16 * s, d * float(sc[s]), dmin * float(mc[s]), q + 16 * s);
            for (int j = 0; j < 16; ++j) {
                const double u = double(sc[s]) * q[16 * s + j], v = mc[s], xv = x[16 * s + j];
                suu += u * u;
                suv += u * v;
                svv += v * v;
                sux += u * xv;
                svx += v * xv;
            }
        }
        // x ~ d*u - dmin*v with u = scale code * quant, v = min code.
        double nd = d, nm = dmin;
        if (svv == 0) {
            if (suu > 0) nd = sux / suu;
        } else if (suu == 0) {
            nm = -svx / svv;
        } else {
            const double det = suu * svv - suv * suv;
            if (!(det > 1e-12 * suu * svv)) break;  // collinear: the current scales are as good
            nd = (sux * svv - suv * svx) / det;
            nm = (suv * sux - suu * svx) / det;
        }
        const uint16_t hd2 = q2k_scale_f16(nd), hm2 = q2k_scale_f16(nm);
        if (hd2 == hd && hm2 == hm) break;
        uint8_t sc2[16], mc2[16];
        const float err2 = encode(hd2, hm2, sc2, mc2);
        if (!(err2 < err)) break;
        err = err2;
        hd = hd2;
        hm = hm2;
        std::memcpy(sc, sc2, 16);
        std::memcpy(mc, mc2, 16);
    }
    const float d = f16_to_f32(hd), dmin = f16_to_f32(hm);
    std::memset(blk, 0, kQ2kBytes);
    for (int s = 0; s < 16; ++s) {
        blk[s] = uint8_t(sc[s] | mc[s] << 4);
        q2k_sub_error(x + 16 * s, d * float(sc[s]), dmin * float(mc[s]), q + 16 * s);
    }
    for (int i = 0; i < kQ2kValues; ++i) blk[q2k_qs_byte(i)] |= uint8_t(q[i] << q2k_shift(i));
    std::memcpy(blk + kQ2kD, &hd, 2);
    std::memcpy(blk + kQ2kDmin, &hm, 2);
}
}  // namespace

float e2m1_value(int code) { return kE2m1[code & 15]; }

bool is_float_weight_type(TensorType t) {
    return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16 || t == TensorType::Q8_0 ||
           t == TensorType::MXFP4 || t == TensorType::Q2_K;
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
        case TensorType::Q2_K:
            q2k_check_length(n);
            for (int64_t b = 0; b < n / kQ2kValues; ++b) dequant_q2k_block(src + kQ2kBytes * b, dst + kQ2kValues * b);
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
        case TensorType::Q2_K:
            q2k_check_length(n);
            for (int64_t i = 0; i < n; ++i)  // one NaN or inf would poison a whole super-block's scales
                if (!std::isfinite(src[i])) fail("cannot quantise a non-finite value (", src[i], ") to Q2_K");
            for (int64_t b = 0; b < n / kQ2kValues; ++b) quantize_q2k_block(src + kQ2kValues * b, dst + kQ2kBytes * b);
            return;
        default:
            fail("cannot write float weights as ", gguf::type_name(t));
    }
}

}  // namespace dsv4::cpu
