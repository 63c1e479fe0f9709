// AVX2 and AVX-VNNI kernels (the two builds: quant_tiles_avx2.h) of the super-block formats int4-k and int6-k
// (layouts in ops/quant/quant_format.h). As the int8 / int4 kernels (linear_quant_avx2.cpp): one 256-bit
// vector holds 8 columns x one k-quad, a panel row of 32 columns is 4 vectors, the activation quad is
// broadcast; integer dots per group of 32 k, then the group's scales in f32. A one-row tile (decode) requests
// its record's lines ahead.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/cpu/avx2/quant_tiles_avx2.h"
#include "ops/cpu/linear_quant_kernels.h"
#include "ops/cpu/stream_ahead.h"

namespace gdn::cpu::GDN_AVX2_KERNELS {

namespace {

// Asks for the lines of a group record kStreamAheadBytes further on, spread over its 4 steps.
inline void record_ahead(const uint8_t* rec, int step, int64_t record_bytes) {
    const uint8_t* p = rec + step * (record_bytes / 4);
    stream_ahead_128(p);
    stream_ahead_128(p + 128);
}

// int4-k: q in [0, 15] unsigned x int8 activations, group sums over the group (8 * 2 * 15 * 127 < 2^15
// for AVX2's int16). Per group, group_sums_scaled multiplies the sums by sc as it widens (AVX2 vpmaddwd,
// AVX-VNNI vpmulld; |sc D| <= 63 * 2 * 30480 < 2^31), then y += (d xs) (sc D) - (dmin m) (xs S): the
// operations of the unpacked prefill tiles (linear_kquant_unpacked_avx2.cpp) in their order, so a row's
// bits do not depend on how many rows its batch has.
template <int MR, bool kSwiglu = false>
void tile_q4k(const quant::QuantRowsView& x, int64_t m0, const PackedWeight& w, int64_t p, float* y,
              int64_t ldy, int ncols) {
    __m256 sum[MR][kNV];
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < kNV; ++v) sum[m][v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < w.n_blocks; ++b) {
        const uint8_t* blk = w.quant_block(p, b);
        const uint8_t* f16 = blk + quant::f16_offset(WeightFormat::Q4K);
        const int64_t groups = std::min<int64_t>(kGroupsPerBlock, x.G - b * kGroupsPerBlock);
        for (int64_t j = 0; j < groups; ++j) {
            const int64_t g = b * kGroupsPerBlock + j;
            const uint8_t* rec = blk + j * quant::kQ4KRecordBytes;
            __m256i acc[MR][kNV];
            for (int m = 0; m < MR; ++m)
                for (int v = 0; v < kNV; ++v) acc[m][v] = _mm256_setzero_si256();
            nibble_group_dots<MR>(x, m0, g, rec, acc,
                                  [&](int s) { record_ahead(rec, s, quant::kQ4KRecordBytes); });
            __m256i sc, mn;
            q4k_levels(rec + quant::kQ4KLevelsOffset, &sc, &mn);
            const __m256i sc_half[2] = {_mm256_permute2x128_si256(sc, sc, 0x00),
                                        _mm256_permute2x128_si256(sc, sc, 0x11)};
            const __m256i mn_half[2] = {_mm256_permute2x128_si256(mn, mn, 0x00),
                                        _mm256_permute2x128_si256(mn, mn, 0x11)};
            __m256 xs[MR], xs_sum[MR];
            for (int m = 0; m < MR; ++m) {
                const int64_t i = (m0 + m) * x.G + g;
                xs[m] = _mm256_set1_ps(x.xs[i]);
                xs_sum[m] = _mm256_set1_ps(x.xs[i] * static_cast<float>(x.xsum[i]));
            }
            for (int v = 0; v < kNV; ++v) {
                const __m256i sc_level = level_operand(sc_half[v / 2], v);
                const __m256 d = f16x8(f16 + v * 16);
                const __m256 min_term =  // dmin m
                    _mm256_mul_ps(f16x8(f16 + 64 + v * 16), _mm256_cvtepi32_ps(_mm256_shuffle_epi8(
                                                                mn_half[v / 2], level_words_pattern(v))));
                for (int m = 0; m < MR; ++m) {
                    const __m256 dot = _mm256_cvtepi32_ps(group_sums_scaled(acc[m][v], sc_level));
                    sum[m][v] = _mm256_fnmadd_ps(min_term, xs_sum[m],
                                                 _mm256_fmadd_ps(dot, _mm256_mul_ps(d, xs[m]), sum[m][v]));
                }
            }
        }
    }
    store_tile<MR, kSwiglu>(sum, y + m0 * ldy, ldy, ncols);
}

// int6-k: u = q + 32 in [0, 63] from a low nibble and a high bit pair, the unsigned operand (AVX2: a
// step's lo + hi pair sums <= 4 * 63 * 127 < 2^15); the offset leaves through the row's
// group sum, as int4-sym's +8: y += xs * d * sc * (sum u x - 32 S).
template <int MR, bool kSwiglu = false>
void tile_q6k(const quant::QuantRowsView& x, int64_t m0, const PackedWeight& w, int64_t p, float* y,
              int64_t ldy, int ncols) {
    __m256 sum[MR][kNV];
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < kNV; ++v) sum[m][v] = _mm256_setzero_ps();
    for (int64_t b = 0; b < w.n_blocks; ++b) {
        const uint8_t* blk = w.quant_block(p, b);
        const uint8_t* f16 = blk + quant::f16_offset(WeightFormat::Q6K);
        __m256 d[kNV];
        for (int v = 0; v < kNV; ++v) d[v] = f16x8(f16 + v * 16);
        const int64_t groups = std::min<int64_t>(kGroupsPerBlock, x.G - b * kGroupsPerBlock);
        for (int64_t j = 0; j < groups; ++j) {
            const int64_t g = b * kGroupsPerBlock + j;
            const uint8_t* rec = blk + j * quant::kQ6KRecordBytes;
            __m256i acc[MR][kNV];
            for (int m = 0; m < MR; ++m)
                for (int v = 0; v < kNV; ++v) acc[m][v] = _mm256_setzero_si256();
#pragma GCC unroll 1
            for (int s = 0; s < 4; ++s) {
                if constexpr (MR == 1) record_ahead(rec, s, quant::kQ6KRecordBytes);
                __m256i xlo[MR], xhi[MR];
                for (int m = 0; m < MR; ++m) {
                    const int8_t* xr = x.row(m0 + m) + g * kQuantGroup + 8 * s;
                    xlo[m] = bcast_quad(xr);
                    xhi[m] = bcast_quad(xr + 4);
                }
                for_each_q6k_vector(
                    rec, s, [&](int v, __m256i lo, __m256i hi) __attribute__((always_inline)) {
                        for (int m = 0; m < MR; ++m)
                            acc[m][v] = two_quad_dots_add(acc[m][v], lo, xlo[m], hi, xhi[m]);
                    });
            }
            const uint8_t* sc = rec + quant::kQ6KScalesOffset;
            for (int v = 0; v < kNV; ++v) {
                const __m256 ds = _mm256_mul_ps(d[v], i8x8_to_f32(sc + v * 8));
                for (int m = 0; m < MR; ++m) {
                    const int64_t i = (m0 + m) * x.G + g;
                    const __m256i dot = _mm256_sub_epi32(acc[m][v], _mm256_set1_epi32(32 * x.xsum[i]));
                    sum[m][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                                _mm256_mul_ps(ds, _mm256_set1_ps(x.xs[i])), sum[m][v]);
                }
            }
        }
    }
    store_tile<MR, kSwiglu>(sum, y + m0 * ldy, ldy, ncols);
}

}  // namespace

void linear_q4k(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                int64_t p1) {
    if (x.M >= kUnpackRows) return unpacked_q4k(x, w, y, ldy, p0, p1);
    run_panels<tile_q4k<1>, tile_q4k<kMR>>(x, w, y, ldy, p0, p1);
}

void linear_q6k(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                int64_t p1) {
    if (x.M >= kUnpackRows) return unpacked_q6k(x, w, y, ldy, p0, p1);
    run_panels<tile_q6k<1>, tile_q6k<kMR>>(x, w, y, ldy, p0, p1);
}

void linear_q4k_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                       int64_t p0, int64_t p1) {
    if (x.M >= kUnpackRows) return unpacked_q4k_swiglu(x, w, y, ldy, p0, p1);
    run_panels<tile_q4k<1, true>, tile_q4k<kMR, true>, true>(x, w, y, ldy, p0, p1);
}

void linear_q6k_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                       int64_t p0, int64_t p1) {
    if (x.M >= kUnpackRows) return unpacked_q6k_swiglu(x, w, y, ldy, p0, p1);
    run_panels<tile_q6k<1, true>, tile_q6k<kMR, true>, true>(x, w, y, ldy, p0, p1);
}

}  // namespace gdn::cpu::GDN_AVX2_KERNELS
