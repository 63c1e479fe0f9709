// AVX-512 VNNI kernels of the super-block formats int4-k and int6-k (layouts in ops/quant/quant_format.h).
// As the int8 / int4 kernels (linear_quant_avx512.cpp): one vector holds 16 columns x one k-quad, the
// activation quad is broadcast, vpdpbusd multiplies the unsigned weight by the signed activation and sums
// each quad into an int32 lane, so a group's dot D = sum q x is exact in int32; then per group and row
// one f32 step that applies the group's scale and minimum:
//   int4-k (q in [0, 15], unsigned as stored):  y += (d sc) xs D - (dmin m) (xs S)
//   int6-k (u = q + 32 in [0, 63]):              y += (d sc) xs (sum u x - 32 S)
// with S the row's group sum. d sc and dmin m are formed once per group and shared by the tile's rows.
//
// Cost per group and 16 columns, per row: 8 vpdpbusd and 3-4 epilogue ops; the unpacking (nibble split,
// int6-k's high bit pairs) and the level widening are shared by the rows of a tile, so prefill tiles of
// kMR rows unpack in place (no unpacked copy as on AVX2, where a row costs 3-4x as many ops).
#define GDN_SIMD_AVX512
#include <immintrin.h>

#include "ops/cpu/avx512/quant_tiles_avx512.h"
#include "ops/cpu/linear_quant_kernels.h"

namespace gdn::cpu::avx512 {

namespace {

constexpr int64_t kGroupsPerBlock = kSuperBlock / kQuantGroup;

// Calls fn(g, rec, f16) for each group g of panel p that the rows have (x_groups of them), in order: rec
// its group record (record_bytes each), f16 its super-block's f16 fields.
template <typename Fn>
inline void for_each_group(const PackedWeight& w, int64_t p, int64_t x_groups, int64_t record_bytes,
                           const Fn& fn) {
    for (int64_t b = 0; b < w.n_blocks; ++b) {
        const uint8_t* blk = w.quant_block(p, b);
        const uint8_t* f16 = blk + quant::f16_offset(w.format);
        const int64_t groups = std::min<int64_t>(kGroupsPerBlock, x_groups - b * kGroupsPerBlock);
        for (int64_t j = 0; j < groups; ++j) fn(b * kGroupsPerBlock + j, blk + j * record_bytes, f16);
    }
}

template <int MR, bool kSwiglu, bool kFar>
void tile_q4k(const quant::QuantRowsView& x, int64_t m0, const PackedWeight& w, int64_t p, float* y,
              int64_t ldy, int ncols) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), high4 = _mm512_set1_epi8(static_cast<char>(0xF0));
    // A decode row multiplies the high nibbles in place, as 16 q, into accumulators of their own, exactly
    // divided by 16 after the group (as linear_quant_avx512.cpp's int4 tile: one AND, not shift + AND).
    constexpr bool kInPlaceHigh = MR == 1;
    __m512 sum[MR][2];
    for (int m = 0; m < MR; ++m) sum[m][0] = sum[m][1] = _mm512_setzero_ps();
    for_each_group(w, p, x.G, quant::kQ4KRecordBytes, [&](int64_t g, const uint8_t* rec, const uint8_t* f16) {
        __m512i acc[MR][2], acc16[MR][2];  // acc16: the in-place high nibbles (MR = 1 only)
        for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_si512();
        if constexpr (kInPlaceHigh)
            for (int m = 0; m < MR; ++m) acc16[m][0] = acc16[m][1] = _mm512_setzero_si512();
        for (int s = 0; s < 4; ++s) {
            if constexpr (MR == 1) record_ahead<kFar>(rec, s, 4, quant::kQ4KRecordBytes);
            const __m512i b0 = _mm512_loadu_si512(rec + s * 128), b1 = _mm512_loadu_si512(rec + s * 128 + 64);
            const __m512i lo0 = _mm512_and_si512(b0, low4), lo1 = _mm512_and_si512(b1, low4);
            if constexpr (kInPlaceHigh) {
                const __m512i hi0 = _mm512_and_si512(b0, high4), hi1 = _mm512_and_si512(b1, high4);
                for (int m = 0; m < MR; ++m) {
                    const int8_t* xr = x.row(m0 + m) + g * kQuantGroup + 8 * s;
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
                    const int8_t* xr = x.row(m0 + m) + g * kQuantGroup + 8 * s;
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
        __m512 ds[2], dm[2];
        for (int v = 0; v < 2; ++v)
            q4k_group_scales(rec + quant::kQ4KLevelsOffset, v, f16x16(f16 + 32 * v),
                             f16x16(f16 + 64 + 32 * v), &ds[v], &dm[v]);
        for (int m = 0; m < MR; ++m) {
            const int64_t i = (m0 + m) * x.G + g;
            const __m512 xs = _mm512_set1_ps(x.xs[i]);
            const __m512 xs_sum = _mm512_set1_ps(x.xs[i] * static_cast<float>(x.xsum[i]));
            for (int v = 0; v < 2; ++v) {
                const __m512 r =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][v]), _mm512_mul_ps(ds[v], xs), sum[m][v]);
                sum[m][v] = _mm512_fnmadd_ps(dm[v], xs_sum, r);
            }
        }
    });
    store_tile<MR, kSwiglu>(sum, y + m0 * ldy, ldy, ncols);
}

