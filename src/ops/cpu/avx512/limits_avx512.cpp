#define GDN_SIMD_AVX512
#include <immintrin.h>

#include "ops/cpu/limits_kernels.h"
#include "ops/cpu/simd.h"

namespace gdn::cpu::avx512 {
#include "ops/cpu/limits.inc"

double bf16_dot_chains(int64_t iters, float* sink) {
    __m512 c[12];
    for (int j = 0; j < 12; ++j) c[j] = _mm512_set1_ps(j * 1e-3f);
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
    for (int64_t i = 0; i < iters; ++i)
        for (int j = 0; j < 12; ++j) c[j] = _mm512_dpbf16_ps(c[j], a, b);
    __m512 s = c[0];
    for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, c[j]);
    *sink += _mm512_reduce_add_ps(s);
    return static_cast<double>(iters) * 12 * 16 * 4;  // 2 MACs per lane = 4 FLOPs
}

}  // namespace gdn::cpu::avx512
