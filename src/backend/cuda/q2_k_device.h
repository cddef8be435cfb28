// The Q2_K side of the int8 tensor-core matvec (matvec_int8.cu), in a header that compiles for
// the host too, so that tests/test_q2_k_int8.cpp replays a warp of the kernel on the CPU: where a
// lane finds its weight words in a GGUF Q2_K row, and how it turns them into A fragments.
//
// Group gi (128 columns, as for Q8_0) is half h = gi % 2 of super-block gi / 2 (84 bytes:
// scales[16], qs[64], f16 d, f16 dmin). Lane (g, t)'s block t is the 32 values 128 h + 32 t + l,
// l = 0..31, whose 2-bit codes are bits 2t of qs[32 h + l], in sub-blocks 8 h + 2 t (l < 16) and
// 8 h + 2 t + 1. A weight is d (sc & 15) q - dmin (sc >> 4): the A fragments hold the integers
// (sc & 15) q (at most 45, so the byte-wise product has no carry), and a second set holds the min
// code sc >> 4 in every byte, so that per block and limb the MMAs give sum (sc & 15) q x and
// sum (sc >> 4) x exactly in int32. The q8dev fragment helpers (a_frag, b_frag, combine_limbs)
// and x limbs are shared with Q8_0.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/q8_0_device.h"

namespace dsv4::cuda::q2dev {

constexpr int kSuperBlockBytes = 84;

// Byte offsets in a row of group gi: qs word i (0..7) of its half, the scale word holding the
// sub-blocks of lane quad position t (8 h + 2 t and + 1), and d/dmin.
DSV4_HD size_t qs_word_offset(int gi, int i) { return size_t(gi >> 1) * kSuperBlockBytes + 16 + 32 * (gi & 1) + 4 * i; }
DSV4_HD size_t scale_word_offset(int gi, int t) { return size_t(gi >> 1) * kSuperBlockBytes + 8 * (gi & 1) + 4 * (t >> 1); }
DSV4_HD size_t dd_offset(int gi) { return size_t(gi >> 1) * kSuperBlockBytes + 80; }

// Lane t's codes of one row times their sub-block scales (A: the row's 8 words of one fragment
// row, as q8dev::a_frag takes them), and its two min codes replicated into every byte (M[0]:
// values 0..15 of the block, MMAs 0 and 1; M[1]: values 16..31, MMAs 2 and 3).
struct Frag {
    uint32_t A[8], M[2];
};
DSV4_HD Frag frag(const uint32_t (&W)[8], uint32_t scale_word, int t) {
    Frag f;
    const uint32_t s = scale_word >> (8 * ((2 * t) & 3));
    const uint32_t a0 = s & 15u, a1 = (s >> 8) & 15u;
    f.M[0] = ((s >> 4) & 15u) * 0x01010101u;
    f.M[1] = ((s >> 12) & 15u) * 0x01010101u;
    for (int i = 0; i < 8; ++i) f.A[i] = ((W[i] >> (2 * t)) & 0x03030303u) * (i < 4 ? a0 : a1);
    return f;
}
// The min fragment of MMA m from rows g (fg) and g + 8 (fh).
DSV4_HD q8dev::AFrag min_frag(const Frag& fg, const Frag& fh, int m) {
    return {fg.M[m >> 1], fh.M[m >> 1], fg.M[m >> 1], fh.M[m >> 1]};
}

}  // namespace dsv4::cuda::q2dev
