// AVX-512 VNNI kernels of the int8 / int4 formats (layouts in ops/quant/quant_format.h). One 512-bit
// vector holds 16 columns x one k-quad (4 bytes per column), so a panel row of 32 columns is 2 vectors;
// the activation quad of a row is broadcast to all lanes. vpdpbusd multiplies unsigned by signed bytes
// and sums each quad into an int32 lane, so the weight is made the unsigned operand:
//   Q8: q ^ 0x80 = q + 128 in [1, 255];  Q4: the stored nibble q + 8 in [0, 15];
// and the offset comes back out through the row's group sum (xsum): the int32 accumulator of a group
// starts at -offset * xsum, so after the group it holds exactly D = sum q * xq. Then one f32 FMA per
// group with scale_w * scale_x (the reference's product and sum, ref/linear_quant.cpp).
//
// Cost per group and 16 columns: 8 vpdpbusd per row; the epilogue (convert, scale product, FMA) is 3 more
// per row, and the weight's unsigned form (xor / nibble split) is shared by all rows of the tile.
#define GDN_SIMD_AVX512
#include <immintrin.h>

#include "ops/cpu/avx512/quant_tiles_avx512.h"
#include "ops/cpu/linear_quant_kernels.h"
#include "ops/dispatch.h"

namespace gdn::cpu::avx512 {

namespace {

// The group epilogue: sum += float(acc) * (scale_w * scale_x) for each row and vector.
template <int MR>
inline void scale_group(const quant::QuantRowsView& x, int64_t m0, int64_t g, const uint8_t* scales,
                        __m512i (&acc)[MR][2], __m512 (&sum)[MR][2]) {
    const __m512 ws0 = f16x16(scales), ws1 = f16x16(scales + 32);
    for (int m = 0; m < MR; ++m) {
        const __m512 xs = _mm512_set1_ps(x.xs[(m0 + m) * x.G + g]);
        sum[m][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][0]), _mm512_mul_ps(ws0, xs), sum[m][0]);
        sum[m][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][1]), _mm512_mul_ps(ws1, xs), sum[m][1]);
    }
}

// kStream: a decode batch's tile, which asks for the panel's lines ahead (streams_batch), or a one-row
// tile's on a CPU that streams_far(), which asks further ahead.
template <int MR>
constexpr int64_t kStreamAhead = MR == 1 ? kStreamAheadFarBytes : kStreamAheadBatchBytes;

template <int MR, bool kSwiglu, bool kStream>
void tile_q8(const quant::QuantRowsView& x, int64_t m0, const PackedWeight& w, int64_t p, float* y,
             int64_t ldy, int ncols) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512 sum[MR][2];
    for (int m = 0; m < MR; ++m) sum[m][0] = sum[m][1] = _mm512_setzero_ps();
    for (int64_t g = 0; g < w.n_blocks; ++g) {
        const uint8_t* blk = w.quant_block(p, g);
        __m512i acc[MR][2];
        for (int m = 0; m < MR; ++m)
            acc[m][0] = acc[m][1] = _mm512_set1_epi32(-128 * x.xsum[(m0 + m) * x.G + g]);
#pragma GCC unroll 8  // as without the prefetch: GCC stops unrolling it, and the accumulators then shuffle
        for (int j = 0; j < 8; ++j) {
            if constexpr (kStream) prefetch_128_ahead(blk + j * 128, kStreamAhead<MR>);
            const __m512i w0 = _mm512_xor_si512(_mm512_loadu_si512(blk + j * 128), flip);
            const __m512i w1 = _mm512_xor_si512(_mm512_loadu_si512(blk + j * 128 + 64), flip);
            for (int m = 0; m < MR; ++m) {
                const __m512i a = bcast_quad(x.row(m0 + m) + g * kQuantGroup + 4 * j);
                acc[m][0] = _mm512_dpbusd_epi32(acc[m][0], w0, a);
                acc[m][1] = _mm512_dpbusd_epi32(acc[m][1], w1, a);
            }
        }
        scale_group<MR>(x, m0, g, blk + quant::f16_offset(WeightFormat::Q8), acc, sum);
    }
    store_tile<MR, kSwiglu>(sum, y + m0 * ldy, ldy, ncols);
}

