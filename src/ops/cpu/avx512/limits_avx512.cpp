#include <immintrin.h>

#include "ops/cpu/limits_kernels.h"

namespace gdn::cpu::avx512 {

float stream_read(const float* p, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; ++i) s += p[i];
    return s;
}

double fma_chains(int64_t iters, float* sink) {
    // 12 independent chains hide the 4-cycle FMA latency on 2 pipes.
    __m512 c[12];
    for (int j = 0; j < 12; ++j) c[j] = _mm512_set1_ps(1.0f + j * 1e-3f);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; ++i)
        for (int j = 0; j < 12; ++j) c[j] = _mm512_fmadd_ps(c[j], a, b);
    __m512 s = c[0];
    for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, c[j]);
    *sink += _mm512_reduce_add_ps(s);
    return static_cast<double>(iters) * 12 * 16 * 2;
}

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
