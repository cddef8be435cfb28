// Storage formats of weights: conversion of one row to float32 and back.
//   Q8_0:  blocks of 32 values = f16 scale d + 32 int8 q, value = d * q.
//   MXFP4: blocks of 32 values = e8m0 exponent E + 16 bytes; byte j holds element j (low
//          nibble) and element j+16 (high nibble), each an e2m1 code; value = e2m1 * 2^(E-127).
#pragma once
#include <cstddef>
#include <cstdint>

#include "io/gguf.h"

namespace dsv4::cpu {

using gguf::TensorType;

bool is_float_weight_type(TensorType t);  // F32, F16, BF16, Q8_0, MXFP4
size_t row_bytes(TensorType t, int64_t n);
void dequant_row(TensorType t, const uint8_t* src, int64_t n, float* dst);
// F32, F16, BF16, Q8_0, MXFP4 (nearest e2m1 code after choosing the smallest exponent that fits).
void quantize_row(TensorType t, const float* src, int64_t n, uint8_t* dst);

// e2m1 code (0..15, bit 3 = sign) -> value.
float e2m1_value(int code);

}  // namespace dsv4::cpu
