// The int8 (Q8) products on AMX-INT8 tiles (where dispatch.h has_amx_int8(), from kQ8AmxRows rows on:
// decode batches, verifies, prefill). On a core whose vpdpbusd issues once a cycle the VNNI kernel
// (linear_quant_avx512.cpp) is bound by its 8 vpdpbusd per row, group and 16 columns from a few rows on;
// one tdpbssd takes 16 rows of a group and 16 columns. Per panel, 16-row block and group of 32 k:
//
//   C [rows, 32] int32 = xq rows [rows, 32 bytes] x the block's 8 k-quads [8, 32 columns x 4 bytes]
//                        (tdpbssd: signed x signed, the block's bytes as they are stored; two C tiles of
//                        16 columns, the A tile loaded once)
//   sum [rows, 32] += float(C) * (scale_w * scale_x)   (vectors, after the tiles are stored)
//
// The integer sums are exact (|32 x 127 x 127| < 2^31) and the epilogue is the VNNI kernel's operation
// for operation, in the same group order, so every output has the VNNI kernel's bits: a row's sums do
// not depend on its batch (OpsLinear.QuantizedRowsDoNotDependOnTheBatch). The per-group epilogue, not
// the tiles, bounds the kernel (which is why the other formats, whose groups need more vector work,
// stay on vpdpbusd).
#define GDN_SIMD_AVX512
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "ops/cpu/avx512/amx_tiles.h"
#include "ops/cpu/avx512/quant_tiles_avx512.h"
#include "ops/cpu/linear_quant_kernels.h"
#include "ops/quant/quant_format.h"

namespace gdn::cpu::avx512 {

namespace {

// Tiles: 0, 1 and 2, 3 = C of even / odd groups (columns 0-15, 16-31; rows x 16 int32), 4 / 7 = the rows'
// group bytes of even / odd groups (rows x 32 bytes), 5, 6 = the block's k-quads (8 x 64 bytes per 16
// columns). Two groups in flight: a group's C tiles are stored while the next one's products run.
void configure_q8_tiles(int rows) {
    amx::TileConfig c;
    auto set = [&](int t, int r, int colsb) {
        c.rows[t] = static_cast<uint8_t>(r);
        c.colsb[t] = static_cast<uint16_t>(colsb);
    };
    for (int t : {0, 1, 2, 3}) set(t, rows, 64);
    set(4, rows, 32), set(7, rows, 32), set(5, 8, 64), set(6, 8, 64);
    amx::load_config(c);
}

// Asks for a block's lines kStreamPrefetchBytes ahead (the panel streams from memory in a decode step;
// in prefill a slab's later row blocks find it in cache and the requests cost little). Asking only for
// the first row block's (a bool down to here) measured 25% slower decode steps: GCC 12 then dropped
// every prefetch from the kernel (objdump: none left).
inline void stream_block_ahead(const uint8_t* blk) {
    for (int64_t off = 0; off < quant::kQ8BlockBytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk) + amx::kStreamPrefetchBytes + off, _MM_HINT_T0);
}

// The tile numbers are immediates of the tile instructions (macros that stringify them), hence a macro:
// group g's products into C tiles c0, c1 with its rows in A tile a.
#define GDN_Q8_GROUP_PRODUCT(a, c0, c1, xg, ldx, blk) \
    do {                                                \
        stream_block_ahead(blk);                        \
        _tile_loadd(a, xg, ldx);                        \
        _tile_loadd(5, blk, 128);                       \
        _tile_loadd(6, (blk) + 64, 128);                \
        _tile_zero(c0);                                 \
        _tile_zero(c1);                                 \
        _tile_dpbssd(c0, a, 5);                         \
        _tile_dpbssd(c1, a, 6);                         \
    } while (0)

// Panel p's sums for the rows of x (at most 16, the tiles configured for them) into sum [rows][32].
inline void panel_rows(const quant::QuantRowsView& x, const PackedWeight& w, int64_t p, float* sum) {
    const int rows = static_cast<int>(x.M);
    alignas(64) int32_t c[2][16 * 32];  // a group's C tiles, [rows][16] twice (columns 0-15, 16-31)
    const int64_t f16_at = quant::f16_offset(WeightFormat::Q8);
    std::fill(sum, sum + rows * 32, 0.0f);
    // sum += float(C) * (scale_w * scale_x) for groups [g, g + n) in order (n = 1 or 2), one pass over the
    // rows' sums.
    auto epilogue = [&](int64_t g, int n) {
        __m512 ws[2][2];
        for (int i = 0; i < n; ++i) {
            const uint8_t* scales = w.quant_block(p, g + i) + f16_at;
            ws[i][0] = f16x16(scales);
            ws[i][1] = f16x16(scales + 32);
        }
        for (int m = 0; m < rows; ++m) {
            float* sm = sum + m * 32;
            __m512 s0 = _mm512_load_ps(sm), s1 = _mm512_load_ps(sm + 16);
            for (int i = 0; i < n; ++i) {
                const __m512 xs = _mm512_set1_ps(x.xs[m * x.G + g + i]);
                const __m512i a0 = _mm512_load_si512(c[i] + m * 16);
                const __m512i a1 = _mm512_load_si512(c[i] + 16 * 16 + m * 16);
                s0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), _mm512_mul_ps(ws[i][0], xs), s0);
                s1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), _mm512_mul_ps(ws[i][1], xs), s1);
            }
            _mm512_store_ps(sm, s0);
            _mm512_store_ps(sm + 16, s1);
        }
    };
    // Groups two at a time: each pair's products run while the previous pair's tiles are read back.
    int64_t g = 0;
    for (; g + 1 < w.n_blocks; g += 2) {
        GDN_Q8_GROUP_PRODUCT(4, 0, 1, x.xq + g * kQuantGroup, x.Kp, w.quant_block(p, g));
        GDN_Q8_GROUP_PRODUCT(7, 2, 3, x.xq + (g + 1) * kQuantGroup, x.Kp, w.quant_block(p, g + 1));
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[0] + 16 * 16, 64);
        _tile_stored(2, c[1], 64);
        _tile_stored(3, c[1] + 16 * 16, 64);
        epilogue(g, 2);
    }
    if (g < w.n_blocks) {
        GDN_Q8_GROUP_PRODUCT(4, 0, 1, x.xq + g * kQuantGroup, x.Kp, w.quant_block(p, g));
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[0] + 16 * 16, 64);
        epilogue(g, 1);
    }
}