template <int MR, bool kSwiglu, bool kStream>
void tile_q4(const quant::QuantRowsView& x, int64_t m0, const PackedWeight& w, int64_t p, float* y,
             int64_t ldy, int ncols) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), high4 = _mm512_set1_epi8(static_cast<char>(0xF0));
    // A decode row (MR = 1) multiplies the high nibbles in place, as 16 (q + 8): one AND instead of a
    // shift and an AND, into accumulators of their own, divided by 16 exactly at the end of the group
    // (|16 x 15 x 127 x 32| < 2^20). The unpacking bounds this kernel where the weights come fast (Zen 4,
    // double-pumped 512-bit units: `bench_ops BM_LinearQuant/1/4096/1024/1/1`, L3-resident, 24.0-26.7 us
    // against 26.2-33.6 us, 5 of 5 interleaved rounds). Two rows measured the same either way; larger
    // tiles have no registers for the second set and shift the nibbles down.
    constexpr bool kInPlaceHigh = MR == 1;
    __m512 sum[MR][2];
    for (int m = 0; m < MR; ++m) sum[m][0] = sum[m][1] = _mm512_setzero_ps();
    for (int64_t g = 0; g < w.n_blocks; ++g) {
        const uint8_t* blk = w.quant_block(p, g);
        __m512i acc[MR][2], acc16[kInPlaceHigh ? MR : 1][2];
        for (int m = 0; m < MR; ++m)
            acc[m][0] = acc[m][1] = _mm512_set1_epi32(-8 * x.xsum[(m0 + m) * x.G + g]);
        if constexpr (kInPlaceHigh)
            for (int m = 0; m < MR; ++m) acc16[m][0] = acc16[m][1] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            if constexpr (kStream) prefetch_128_ahead(blk + j * 128, kStreamAhead<MR>);
            const __m512i b0 = _mm512_loadu_si512(blk + j * 128), b1 = _mm512_loadu_si512(blk + j * 128 + 64);
            const __m512i lo0 = _mm512_and_si512(b0, low4), lo1 = _mm512_and_si512(b1, low4);
            if constexpr (kInPlaceHigh) {
                const __m512i hi0 = _mm512_and_si512(b0, high4), hi1 = _mm512_and_si512(b1, high4);
                for (int m = 0; m < MR; ++m) {
                    const int8_t* xr = x.row(m0 + m) + g * kQuantGroup + 8 * j;
                    const __m512i xlo = bcast_quad(xr), xhi = bcast_quad(xr + 4);
                    acc[m][0] = _mm512_dpbusd_epi32(acc[m][0], lo0, xlo);
                    acc[m][1] = _mm512_dpbusd_epi32(acc[m][1], lo1, xlo);
                    acc16[m][0] = _mm512_dpbusd_epi32(acc16[m][0], hi0, xhi);
                    acc16[m][1] = _mm512_dpbusd_epi32(acc16[m][1], hi1, xhi);
                }
            } else {
                const __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(b0, 4), low4);
                const __m512i hi1 = _mm512_and_si512(_mm512_srli_epi16(b1, 4), low4);
                for (int m = 0; m < MR; ++m) {
                    const int8_t* xr = x.row(m0 + m) + g * kQuantGroup + 8 * j;
                    const __m512i xlo = bcast_quad(xr), xhi = bcast_quad(xr + 4);
                    acc[m][0] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[m][0], lo0, xlo), hi0, xhi);
                    acc[m][1] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[m][1], lo1, xlo), hi1, xhi);
                }
            }
        }
        if constexpr (kInPlaceHigh)
            for (int m = 0; m < MR; ++m) {
                acc[m][0] = _mm512_add_epi32(acc[m][0], _mm512_srai_epi32(acc16[m][0], 4));
                acc[m][1] = _mm512_add_epi32(acc[m][1], _mm512_srai_epi32(acc16[m][1], 4));
            }
        scale_group<MR>(x, m0, g, blk + quant::f16_offset(WeightFormat::Q4), acc, sum);
    }
    store_tile<MR, kSwiglu>(sum, y + m0 * ldy, ldy, ncols);
}

