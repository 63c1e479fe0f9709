#include <immintrin.h>

#include "ops/cpu/limits_kernels.h"

namespace gdn::cpu::avx2 {

float stream_read(const float* p, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
    }
    alignas(32) float t[8];
    _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    float s = 0;
    for (float x : t) s += x;
    for (; i < n; ++i) s += p[i];
    return s;
}

double fma_chains(int64_t iters, float* sink) {
    __m256 c[12];
    for (int j = 0; j < 12; ++j) c[j] = _mm256_set1_ps(1.0f + j * 1e-3f);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; ++i)
        for (int j = 0; j < 12; ++j) c[j] = _mm256_fmadd_ps(c[j], a, b);
    alignas(32) float t[8];
    __m256 s = c[0];
    for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, c[j]);
    _mm256_store_ps(t, s);
    for (float x : t) *sink += x;
    return static_cast<double>(iters) * 12 * 8 * 2;
}

}  // namespace gdn::cpu::avx2
