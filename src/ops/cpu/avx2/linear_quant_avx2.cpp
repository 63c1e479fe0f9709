// AVX2 kernels of the int8 / int4 formats (layouts in ops/quant/quant_format.h). One 256-bit vector
// holds 8 columns x one k-quad (4 bytes per column), so a panel row of 32 columns is 4 vectors; the
// activation quad is broadcast to all lanes. Integer dots per group of 32 k, then one f32 FMA per
// group with scale_w * scale_x.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/cpu/linear_quant_kernels.h"

namespace gdn::cpu::avx2 {

namespace {

constexpr int kNV = 4;  // vectors per 32-column panel
constexpr int kMR = 2;  // rows per tile: 2 x 4 int32 accumulators + 2 x 4 f32 sums

inline __m256i bcast_quad(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

inline __m256 scales8(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <int MR>
inline void store_tile(__m256 (&sum)[MR][kNV], float* y, int64_t ldy, int ncols) {
    for (int m = 0; m < MR; ++m) {
        if (ncols == 32) {
            for (int v = 0; v < kNV; ++v) _mm256_storeu_ps(y + m * ldy + v * 8, sum[m][v]);
        } else {
            alignas(32) float tmp[32];
            for (int v = 0; v < kNV; ++v) _mm256_store_ps(tmp + v * 8, sum[m][v]);
            std::memcpy(y + m * ldy, tmp, ncols * sizeof(float));
        }
    }
}

template <int MR>
void tile_q8(const quant::QuantizedRows& x, int64_t m0, const PackedWeight& w, int64_t p, float* y, int64_t ldy,
             int ncols) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 sum[MR][kNV];
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < kNV; ++v) sum[m][v] = _mm256_setzero_ps();
    for (int64_t g = 0; g < w.n_groups; ++g) {
        const uint8_t* blk = w.quant_block(p, g);
        __m256i acc[MR][kNV];
        for (int m = 0; m < MR; ++m)
            for (int v = 0; v < kNV; ++v) acc[m][v] = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
            __m256i xs[MR], xa[MR];
            for (int m = 0; m < MR; ++m) {
                xs[m] = bcast_quad(x.row(m0 + m) + g * kQuantGroup + 4 * j);
                xa[m] = _mm256_abs_epi8(xs[m]);
            }
            for (int v = 0; v < kNV; ++v) {
                const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + j * 128 + v * 32));
                for (int m = 0; m < MR; ++m) {
                    const __m256i prod = _mm256_maddubs_epi16(xa[m], _mm256_sign_epi8(wv, xs[m]));
                    acc[m][v] = _mm256_add_epi32(acc[m][v], _mm256_madd_epi16(prod, ones));
                }
            }
        }
        const uint8_t* sc = blk + quant::scales_offset(WeightFormat::Q8);
        for (int v = 0; v < kNV; ++v) {
            const __m256 ws = scales8(sc + v * 16);
            for (int m = 0; m < MR; ++m) {
                const __m256 s = _mm256_mul_ps(ws, _mm256_set1_ps(x.xs[(m0 + m) * x.G + g]));
                sum[m][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[m][v]), s, sum[m][v]);
            }
        }
    }
    store_tile<MR>(sum, y + m0 * ldy, ldy, ncols);
}

template <int MR>
void tile_q4(const quant::QuantizedRows& x, int64_t m0, const PackedWeight& w, int64_t p, float* y, int64_t ldy,
             int ncols) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 sum[MR][kNV];
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < kNV; ++v) sum[m][v] = _mm256_setzero_ps();
    for (int64_t g = 0; g < w.n_groups; ++g) {
        const uint8_t* blk = w.quant_block(p, g);
        __m256i acc[MR][kNV];  // int16 pair sums of (q + 8) * xq over the group: |.| <= 8 * 2 * 15 * 127
        for (int m = 0; m < MR; ++m)
            for (int v = 0; v < kNV; ++v) acc[m][v] = _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {
            __m256i xlo[MR], xhi[MR];
            for (int m = 0; m < MR; ++m) {
                const int8_t* xr = x.row(m0 + m) + g * kQuantGroup + 8 * j;
                xlo[m] = bcast_quad(xr);
                xhi[m] = bcast_quad(xr + 4);
            }
            for (int v = 0; v < kNV; ++v) {
                const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + j * 128 + v * 32));
                const __m256i lo = _mm256_and_si256(b, low4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), low4);
                for (int m = 0; m < MR; ++m)
                    acc[m][v] = _mm256_add_epi16(
                        acc[m][v], _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo[m]), _mm256_maddubs_epi16(hi, xhi[m])));
            }
        }
        const uint8_t* sc = blk + quant::scales_offset(WeightFormat::Q4);
        for (int v = 0; v < kNV; ++v) {
            const __m256 ws = scales8(sc + v * 16);
            for (int m = 0; m < MR; ++m) {
                const int64_t i = (m0 + m) * x.G + g;
                const __m256i d = _mm256_sub_epi32(_mm256_madd_epi16(acc[m][v], ones), _mm256_set1_epi32(8 * x.xsum[i]));
                const __m256 s = _mm256_mul_ps(ws, _mm256_set1_ps(x.xs[i]));
                sum[m][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), s, sum[m][v]);
            }
        }
    }
    store_tile<MR>(sum, y + m0 * ldy, ldy, ncols);
}

template <void (*Tile1)(const quant::QuantizedRows&, int64_t, const PackedWeight&, int64_t, float*, int64_t, int),
          void (*TileMR)(const quant::QuantizedRows&, int64_t, const PackedWeight&, int64_t, float*, int64_t, int)>
void run_panels(const quant::QuantizedRows& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
        const int ncols = static_cast<int>(std::min<int64_t>(quant::kCols, w.N - p * quant::kCols));
        float* yp = y + p * quant::kCols;
        int64_t m = 0;
        for (; m + kMR <= x.M; m += kMR) TileMR(x, m, w, p, yp, ldy, ncols);
        for (; m < x.M; ++m) Tile1(x, m, w, p, yp, ldy, ncols);
    }
}

}  // namespace

void linear_q8(const quant::QuantizedRows& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0, int64_t p1) {
    run_panels<tile_q8<1>, tile_q8<kMR>>(x, w, y, ldy, p0, p1);
}

void linear_q4(const quant::QuantizedRows& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0, int64_t p1) {
    run_panels<tile_q4<1>, tile_q4<kMR>>(x, w, y, ldy, p0, p1);
}

}  // namespace gdn::cpu::avx2
