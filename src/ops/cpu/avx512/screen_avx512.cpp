// The int8 screen of the greedy argmax (ops/argmax_screen.h): vpdpbusd over a panel's k-quads, then
// each column's estimate and error bound, the running threshold and the candidates, all in registers.
// Compiled with AVX-512 VNNI (this file only); called only when the CPU has it.
#define GDN_SIMD_AVX512
#include <immintrin.h>

#include <algorithm>

#include "ops/argmax_screen.h"
#include "ops/cpu/linear_kernels.h"
#include "ops/cpu/simd.h"

namespace gdn::cpu::avx512 {

namespace {

// Keeps the candidates that can still reach `lo` (the threshold only rises): returns the new count.
int64_t prune(int32_t* cand, float* cand_hi, int64_t n, float lo) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i)
        if (cand_hi[i] >= lo) {
            cand[m] = cand[i];
            cand_hi[m++] = cand_hi[i];
        }
    return m;
}

}  // namespace

int64_t screen_i8(const uint32_t* xq, const Int8Screen& s, const ScreenRow& r, int64_t p0, int64_t p1, float* lo_max,
                  int32_t* cand, float* cand_hi, int64_t n_cand, int64_t cap) {
    const __m512 sx = _mm512_set1_ps(r.sx), c_err = _mm512_set1_ps(r.c_err), c_wq = _mm512_set1_ps(r.c_wq),
                 c_wmax = _mm512_set1_ps(r.c_wmax);
    const __m512 eight_u = _mm512_set1_ps(8.0f * 0x1p-24f), inflate = _mm512_set1_ps(1.001f),
                 c_abs = _mm512_set1_ps(r.c_abs);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    float lm = *lo_max;
    for (int64_t p = p0; p < p1; ++p) {
        const int8_t* b = s.panel(p);
        // Two chains per 16 columns (even and odd k-quads): integer sums, so the split changes nothing.
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, c0 = a0, c1 = a0;
        int64_t kk = 0;
        for (; kk + 1 < s.K4; kk += 2, b += 256) {
            const __m512i x0 = _mm512_set1_epi32(static_cast<int>(xq[kk]));
            const __m512i x1 = _mm512_set1_epi32(static_cast<int>(xq[kk + 1]));
            a0 = _mm512_dpbusd_epi32(a0, x0, _mm512_loadu_si512(b));
            a1 = _mm512_dpbusd_epi32(a1, x0, _mm512_loadu_si512(b + 64));
            c0 = _mm512_dpbusd_epi32(c0, x1, _mm512_loadu_si512(b + 128));
            c1 = _mm512_dpbusd_epi32(c1, x1, _mm512_loadu_si512(b + 192));
        }
        if (kk < s.K4) {
            const __m512i x0 = _mm512_set1_epi32(static_cast<int>(xq[kk]));
            a0 = _mm512_dpbusd_epi32(a0, x0, _mm512_loadu_si512(b));
            a1 = _mm512_dpbusd_epi32(a1, x0, _mm512_loadu_si512(b + 64));
        }
        const __m512i acc[2] = {_mm512_add_epi32(a0, c0), _mm512_add_epi32(a1, c1)};
        for (int h = 0; h < 2; ++h) {
            const int64_t n0 = p * 32 + h * 16;
            if (n0 >= s.N) break;
            const __mmask16 valid = simd::lanes_mask(s.N - n0);
            // x is stored as xq + 128 (vpdpbusd's unsigned operand): I = acc - 128 sum_k q_nk, exactly.
            const __m512i I = _mm512_sub_epi32(acc[h], _mm512_slli_epi32(_mm512_loadu_si512(s.qsum() + n0), 7));
            const __m512 A = _mm512_mul_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(_mm512_loadu_ps(s.scale() + n0), sx));
            __m512 B = _mm512_mul_ps(_mm512_abs_ps(A), eight_u);
            B = _mm512_fmadd_ps(_mm512_loadu_ps(s.wmax() + n0), c_wmax, B);
            B = _mm512_fmadd_ps(_mm512_loadu_ps(s.wq_norm() + n0), c_wq, B);
            B = _mm512_fmadd_ps(_mm512_loadu_ps(s.err_norm() + n0), c_err, B);
            B = _mm512_fmadd_ps(B, inflate, c_abs);
            const __m512 lo = _mm512_sub_ps(A, B), hi = _mm512_add_ps(A, B);
            lm = std::max(lm, _mm512_mask_reduce_max_ps(valid, lo));
            const __mmask16 c = valid & _mm512_cmp_ps_mask(hi, _mm512_set1_ps(lm), _CMP_GE_OQ);
            if (!c) continue;
            const int cnt = __builtin_popcount(c);
            if (n_cand + cnt > cap) {
                n_cand = prune(cand, cand_hi, n_cand, lm);
                if (n_cand + cnt > cap) return -1;
            }
            _mm512_mask_compressstoreu_epi32(cand + n_cand, c, _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(n0)), iota));
            _mm512_mask_compressstoreu_ps(cand_hi + n_cand, c, hi);
            n_cand += cnt;
        }
    }
    *lo_max = lm;
    return n_cand;
}

}  // namespace gdn::cpu::avx512
