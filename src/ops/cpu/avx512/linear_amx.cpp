// AMX tiles for the bf16 linear kernels (linear_avx512.cpp): one 32 x 32 output block of a weight panel
// per call, from TMUL's tdpbf16ps (16 x 16 f32 tiles, 16 k-pairs per step: 8192 multiply-adds in one
// instruction, ~16x the vdpbf16ps rate of a core).
//
// The panel layout of ops/linear.h is already AMX's B operand: k-pair kk of a panel is 32 columns x 2
// bf16 = 128 bytes, so columns 0-15 of 16 consecutive k-pairs are a 16-row tile with a 128-byte stride
// (columns 16-31 the same, 64 bytes on). The activations as bf16 pairs ([M, ldp] uint32) are the A
// operand as they are. Tiles: C 0-3 (rows 0-15 / 16-31 x columns 0-15 / 16-31), A 4-5, B 6-7.
// The configuration (rows per tile) is loaded when a thread's block shape changes: once per call in
// decode, twice per panel in a prefill whose M is not a multiple of 32.
#include <immintrin.h>

#include <cstdint>

#include "ops/cpu/linear_kernels.h"

namespace gdn::cpu::avx512 {

namespace {

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Decode streams each panel once from DRAM: tile loads alone leave the L2 streamer behind (measured
// 24.4 against vdpbf16ps' 26.8 GB/s on one 7168 x 1024 GEMV), prefetching 4-8 KB ahead closes the gap.
constexpr int64_t kPrefetchBytes = 6144;
constexpr int64_t kStepBytes = 16 * 2 * kPanelCols * 2;  // one k-step of a panel: 16 k-pairs x 32 columns

}  // namespace

namespace {
// The rows the calling thread's tile configuration is for (0: none loaded). A block of fewer than 32 rows
// gets tiles of exactly its rows, so no row past M is ever read (a row's sums do not depend on the tile
// shape: each output element is its own row times its own column).
thread_local int t_config_rows = 0;

void configure(int rows) {
    if (rows == t_config_rows) return;
    TileConfig c;
    auto set = [&](int t, int r) {
        c.rows[t] = static_cast<uint8_t>(r);
        c.colsb[t] = r > 0 ? 64 : 0;
    };
    const int r0 = rows < 16 ? rows : 16, r1 = rows - r0;
    set(0, r0), set(1, r0), set(4, r0);  // C rows 0-15 x columns 0-15 / 16-31, A rows 0-15
    set(2, r1), set(3, r1), set(5, r1);  // the same for rows 16-31
    set(6, 16), set(7, 16);              // B: 16 k-pairs x 16 columns
    _tile_loadconfig(&c);
    t_config_rows = rows;
}
}  // namespace

void amx_end() {
    if (t_config_rows == 0) return;
    _tile_release();
    t_config_rows = 0;
}

void amx_panel_block(const uint32_t* xp, int64_t ldp, int rows, const uint16_t* B, int64_t kk_end, float* c,
                     bool prefetch) {
    configure(rows);
    const bool two_row_tiles = rows > 16;
    const int64_t a_stride = ldp * 4;
    _tile_zero(0);
    _tile_zero(1);
    if (two_row_tiles) {
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t kk = 0; kk < kk_end; kk += 16) {
        const uint16_t* b = B + kk * 2 * kPanelCols;
        if (prefetch) {
            const char* pf = reinterpret_cast<const char*>(b) + kPrefetchBytes;
            for (int64_t off = 0; off < kStepBytes; off += 64) _mm_prefetch(pf + off, _MM_HINT_T0);
        }
        _tile_loadd(4, xp + kk, a_stride);
        _tile_loadd(6, b, 128);
        _tile_loadd(7, b + 32, 128);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two_row_tiles) {
            _tile_loadd(5, xp + 16 * ldp + kk, a_stride);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, c, 128);
    _tile_stored(1, c + 16, 128);
    if (two_row_tiles) {
        _tile_stored(2, c + 16 * 32, 128);
        _tile_stored(3, c + 16 * 32 + 16, 128);
    }
}

}  // namespace gdn::cpu::avx512
