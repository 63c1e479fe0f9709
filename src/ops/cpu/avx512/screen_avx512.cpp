// The int8 screen of the greedy argmax (ops/argmax_screen.h): vpdpbusd over a panel's k-quads, then
// each column's estimate and error bound and the panel's largest A - B and A + B, all in registers.
// Compiled with AVX-512 VNNI (this file only); called only when the CPU has it.
#define GDN_SIMD_AVX512
#include <immintrin.h>

#include <algorithm>

#include "core/log.h"
#include "ops/cpu/linear_kernels.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/stream_ahead.h"
#include "ops/int8_screen.h"

namespace gdn::cpu::avx512 {

namespace {

// MR rows. Up to 4 rows: per row two chains per 16 columns (even and odd k-quads: integer sums, so the
// split changes nothing), 4 * MR accumulators, enough chains to hide vpdpbusd's latency; 5-8 rows have
// that many chains in one per 16 columns (2 * MR accumulators: 16 of the 32 registers at 8 rows).
// amx: the k-quads up to the last multiple of 16 on AMX-INT8 tiles (amx_screen_block: the same integer
// sums), the rest here.
template <int MR>
void screen_rows(const uint32_t* xq, const Int8Screen& s, const ScreenRow* r, int64_t p0, int64_t p1,
                 float* bounds, int64_t ld, bool amx) {
    constexpr bool kSplitK = MR <= 4;
    // 2+ rows spend 2 x MR vpdpbusd per 128 weight bytes, about the memory's time for them: their lines
    // are asked for ahead so the two overlap (ops/cpu/stream_ahead.h); one row is bound by the stream.
    constexpr bool kStream = MR >= 2;
    const __m512 eight_u = _mm512_set1_ps(8.0f * 0x1p-24f), inflate = _mm512_set1_ps(1.001f);
    const int64_t K4 = s.K4, kq_amx = amx ? K4 / 16 * 16 : 0;
    alignas(64) int32_t tiles[MR * 32];
    for (int64_t p = p0; p < p1; ++p) {
        const int8_t* b = s.panel(p);
        __m512i a0[MR], a1[MR], c0[kSplitK ? MR : 1], c1[kSplitK ? MR : 1];
        int64_t kk = 0;
        if (kq_amx > 0) {
            amx_screen_block(xq, K4, MR, b, kq_amx, tiles);
            for (int m = 0; m < MR; ++m) {
                a0[m] = _mm512_load_si512(tiles + m * 32);
                a1[m] = _mm512_load_si512(tiles + m * 32 + 16);
            }
            kk = kq_amx;
            b += kq_amx * 128;
        } else {
            for (int m = 0; m < MR; ++m) a0[m] = a1[m] = _mm512_setzero_si512();
        }
        if constexpr (kSplitK) {
            for (int m = 0; m < MR; ++m) c0[m] = c1[m] = _mm512_setzero_si512();
            for (; kk + 1 < K4; kk += 2, b += 256) {
                if constexpr (kStream) {
                    stream_ahead_batch_128(b);
                    stream_ahead_batch_128(b + 128);
                }
                const __m512i w0 = _mm512_loadu_si512(b), w1 = _mm512_loadu_si512(b + 64),
                              w2 = _mm512_loadu_si512(b + 128), w3 = _mm512_loadu_si512(b + 192);
                for (int m = 0; m < MR; ++m) {
                    const __m512i x0 = _mm512_set1_epi32(static_cast<int>(xq[m * K4 + kk]));
                    const __m512i x1 = _mm512_set1_epi32(static_cast<int>(xq[m * K4 + kk + 1]));
                    a0[m] = _mm512_dpbusd_epi32(a0[m], x0, w0);
                    a1[m] = _mm512_dpbusd_epi32(a1[m], x0, w1);
                    c0[m] = _mm512_dpbusd_epi32(c0[m], x1, w2);
                    c1[m] = _mm512_dpbusd_epi32(c1[m], x1, w3);
                }
            }
            for (int m = 0; m < MR; ++m) {
                a0[m] = _mm512_add_epi32(a0[m], c0[m]);
                a1[m] = _mm512_add_epi32(a1[m], c1[m]);
            }
        }
        for (; kk < K4; ++kk, b += 128) {
            if constexpr (kStream) stream_ahead_batch_128(b);
            const __m512i w0 = _mm512_loadu_si512(b), w1 = _mm512_loadu_si512(b + 64);
            for (int m = 0; m < MR; ++m) {
                const __m512i x0 = _mm512_set1_epi32(static_cast<int>(xq[m * K4 + kk]));
                a0[m] = _mm512_dpbusd_epi32(a0[m], x0, w0);
                a1[m] = _mm512_dpbusd_epi32(a1[m], x0, w1);
            }
        }
        for (int m = 0; m < MR; ++m) {
            const ScreenRow& rm = r[m];
            const __m512 sx = _mm512_set1_ps(rm.sx), c_err = _mm512_set1_ps(rm.c_err),
                         c_wq = _mm512_set1_ps(rm.c_wq), c_wmax = _mm512_set1_ps(rm.c_wmax),
                         c_abs = _mm512_set1_ps(rm.c_abs);
            const __m512i acc[2] = {a0[m], a1[m]};
            __m512 lo_p = _mm512_set1_ps(-INFINITY), hi_p = lo_p;
            for (int h = 0; h < 2; ++h) {
                const int64_t n0 = p * 32 + h * 16;
                if (n0 >= s.N) break;
                const __mmask16 valid = simd::lanes_mask(s.N - n0);
                // x is stored as xq + 128 (vpdpbusd's unsigned operand): I = acc - 128 sum_k q_nk, exactly.
                const __m512i I =
                    _mm512_sub_epi32(acc[h], _mm512_slli_epi32(_mm512_loadu_si512(s.qsum() + n0), 7));
                const __m512 A =
                    _mm512_mul_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(_mm512_loadu_ps(s.scale() + n0), sx));
                __m512 B = _mm512_mul_ps(_mm512_abs_ps(A), eight_u);
                B = _mm512_fmadd_ps(_mm512_loadu_ps(s.wmax() + n0), c_wmax, B);
                B = _mm512_fmadd_ps(_mm512_loadu_ps(s.wq_norm() + n0), c_wq, B);
                B = _mm512_fmadd_ps(_mm512_loadu_ps(s.err_norm() + n0), c_err, B);
                B = _mm512_fmadd_ps(B, inflate, c_abs);
                lo_p = _mm512_mask_max_ps(lo_p, valid, lo_p, _mm512_sub_ps(A, B));
                hi_p = _mm512_mask_max_ps(hi_p, valid, hi_p, _mm512_add_ps(A, B));
            }
            bounds[2 * m * ld + p] = _mm512_reduce_max_ps(lo_p);
            bounds[(2 * m + 1) * ld + p] = _mm512_reduce_max_ps(hi_p);
        }
    }
    if (kq_amx > 0) amx_end();
}

}  // namespace

