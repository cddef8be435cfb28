// Storage formats of weights: conversion of one row to float32 and back.
//   Q8_0:  blocks of 32 values = f16 scale d + 32 int8 q, value = d * q.
//   MXFP4: blocks of 32 values = e8m0 exponent E + 16 bytes; byte j holds element j (low
//          nibble) and element j+16 (high nibble), each an e2m1 code; value = e2m1 * 2^(E-127).
//   Q2_K:  llama.cpp's 2-bit k-quant (ggml type 10), super-blocks of 256 values in 84 bytes
//          (2.625 bits per weight): 16 bytes of sub-block scale (low nibble) / min (high nibble)
//          codes, 64 bytes of 2-bit quants, f16 d, f16 dmin. Value i of a super-block belongs to
//          sub-block s = i/16 and has quant q = (qs[32*(i/128) + i%32] >> 2*((i%128)/32)) & 3;
//          value = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4). docs/FORMAT.md has the table.
#pragma once
#include <cstddef>
#include <cstdint>

#include "io/gguf.h"

namespace dsv4::cpu {

using gguf::TensorType;

bool is_float_weight_type(TensorType t);  // F32, F16, BF16, Q8_0, MXFP4, Q2_K
size_t row_bytes(TensorType t, int64_t n);
void dequant_row(TensorType t, const uint8_t* src, int64_t n, float* dst);
// F32, F16, BF16, Q8_0, MXFP4 (nearest e2m1 code after choosing the smallest exponent that fits),
// Q2_K (per sub-block a least-squares search for scale and min, then the 4-bit codes and the two
// f16 super-block scales chosen together to minimise the squared error of the decoded values).
// Q2_K rows must be whole super-blocks of 256 values (both functions throw otherwise).
void quantize_row(TensorType t, const float* src, int64_t n, uint8_t* dst);

// e2m1 code (0..15, bit 3 = sign) -> value.
float e2m1_value(int code);

}  // namespace dsv4::cpu
