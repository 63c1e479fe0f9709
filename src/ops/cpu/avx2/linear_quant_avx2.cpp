// AVX2 and AVX-VNNI kernels of the int8 / int4 formats (layouts in ops/quant/quant_format.h; the two
// builds: quant_tiles_avx2.h). One 256-bit vector holds 8 columns x one k-quad (4 bytes per column), so
// a panel row of 32 columns is 4 vectors; the activation quad is broadcast to all lanes. Integer dots
// per group of 32 k, then one f32 FMA per group with scale_w * scale_x.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/cpu/avx2/quant_tiles_avx2.h"
#include "ops/cpu/linear_quant_kernels.h"
#include "ops/cpu/stream_ahead.h"

namespace gdn::cpu::GDN_AVX2_KERNELS {

namespace {

// Runs step(j), j = 0..N-1, each reading the 128 block bytes from blk + 128 j, as nibble_group_dots
// (quant_tiles_avx2.h) runs its steps: a loop requesting lines ahead for one row, unrolled for more
// (int8 17.6-18.7 -> 21.2-21.6 GB/s with the requests, int4 262144 x 1024 12.3-13.6 -> 18.1-18.5; all
// 17 lines of a block at its start measured slower than none).
template <int MR, int N, typename Step>
inline void for_each_step(const uint8_t* blk, const Step& step) {
    if constexpr (MR == 1) {
#pragma GCC unroll 1
        for (int j = 0; j < N; ++j) {
            stream_ahead_128(blk + j * 128);
            step(j);
        }
    } else {
        for (int j = 0; j < N; ++j) step(j);
    }
}

template <int MR, bool kSwiglu = false>
void tile_q8(const quant::QuantRowsView& x, int64_t m0, const PackedWeight& w, int64_t p, float* y,
             int64_t ldy, int ncols) {
    __m256 sum[MR][kNV];
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < kNV; ++v) sum[m][v] = _mm256_setzero_ps();
    for (int64_t g = 0; g < w.n_blocks; ++g) {
        const uint8_t* blk = w.quant_block(p, g);
        __m256i acc[MR][kNV];
        for (int m = 0; m < MR; ++m)
            for (int v = 0; v < kNV; ++v) acc[m][v] = _mm256_setzero_si256();
        auto quad = [&](int j) __attribute__((always_inline)) {  // k = 4j..4j+3 of the group
            __m256i xs[MR], xa[MR];
            for (int m = 0; m < MR; ++m) {
                xs[m] = bcast_quad(x.row(m0 + m) + g * kQuantGroup + 4 * j);
                xa[m] = _mm256_abs_epi8(xs[m]);
            }
            for (int v = 0; v < kNV; ++v) {
                const __m256i wv =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + j * 128 + v * 32));
                for (int m = 0; m < MR; ++m)
                    acc[m][v] = quad_dot_add(acc[m][v], xa[m], _mm256_sign_epi8(wv, xs[m]));
            }
        };
        for_each_step<MR, 8>(blk, quad);
        const uint8_t* sc = blk + quant::f16_offset(WeightFormat::Q8);
        for (int v = 0; v < kNV; ++v) {
            const __m256 ws = f16x8(sc + v * 16);
            for (int m = 0; m < MR; ++m) {
                const __m256 s = _mm256_mul_ps(ws, _mm256_set1_ps(x.xs[(m0 + m) * x.G + g]));
                sum[m][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[m][v]), s, sum[m][v]);
            }
        }
    }
    store_tile<MR, kSwiglu>(sum, y + m0 * ldy, ldy, ncols);
}

template <int MR, bool kSwiglu = false>
void tile_q4(const quant::QuantRowsView& x, int64_t m0, const PackedWeight& w, int64_t p, float* y,
             int64_t ldy, int ncols) {
    __m256 sum[MR][kNV];
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < kNV; ++v) sum[m][v] = _mm256_setzero_ps();
    for (int64_t g = 0; g < w.n_blocks; ++g) {
        const uint8_t* blk = w.quant_block(p, g);
        __m256i acc[MR][kNV];  // group sums of (q + 8) * xq
        for (int m = 0; m < MR; ++m)
            for (int v = 0; v < kNV; ++v) acc[m][v] = _mm256_setzero_si256();
        nibble_group_dots<MR>(x, m0, g, blk, acc, [&](int j) { stream_ahead_128(blk + j * 128); });
        const uint8_t* sc = blk + quant::f16_offset(WeightFormat::Q4);
        for (int v = 0; v < kNV; ++v) {
            const __m256 ws = f16x8(sc + v * 16);
            for (int m = 0; m < MR; ++m) {
                const int64_t i = (m0 + m) * x.G + g;
                const __m256i d =
                    _mm256_sub_epi32(group_sums_widen(acc[m][v]), _mm256_set1_epi32(8 * x.xsum[i]));
                const __m256 s = _mm256_mul_ps(ws, _mm256_set1_ps(x.xs[i]));
                sum[m][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), s, sum[m][v]);
            }
        }
    }
    store_tile<MR, kSwiglu>(sum, y + m0 * ldy, ldy, ncols);
}

}  // namespace

void linear_q8(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
               int64_t p1) {
    run_panels<tile_q8<1>, tile_q8<kMR>>(x, w, y, ldy, p0, p1);
}

void linear_q4(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
               int64_t p1) {
    run_panels<tile_q4<1>, tile_q4<kMR>>(x, w, y, ldy, p0, p1);
}

void linear_q8_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                      int64_t p1) {
    run_panels<tile_q8<1, true>, tile_q8<kMR, true>, true>(x, w, y, ldy, p0, p1);
}

void linear_q4_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                      int64_t p1) {
    run_panels<tile_q4<1, true>, tile_q4<kMR, true>, true>(x, w, y, ldy, p0, p1);
}

}  // namespace gdn::cpu::GDN_AVX2_KERNELS
