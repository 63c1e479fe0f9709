// The int8 screen of the greedy argmax (ops/argmax_screen.h) on AVX2: the same estimates, bounds and
// candidates as the AVX-512 kernel, with vpmaddubsw for the integer dots. vpmaddubsw multiplies unsigned
// by signed bytes into saturating int16 pair sums, so the stored xq + 128 (vpdpbusd's operand) would
// overflow them (2 x 255 x 127); the kernel instead multiplies |xq| by the weight with xq's sign (at most
// 2 x 127 x 127, exact) and widens the pairs with vpmaddwd: I_n = sum_k xq_k q_nk, with no 128 sum_k q_nk
// correction. The panels' largest A - B and A + B are the AVX-512 kernel's, 8 columns at a time.
#define GDN_SIMD_AVX2
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/log.h"
#include "ops/cpu/linear_kernels.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/stream_ahead.h"
#include "ops/int8_screen.h"

namespace gdn::cpu::avx2 {

namespace {

// MR <= 2 rows over a whole panel (its 32 columns as 4 vectors): MR x 4 int32 accumulators, acc[m][v].
// The panel's k-quads are 128 bytes [8 columns x 4 k] x 4. xs / xa: each row's k-quads as signed bytes
// and their absolute values, precomputed per call.
template <int MR>
void dot_panel(const uint32_t* xs, const uint32_t* xa, int64_t K4, const int8_t* panel, __m256i (*acc)[4]) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < 4; ++v) acc[m][v] = _mm256_setzero_si256();
    const int8_t* b = panel;
    for (int64_t kk = 0; kk < K4; ++kk, b += 128) {
        if constexpr (MR == 1) stream_ahead_128(b);  // one row streams the int8 copy from memory
        __m256i w[4];
        for (int v = 0; v < 4; ++v) w[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + v * 32));
        for (int m = 0; m < MR; ++m) {
            const __m256i sg = _mm256_set1_epi32(static_cast<int>(xs[m * K4 + kk]));
            const __m256i ab = _mm256_set1_epi32(static_cast<int>(xa[m * K4 + kk]));
            for (int v = 0; v < 4; ++v)
                acc[m][v] = _mm256_add_epi32(
                    acc[m][v], _mm256_madd_epi16(_mm256_maddubs_epi16(ab, _mm256_sign_epi8(w[v], sg)), ones));
        }
    }
}

template <int MR>
void screen_rows(const uint32_t* xq, const Int8Screen& s, const ScreenRow* r, int64_t p0, int64_t p1,
                 float* bounds, int64_t ld) {
    using namespace gdn::simd;
    const __m256 eight_u = _mm256_set1_ps(8.0f * 0x1p-24f), inflate = _mm256_set1_ps(1.001f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    // The rows' k-quads as signed bytes (xq_k + 128 flipped back) and their absolute values.
    thread_local std::vector<uint32_t> xbuf;
    const int64_t K4 = s.K4;
    xbuf.resize(static_cast<size_t>(2 * MR) * K4);
    uint32_t* xs = xbuf.data();
    uint32_t* xa = xs + MR * K4;
    for (int64_t i = 0; i < MR * K4; ++i) {
        xs[i] = xq[i] ^ 0x80808080u;
        uint32_t a = 0;
        for (int byte = 0; byte < 4; ++byte) {
            const int v = static_cast<int8_t>(xs[i] >> (8 * byte));
            a |= static_cast<uint32_t>(v < 0 ? -v : v) << (8 * byte);
        }
        xa[i] = a;
    }
    for (int64_t p = p0; p < p1; ++p) {
        // Rows in groups of at most 2 over the whole panel (8 accumulators fit the 16 ymm registers;
        // the second group reads the panel from L1 / L2). Two 16-column halves for 3-4 rows instead
        // took 2.5x a one-row screen (36.8 against 14-15 ms a step at the 0.8B shape).
        for (int g0 = 0; g0 < MR; g0 += 2) {
            const int rows = std::min(2, MR - g0);
            __m256i acc[2][4];
            if (rows == 2)
                dot_panel<2>(xs + g0 * K4, xa + g0 * K4, K4, s.panel(p), acc);
            else
                dot_panel<1>(xs + g0 * K4, xa + g0 * K4, K4, s.panel(p), acc);
            for (int m = g0; m < g0 + rows; ++m) {
                const ScreenRow& rm = r[m];
                __m256 lo_p = _mm256_set1_ps(-INFINITY), hi_p = lo_p;
                for (int v = 0; v < 4; ++v) {
                    const int64_t n0 = p * 32 + v * 8;
                    if (n0 >= s.N) break;
                    const int nvalid = static_cast<int>(std::min<int64_t>(8, s.N - n0));
                    const __m256 valid = _mm256_castsi256_ps(tail_mask(nvalid));
                    const __m256 A =
                        _mm256_mul_ps(_mm256_cvtepi32_ps(acc[m - g0][v]),
                                      _mm256_mul_ps(_mm256_loadu_ps(s.scale() + n0), _mm256_set1_ps(rm.sx)));
                    __m256 B = _mm256_mul_ps(_mm256_and_ps(A, abs_mask), eight_u);
                    B = _mm256_fmadd_ps(_mm256_loadu_ps(s.wmax() + n0), _mm256_set1_ps(rm.c_wmax), B);
                    B = _mm256_fmadd_ps(_mm256_loadu_ps(s.wq_norm() + n0), _mm256_set1_ps(rm.c_wq), B);
                    B = _mm256_fmadd_ps(_mm256_loadu_ps(s.err_norm() + n0), _mm256_set1_ps(rm.c_err), B);
                    B = _mm256_fmadd_ps(B, inflate, _mm256_set1_ps(rm.c_abs));
                    lo_p = _mm256_max_ps(lo_p, _mm256_blendv_ps(lo_p, _mm256_sub_ps(A, B), valid));
                    hi_p = _mm256_max_ps(hi_p, _mm256_blendv_ps(hi_p, _mm256_add_ps(A, B), valid));
                }
                bounds[2 * m * ld + p] = vhmax(lo_p);
                bounds[(2 * m + 1) * ld + p] = vhmax(hi_p);
            }
        }
    }
}

}  // namespace

void screen_i8(const uint32_t* xq, int M, const Int8Screen& s, const ScreenRow* r, int64_t p0, int64_t p1,
               float* bounds, int64_t ld) {
    GDN_CHECK(M >= 1 && M <= kScreenRows, "screen_i8: %d rows (1 to %d)", M, kScreenRows);
    with_rows<kScreenRows>(
        M, [&](auto rows) { screen_rows<decltype(rows)::value>(xq, s, r, p0, p1, bounds, ld); });
}

}  // namespace gdn::cpu::avx2
