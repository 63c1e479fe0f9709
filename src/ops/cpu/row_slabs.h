// Prefill GEMMs take their rows in slabs whose packed activations (~kSlabBytes) stay in L2 while every
// weight panel of a thread's range meets them: the activations then come from L2 once per panel, not
// from L3 or DRAM (M = 16384 at K = 3584: 117 MB of bf16 pairs a panel), and a panel streams once per
// slab. Used by the AMX and vdpbf16ps kernels (avx512/linear_avx512.cpp) and the AVX-512 quantized tiles
// (avx512/quant_tiles_avx512.h). A row's sums never depend on its slab or tile.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gdn::cpu {

constexpr int64_t kSlabBytes = 512 << 10;

// Rows per slab for rows of row_bytes packed bytes: a multiple of tile_rows, at least one tile.
inline int64_t slab_rows(int64_t row_bytes, int64_t tile_rows) {
    return std::max<int64_t>(tile_rows, kSlabBytes / std::max<int64_t>(row_bytes, 1) / tile_rows * tile_rows);
}

}  // namespace gdn::cpu