template <int MR, bool kSwiglu, bool kFar>
void tile_q6k(const quant::QuantRowsView& x, int64_t m0, const PackedWeight& w, int64_t p, float* y,
              int64_t ldy, int ncols) {
    __m512 sum[MR][2];
    for (int m = 0; m < MR; ++m) sum[m][0] = sum[m][1] = _mm512_setzero_ps();
    for_each_group(w, p, x.G, quant::kQ6KRecordBytes, [&](int64_t g, const uint8_t* rec, const uint8_t* f16) {
        __m512i acc[MR][2];  // starts at -32 S: after the group, exactly D = sum q x
        for (int m = 0; m < MR; ++m)
            acc[m][0] = acc[m][1] = _mm512_set1_epi32(-32 * x.xsum[(m0 + m) * x.G + g]);
        for (int s = 0; s < 4; ++s) {
            if constexpr (MR == 1) record_ahead<kFar>(rec, s, 4, quant::kQ6KRecordBytes);
            __m512i lo0, hi0, lo1, hi1;
            q6k_quads(rec, s, 0, &lo0, &hi0);
            q6k_quads(rec, s, 1, &lo1, &hi1);
            for (int m = 0; m < MR; ++m) {
                const int8_t* xr = x.row(m0 + m) + g * kQuantGroup + 8 * s;
                const __m512i xlo = bcast_quad(xr), xhi = bcast_quad(xr + 4);
                acc[m][0] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[m][0], lo0, xlo), hi0, xhi);
                acc[m][1] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[m][1], lo1, xlo), hi1, xhi);
            }
        }
        const __m512 ds[2] = {q6k_group_scale(rec, f16, 0), q6k_group_scale(rec, f16, 1)};
        for (int m = 0; m < MR; ++m) {
            const __m512 xs = _mm512_set1_ps(x.xs[(m0 + m) * x.G + g]);
            for (int v = 0; v < 2; ++v)
                sum[m][v] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][v]), _mm512_mul_ps(ds[v], xs), sum[m][v]);
        }
    });
    store_tile<MR, kSwiglu>(sum, y + m0 * ldy, ldy, ncols);
}