// int8-x: the int8 tile with each group's quads 0-3 and 4-7 in accumulators of their own (each half has
// its own f32 scale and offset), the weight's +128 offset taken out with each half's activation sum.
template <int MR, bool kSwiglu, bool kStream>
void tile_q8x(const quant::QuantRowsView& x, int64_t m0, const PackedWeight& w, int64_t p, float* y,
              int64_t ldy, int ncols) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512 sum[MR][2];
    for (int m = 0; m < MR; ++m) sum[m][0] = sum[m][1] = _mm512_setzero_ps();
    for (int64_t g = 0; g < w.n_blocks; ++g) {
        const uint8_t* blk = w.quant_block(p, g);
        __m512i acc[2][MR][2];  // [half][row][vector]
        for (int m = 0; m < MR; ++m) {
            const int64_t i = (m0 + m) * x.G + g;
            acc[0][m][0] = acc[0][m][1] = _mm512_set1_epi32(-128 * x.xsum_lo[i]);
            acc[1][m][0] = acc[1][m][1] = _mm512_set1_epi32(-128 * (x.xsum[i] - x.xsum_lo[i]));
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            if constexpr (kStream) prefetch_128_ahead(blk + j * 128, kStreamAhead<MR>);
            const __m512i w0 = _mm512_xor_si512(_mm512_loadu_si512(blk + j * 128), flip);
            const __m512i w1 = _mm512_xor_si512(_mm512_loadu_si512(blk + j * 128 + 64), flip);
            for (int m = 0; m < MR; ++m) {
                const __m512i a = bcast_quad(x.row(m0 + m) + g * kQuantGroup + 4 * j);
                acc[j / 4][m][0] = _mm512_dpbusd_epi32(acc[j / 4][m][0], w0, a);
                acc[j / 4][m][1] = _mm512_dpbusd_epi32(acc[j / 4][m][1], w1, a);
            }
        }
        // sum += xs * (a_h * D_h - b_h * S_h) for both halves.
        const float* ab = reinterpret_cast<const float*>(blk + quant::kQ8XScalesOffset);
        for (int h = 0; h < 2; ++h) {
            const __m512 a0 = _mm512_loadu_ps(ab + h * 32), a1 = _mm512_loadu_ps(ab + h * 32 + 16);
            const __m512 b0 = _mm512_loadu_ps(ab + (2 + h) * 32),
                         b1 = _mm512_loadu_ps(ab + (2 + h) * 32 + 16);
            for (int m = 0; m < MR; ++m) {
                const int64_t i = (m0 + m) * x.G + g;
                const __m512 xs = _mm512_set1_ps(x.xs[i]);
                const __m512 s =
                    _mm512_set1_ps(static_cast<float>(h == 0 ? x.xsum_lo[i] : x.xsum[i] - x.xsum_lo[i]));
                const __m512 p0 =
                    _mm512_fnmadd_ps(b0, s, _mm512_mul_ps(a0, _mm512_cvtepi32_ps(acc[h][m][0])));
                const __m512 p1 =
                    _mm512_fnmadd_ps(b1, s, _mm512_mul_ps(a1, _mm512_cvtepi32_ps(acc[h][m][1])));
                sum[m][0] = _mm512_fmadd_ps(p0, xs, sum[m][0]);
                sum[m][1] = _mm512_fmadd_ps(p1, xs, sum[m][1]);
            }
        }
    }
    store_tile<MR, kSwiglu>(sum, y + m0 * ldy, ldy, ncols);
}

// A one-row tile of a batch (its last row) reads the panel the tile before it left in cache.
template <int MR, bool kSwiglu>
struct TileQ8 {
    static constexpr TileFn run = tile_q8<MR, kSwiglu, false>;
    static constexpr TileFn streamed = tile_q8<MR, kSwiglu, MR >= 2>;
    static constexpr TileFn far = tile_q8<MR, kSwiglu, true>;
};

template <int MR, bool kSwiglu>
struct TileQ8X {
    static constexpr TileFn run = tile_q8x<MR, kSwiglu, false>;
    static constexpr TileFn streamed = tile_q8x<MR, kSwiglu, MR >= 2>;
    static constexpr TileFn far = tile_q8x<MR, kSwiglu, true>;
};

template <int MR, bool kSwiglu>
struct TileQ4 {
    static constexpr TileFn run = tile_q4<MR, kSwiglu, false>;
    static constexpr TileFn streamed = tile_q4<MR, kSwiglu, MR >= 2>;
    static constexpr TileFn far = tile_q4<MR, kSwiglu, true>;
};

}  // namespace

bool streams_far() {
    return cpu_has_amx_bf16();
}

void linear_q8(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
               int64_t p1) {
    run_format<TileQ8, false>(x, w, y, ldy, p0, p1);
}
void linear_q8_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                      int64_t p1) {
    run_format<TileQ8, true>(x, w, y, ldy, p0, p1);
}

void linear_q8x(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                int64_t p1) {
    run_format<TileQ8X, false>(x, w, y, ldy, p0, p1);
}
void linear_q8x_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                       int64_t p0, int64_t p1) {
    run_format<TileQ8X, true>(x, w, y, ldy, p0, p1);
}

void linear_q4(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
               int64_t p1) {
    run_format<TileQ4, false>(x, w, y, ldy, p0, p1);
}
void linear_q4_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                      int64_t p1) {
    run_format<TileQ4, true>(x, w, y, ldy, p0, p1);
}

}  // namespace gdn::cpu::avx512