// Rows [m0, m0 + n) of x as a view of their own.
quant::QuantRowsView rows_of(const quant::QuantRowsView& x, int64_t m0, int64_t n) {
    quant::QuantRowsView v = x;
    v.M = n;
    v.xq += m0 * x.Kp;
    v.xs += m0 * x.G;
    v.xsum += m0 * x.G;
    return v;
}

}  // namespace

template <bool kSwiglu>
void amx_q8_panels(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                   int64_t p1) {
    alignas(64) float sum[16 * 32];  // [rows][32]
    // Rows in L2-sized slabs (ops/cpu/row_slabs.h), each panel against every 16-row block of a slab.
    const int64_t slab = slab_rows(x.Kp, 16);
    int configured = 0;
    for (int64_t s0 = 0; s0 < x.M; s0 += slab) {
        const int64_t s1 = std::min(x.M, s0 + slab);
        for (int64_t p = p0; p < p1; ++p) {
            const int ncols = static_cast<int>(std::min<int64_t>(quant::kCols, w.N - p * quant::kCols));
            for (int64_t m0 = s0; m0 < s1; m0 += 16) {
                const int rows = static_cast<int>(std::min<int64_t>(16, s1 - m0));
                if (rows != configured) configure_q8_tiles(configured = rows);
                panel_rows(rows_of(x, m0, rows), w, p, sum);
                float* yr = y + m0 * ldy;
                for (int m = 0; m < rows; ++m) {
                    const __m512 v0 = _mm512_load_ps(sum + m * 32), v1 = _mm512_load_ps(sum + m * 32 + 16);
                    if constexpr (kSwiglu) {
                        _mm512_storeu_ps(yr + m * ldy + p * 16, _mm512_mul_ps(simd::vsilu(v0), v1));
                    } else {
                        _mm512_mask_storeu_ps(yr + m * ldy + p * 32, first_lanes(ncols), v0);
                        _mm512_mask_storeu_ps(yr + m * ldy + p * 32 + 16, first_lanes(ncols - 16), v1);
                    }
                }
            }
        }
    }
    amx::release();
}

template void amx_q8_panels<false>(const quant::QuantRowsView&, const PackedWeight&, float*, int64_t, int64_t,
                                   int64_t);
template void amx_q8_panels<true>(const quant::QuantRowsView&, const PackedWeight&, float*, int64_t, int64_t,
                                  int64_t);

}  // namespace gdn::cpu::avx512