// One to three rows are bound by the stream on vpdpbusd already (AMX measured the same at 2 and 3 rows), 4
// and more by the vector unit (this Xeon VM, the 0.8B lm_head: 13.2 ms at 4 rows, 12.0 at 8, against 9.3
// and 9.8 on AMX; 9.4 at one row): argmax_screen.cpp runs screen_i8_amx from kScreenAmxRows rows.
void screen_i8(const uint32_t* xq, int M, const Int8Screen& s, const ScreenRow* r, int64_t p0, int64_t p1,
               float* bounds, int64_t ld) {
    GDN_CHECK(M >= 1 && M <= kScreenRows, "screen_i8: %d rows (1 to %d)", M, kScreenRows);
    with_rows<kScreenRows>(
        M, [&](auto rows) { screen_rows<decltype(rows)::value>(xq, s, r, p0, p1, bounds, ld, false); });
}

void screen_i8_amx(const uint32_t* xq, int M, const Int8Screen& s, const ScreenRow* r, int64_t p0, int64_t p1,
                   float* bounds, int64_t ld) {
    GDN_CHECK(M >= kScreenAmxRows && M <= kScreenRows, "screen_i8_amx: %d rows (%d to %d)", M, kScreenAmxRows,
              kScreenRows);
    with_rows<kScreenRows>(
        M, [&](auto rows) { screen_rows<decltype(rows)::value>(xq, s, r, p0, p1, bounds, ld, true); });
}

}  // namespace gdn::cpu::avx512
