// A thread's AMX tile configuration, shared by the AMX kernels (linear_amx.cpp, attention_amx.cpp; both
// compiled with -mamx-tile -mamx-bf16). Every kernel uses one shape: tiles 0-3 are f32 C blocks (rows
// 0-15 / 16-31 x 16 columns), 4-5 the A rows 0-15 / 16-31 (16 bf16 pairs), 6-7 B (16 pairs x 16
// columns). A block of fewer than 32 rows gets tiles of exactly its rows, so no row past the block is
// read (each output element is its own row times its own column: the tile shape never changes a sum).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace gdn::cpu::avx512::amx {

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// How far ahead of its tile loads a kernel whose B operand streams from DRAM (decode's bf16 panels, the
// argmax screen's int8 copy) asks for the operand's lines: tile loads alone leave the L2 streamer behind
// the vdpbf16ps kernel's rate; 4-8 KB ahead closes the gap (docs/perf.md, behind the constants).
constexpr int64_t kStreamPrefetchBytes = 6144;

// Loads a tile configuration. Not _tile_loadconfig: GCC 12 declares its asm as reading only the first 8
// bytes of the configuration, so the compiler may drop the stores to the rest as dead (seen: a tile's
// rows left 0 and a SIGILL at its first load); this operand is the whole 64-byte struct.
inline void ldtilecfg(const TileConfig& c) {
    __asm__ volatile("ldtilecfg %0" ::"m"(c));
}

// The rows the calling thread's configuration is for (0: none loaded, -1: another shape, load_config).
inline thread_local int t_config_rows = 0;

// Loads the configuration for blocks of `rows` (1..32) rows unless it is the current one.
inline void configure(int rows) {
    if (rows == t_config_rows) return;
    TileConfig c;
    auto set = [&](int t, int r) {
        c.rows[t] = static_cast<uint8_t>(r);
        c.colsb[t] = r > 0 ? 64 : 0;
    };
    const int r0 = rows < 16 ? rows : 16, r1 = rows - r0;
    set(0, r0), set(1, r0), set(4, r0);
    set(2, r1), set(3, r1), set(5, r1);
    set(6, 16), set(7, 16);
    ldtilecfg(c);
    t_config_rows = rows;
}

// Loads a configuration of another shape (linear_quant_amx.cpp's); the next configure() reloads its own.
inline void load_config(const TileConfig& c) {
    ldtilecfg(c);
    t_config_rows = -1;
}

// Releases the thread's tiles (once a kernel call is done).
inline void release() {
    if (t_config_rows == 0) return;
    _tile_release();
    t_config_rows = 0;
}

// c [rows x 32] (row stride ldc floats) = a [rows, lda] x b over `steps` k-steps of 16 bf16 pairs: step s
// reads a's pairs [16 s, 16 s + 16) and b's 16 rows from b + s * b_step (uint32 units; row stride ldb,
// columns 0-15 at the row start, 16-31 at +16). Loads the configuration for `rows`. prefetch_bytes > 0:
// each step also prefetches the b_step words that far ahead of its own b (an operand streaming from DRAM).
inline void gemm_block(const uint32_t* a, int64_t lda, int rows, const uint32_t* b, int64_t ldb,
                       int64_t b_step, int64_t steps, float* c, int64_t ldc, int64_t prefetch_bytes = 0) {
    configure(rows);
    const bool two = rows > 16;
    _tile_zero(0);
    _tile_zero(1);
    if (two) {
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t s = 0; s < steps; ++s) {
        const uint32_t* bs = b + s * b_step;
        if (prefetch_bytes > 0) {
            const char* pf = reinterpret_cast<const char*>(bs) + prefetch_bytes;
            for (int64_t off = 0; off < b_step * 4; off += 64) _mm_prefetch(pf + off, _MM_HINT_T0);
        }
        _tile_loadd(4, a + 16 * s, lda * 4);
        _tile_loadd(6, bs, ldb * 4);
        _tile_loadd(7, bs + 16, ldb * 4);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two) {
            _tile_loadd(5, a + 16 * lda + 16 * s, lda * 4);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, c, ldc * 4);
    _tile_stored(1, c + 16, ldc * 4);
    if (two) {
        _tile_stored(2, c + 16 * ldc, ldc * 4);
        _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
    }
}

}  // namespace gdn::cpu::avx512::amx
