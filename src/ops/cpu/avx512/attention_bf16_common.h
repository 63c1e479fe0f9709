// What both engines of the bf16 prefill attention share (attention_amx.cpp, attention_dot.cpp): bf16
// pairs, the operand of tdpbf16ps and vdpbf16ps (two bf16 values in one 32-bit word, the first in the
// low half), and a row's last step. Compiled only into -mavx512bf16 objects; include after defining
// GDN_SIMD_AVX512.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "ops/cpu/simd.h"

namespace gdn::cpu::avx512 {

// 32 floats -> 16 bf16 pairs (k, k + 1) in memory order.
inline void pack_pairs32(const float* x, uint32_t* out) {
    const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
    _mm512_storeu_si512(out, (__m512i)h);
}

// out[0, D) = o[0, D) x inv_sum, times sigmoid(gate[d]) when there is a gate.
inline void write_gated_row(const float* o, float inv_sum, const float* gate, int64_t D, float* out) {
    const __m512 inv = _mm512_set1_ps(inv_sum);
    for (int64_t d = 0; d < D; d += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(o + d), inv);
        if (gate) v = _mm512_mul_ps(v, simd::vsigmoid(_mm512_loadu_ps(gate + d)));
        _mm512_storeu_ps(out + d, v);
    }
}

}  // namespace gdn::cpu::avx512
