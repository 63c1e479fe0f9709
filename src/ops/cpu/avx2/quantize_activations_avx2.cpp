// The activation quantizer with 256-bit lanes (every x86 ISA the table names runs it but AVX-512 with
// VNNI): a group of 32 is four vectors; int32 -> int8 by two packs, which interleave the 128-bit lanes,
// and one permute that restores k order.
#include <immintrin.h>

#include <algorithm>

#include "ops/cpu/linear_quant_kernels.h"
#include "ops/quant/quant_format.h"

namespace gdn::cpu::avx2 {

namespace {

inline __m256 group_abs_max(const float* src) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 a = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src), abs_mask),
                                   _mm256_and_ps(_mm256_loadu_ps(src + 8), abs_mask));
    const __m256 b = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + 16), abs_mask),
                                   _mm256_and_ps(_mm256_loadu_ps(src + 24), abs_mask));
    return _mm256_max_ps(a, b);
}

// rne(x * inv) (vcvtps2dq), NaN's INT_MIN clamped to -127; |x * inv| <= 127 otherwise.
inline __m256i quantize_group(const float* src, float inv, int8_t* q) {
    const __m256 vi = _mm256_set1_ps(inv);
    const __m256i floor = _mm256_set1_epi32(-127);
    __m256i v[4];
    for (int i = 0; i < 4; ++i)
        v[i] = _mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(src + 8 * i), vi)), floor);
    const __m256i p16a = _mm256_packs_epi32(v[0], v[1]), p16b = _mm256_packs_epi32(v[2], v[3]);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order));
    return _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3]));
}

}  // namespace

#include "ops/cpu/quantize_groups.inc"

}  // namespace gdn::cpu::avx2
