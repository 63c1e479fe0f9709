// AMX tiles for the bf16 linear kernels (linear_avx512.cpp): one 32 x 32 output block of a weight panel
// per call, from TMUL's tdpbf16ps (16 x 16 f32 tiles, 16 k-pairs per step: 8192 multiply-adds in one
// instruction, ~16x the vdpbf16ps rate of a core).
//
// The panel layout of ops/linear.h is already AMX's B operand: k-pair kk of a panel is 32 columns x 2
// bf16 = 128 bytes, so columns 0-15 of 16 consecutive k-pairs are a 16-row tile with a 128-byte stride
// (columns 16-31 the same, 64 bytes on). The activations as bf16 pairs ([M, ldp] uint32) are the A
// operand as they are. Tiles: C 0-3 (rows 0-15 / 16-31 x columns 0-15 / 16-31), A 4-5, B 6-7.
// The configuration (amx_tiles.h) is loaded when a thread's block shape changes: once per call in decode,
// twice per panel in a prefill whose M is not a multiple of 32.
#include <immintrin.h>

#include <cstdint>

#include "ops/cpu/avx512/amx_tiles.h"
#include "ops/cpu/limits_kernels.h"
#include "ops/cpu/linear_kernels.h"

namespace gdn::cpu::avx512 {

void amx_end() {
    amx::release();
}

void amx_panel_block(const uint32_t* xp, int64_t ldp, int rows, const uint16_t* B, int64_t kk_end, float* c,
                     bool prefetch) {
    // B as uint32 words: a k-pair row of the panel is 32 words, a k-step 16 rows.
    amx::gemm_block(xp, ldp, rows, reinterpret_cast<const uint32_t*>(B), kPanelCols, 16 * kPanelCols,
                    kk_end / 16, c, kPanelCols, prefetch ? amx::kStreamPrefetchBytes : 0);
}

double amx_dot_chains(int64_t iters, float* sink) {
    alignas(64) static const uint32_t ones[16 * 16] = {};  // zeros: no denormals, no overflow
    alignas(64) float c[16 * 16];
    amx::configure(32);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
    for (int64_t i = 0; i < iters; ++i) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, 64);
    amx::release();
    *sink += c[0];
    return 4.0 * 16 * 16 * 32 * 2 * static_cast<double>(iters);  // 16 x 16 outputs, 32 bf16 products each
}

}  // namespace gdn::cpu::avx512