// int6-k16 (llama.cpp's Q6_K): the int6-k tile with quad pairs 0-1 and 2-3 (k 0-15, 16-31) in accumulators
// of their own, each started at -32 times its half's sum and scaled by its own d sc.
template <int MR, bool kSwiglu, bool kFar>
void tile_q6k16(const quant::QuantRowsView& x, int64_t m0, const PackedWeight& w, int64_t p, float* y,
                int64_t ldy, int ncols) {
    __m512 sum[MR][2];
    for (int m = 0; m < MR; ++m) sum[m][0] = sum[m][1] = _mm512_setzero_ps();
    for_each_group(
        w, p, x.G, quant::kQ6K16RecordBytes, [&](int64_t g, const uint8_t* rec, const uint8_t* f16) {
            __m512i acc[2][MR][2];  // [half][row][vector]
            for (int m = 0; m < MR; ++m) {
                const int64_t i = (m0 + m) * x.G + g;
                acc[0][m][0] = acc[0][m][1] = _mm512_set1_epi32(-32 * x.xsum_lo[i]);
                acc[1][m][0] = acc[1][m][1] = _mm512_set1_epi32(-32 * (x.xsum[i] - x.xsum_lo[i]));
            }
            for (int s = 0; s < 4; ++s) {
                if constexpr (MR == 1) record_ahead<kFar>(rec, s, 4, quant::kQ6K16RecordBytes);
                __m512i lo0, hi0, lo1, hi1;
                q6k_quads(rec, s, 0, &lo0, &hi0);
                q6k_quads(rec, s, 1, &lo1, &hi1);
                const int h = s / 2;
                for (int m = 0; m < MR; ++m) {
                    const int8_t* xr = x.row(m0 + m) + g * kQuantGroup + 8 * s;
                    const __m512i xlo = bcast_quad(xr), xhi = bcast_quad(xr + 4);
                    acc[h][m][0] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[h][m][0], lo0, xlo), hi0, xhi);
                    acc[h][m][1] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[h][m][1], lo1, xlo), hi1, xhi);
                }
            }
            for (int h = 0; h < 2; ++h) {
                const __m512 ds[2] = {q6k_group_scale(rec + h * quant::kCols, f16, 0),
                                      q6k_group_scale(rec + h * quant::kCols, f16, 1)};
                for (int m = 0; m < MR; ++m) {
                    const __m512 xs = _mm512_set1_ps(x.xs[(m0 + m) * x.G + g]);
                    for (int v = 0; v < 2; ++v)
                        sum[m][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h][m][v]),
                                                    _mm512_mul_ps(ds[v], xs), sum[m][v]);
                }
            }
        });
    store_tile<MR, kSwiglu>(sum, y + m0 * ldy, ldy, ncols);
}

// The k-formats' batch tiles are bound by their unpacking, not the stream (not measured with the
// prefetch of streams_batch): one form for both.
template <int MR, bool kSwiglu>
struct TileQ4K {
    static constexpr TileFn run = tile_q4k<MR, kSwiglu, false>;
    static constexpr TileFn streamed = run;
    static constexpr TileFn far = tile_q4k<MR, kSwiglu, true>;
};

template <int MR, bool kSwiglu>
struct TileQ6K {
    static constexpr TileFn run = tile_q6k<MR, kSwiglu, false>;
    static constexpr TileFn streamed = run;
    static constexpr TileFn far = tile_q6k<MR, kSwiglu, true>;
};

template <int MR, bool kSwiglu>
struct TileQ6K16 {
    static constexpr TileFn run = tile_q6k16<MR, kSwiglu, false>;
    static constexpr TileFn streamed = run;
    static constexpr TileFn far = tile_q6k16<MR, kSwiglu, true>;
};

}  // namespace

void linear_q4k(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                int64_t p1) {
    run_format<TileQ4K, false>(x, w, y, ldy, p0, p1);
}
void linear_q4k_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                       int64_t p0, int64_t p1) {
    run_format<TileQ4K, true>(x, w, y, ldy, p0, p1);
}

void linear_q6k(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                int64_t p1) {
    run_format<TileQ6K, false>(x, w, y, ldy, p0, p1);
}
void linear_q6k_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                       int64_t p0, int64_t p1) {
    run_format<TileQ6K, true>(x, w, y, ldy, p0, p1);
}

void linear_q6k16(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                  int64_t p1) {
    run_format<TileQ6K16, false>(x, w, y, ldy, p0, p1);
}
void linear_q6k16_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                         int64_t p0, int64_t p1) {
    run_format<TileQ6K16, true>(x, w, y, ldy, p0, p1);
}

}  // namespace gdn::cpu::avx512
