// A thin f32 vector abstraction so one kernel source compiles to AVX-512 (16 lanes) and AVX2 (8 lanes).
// Include after defining exactly one of GDN_SIMD_AVX512 / GDN_SIMD_AVX2 (the per-ISA translation units
// do this and are compiled with the matching -m flags).
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace gdn::simd {

#if defined(GDN_SIMD_AVX512)
constexpr int kLanes = 16;
using V = __m512;
inline V vzero() {
    return _mm512_setzero_ps();
}
inline V vset1(float x) {
    return _mm512_set1_ps(x);
}
inline V vload(const float* p) {
    return _mm512_loadu_ps(p);
}
inline void vstore(float* p, V v) {
    _mm512_storeu_ps(p, v);
}
// The first n lanes (n clamped to [0, 16]): partial panels, key tails, causal limits.
inline __mmask16 lanes_mask(int64_t n) {
    return n >= 16 ? 0xffff : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
}
inline V vload_n(const float* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
}
inline void vstore_n(float* p, V v, int n) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
}
inline V vadd(V a, V b) {
    return _mm512_add_ps(a, b);
}
inline V vsub(V a, V b) {
    return _mm512_sub_ps(a, b);
}
inline V vmul(V a, V b) {
    return _mm512_mul_ps(a, b);
}
inline V vdiv(V a, V b) {
    return _mm512_div_ps(a, b);
}
inline V vmax(V a, V b) {
    return _mm512_max_ps(a, b);
}
inline V vmin(V a, V b) {
    return _mm512_min_ps(a, b);
}
inline V vfma(V a, V b, V c) {
    return _mm512_fmadd_ps(a, b, c);
}  // a*b + c
inline V vfnma(V a, V b, V c) {
    return _mm512_fnmadd_ps(a, b, c);
}  // c - a*b
// The lanes' sum as a tree: lane j + lane j+8, then + j+4, then + j+2, then + j+1 (GCC's
// _mm512_reduce_add_ps, written out so that vsum_4x4 below adds in the same order on any compiler).
inline float vsum(V v) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 t3 = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
    const __m128 t6 = _mm_add_ps(_mm256_castps256_ps128(t3), _mm256_extractf128_ps(t3, 1));
    const __m128 t8 = _mm_add_ps(t6, _mm_movehl_ps(t6, t6));
    return _mm_cvtss_f32(_mm_add_ss(t8, _mm_movehdup_ps(t8)));
}
// vsum of 16 vectors a[h][i] (h, i < 4) at once, in lane 4h + i, bitwise: the same tree, four pairs of
// vectors per shuffle-and-add instead of one vector's lanes (45 instructions instead of ~130).
inline V vsum_4x4(const V (&a)[4][4]) {
    V g[4];  // g[i], 128-bit lane h: head h's four partial sums of key i (after the + j+8, + j+4 steps)
    for (int i = 0; i < 4; ++i) {
        const V c = _mm512_add_ps(_mm512_shuffle_f32x4(a[0][i], a[1][i], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(a[0][i], a[1][i], _MM_SHUFFLE(3, 2, 3, 2)));
        const V d = _mm512_add_ps(_mm512_shuffle_f32x4(a[2][i], a[3][i], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(a[2][i], a[3][i], _MM_SHUFFLE(3, 2, 3, 2)));
        g[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1)));
    }
    // + j+2: per 128-bit lane [key i: 2 sums, key i+1: 2 sums]; then + j+1: [key 0, 1, 2, 3].
    const V p = _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const V q = _mm512_add_ps(_mm512_shuffle_ps(g[2], g[3], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(g[2], g[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(p, q, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(p, q, _MM_SHUFFLE(3, 1, 3, 1)));
}
inline float vhmax(V v) {
    return _mm512_reduce_max_ps(v);
}
// 16 bf16 values -> f32 (exact)
inline V vload_bf16(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
inline V vload_bf16_n(const uint16_t* p, int n) {
    __m256i h = _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << n) - 1), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline V vfloor(V x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
inline V vpow2i(V n) {  // 2^n for integral n in [-126, 127]
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
inline V vselect_gt(V a, V b, V x, V y) {  // a > b ? x : y
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), y, x);
}
#elif defined(GDN_SIMD_AVX2)
constexpr int kLanes = 8;
using V = __m256;
inline __m256i tail_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline V vzero() {
    return _mm256_setzero_ps();
}
inline V vset1(float x) {
    return _mm256_set1_ps(x);
}
inline V vload(const float* p) {
    return _mm256_loadu_ps(p);
}
inline void vstore(float* p, V v) {
    _mm256_storeu_ps(p, v);
}
inline V vload_n(const float* p, int n) {
    return _mm256_maskload_ps(p, tail_mask(n));
}
inline void vstore_n(float* p, V v, int n) {
    _mm256_maskstore_ps(p, tail_mask(n), v);
}
inline V vadd(V a, V b) {
    return _mm256_add_ps(a, b);
}
inline V vsub(V a, V b) {
    return _mm256_sub_ps(a, b);
}
inline V vmul(V a, V b) {
    return _mm256_mul_ps(a, b);
}
inline V vdiv(V a, V b) {
    return _mm256_div_ps(a, b);
}
inline V vmax(V a, V b) {
    return _mm256_max_ps(a, b);
}
inline V vmin(V a, V b) {
    return _mm256_min_ps(a, b);
}
inline V vfma(V a, V b, V c) {
    return _mm256_fmadd_ps(a, b, c);
}
inline V vfnma(V a, V b, V c) {
    return _mm256_fnmadd_ps(a, b, c);
}
inline float vsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
inline float vhmax(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
inline V vload_bf16(const uint16_t* p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline V vload_bf16_n(const uint16_t* p, int n) {
    alignas(32) uint16_t tmp[8] = {0};
    for (int i = 0; i < n; ++i) tmp[i] = p[i];
    return vload_bf16(tmp);
}
inline V vfloor(V x) {
    return _mm256_floor_ps(x);
}
inline V vpow2i(V n) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline V vselect_gt(V a, V b, V x, V y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_GT_OQ));
}
#else
#error "define GDN_SIMD_AVX512 or GDN_SIMD_AVX2"
#endif

// exp(x) to ~2 ulp over the f32 range (Cephes-style: 2^n * P(r), r = x - n ln2).
inline V vexp(V x) {
    x = vmin(vmax(x, vset1(-87.3f)), vset1(88.3f));
    const V n = vfloor(vfma(x, vset1(1.44269504088896341f), vset1(0.5f)));
    V r = vfnma(n, vset1(0.693359375f), x);
    r = vfnma(n, vset1(-2.12194440e-4f), r);
    V p = vset1(1.9875691500e-4f);
    p = vfma(p, r, vset1(1.3981999507e-3f));
    p = vfma(p, r, vset1(8.3334519073e-3f));
    p = vfma(p, r, vset1(4.1665795894e-2f));
    p = vfma(p, r, vset1(1.6666665459e-1f));
    p = vfma(p, r, vset1(5.0000001201e-1f));
    p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
    return vmul(p, vpow2i(n));
}

inline V vsigmoid(V x) {
    return vdiv(vset1(1.0f), vadd(vset1(1.0f), vexp(vsub(vzero(), x))));
}
inline V vsilu(V x) {
    return vdiv(x, vadd(vset1(1.0f), vexp(vsub(vzero(), x))));
}

// Rounds f32 values to the nearest bf16 (ties to even), kept in f32.
inline V vround_bf16(V x) {
#if defined(GDN_SIMD_AVX512)
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    u = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
#else
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
#endif
}

}  // namespace gdn::simd
