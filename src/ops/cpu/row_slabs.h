// Prefill GEMMs take their rows in slabs whose packed activations (~kSlabBytes) stay in L2 while every
// weight panel of a thread's range meets them: the activations then come from L2 once per panel, not
// from L3 or DRAM (M = 16384 at K = 3584: 117 MB of bf16 pairs a panel), and a panel streams once per
// slab. Used by the AMX and vdpbf16ps kernels (avx512/linear_avx512.cpp) and the AVX-512 quantized tiles
// (avx512/quant_tiles_avx512.h); the bf16 products also take their rows in chunks of several slabs
// (chunk_rows below). A row's sums never depend on its chunk, slab or tile.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gdn::cpu {

constexpr int64_t kSlabBytes = 512 << 10;

// Rows per slab for rows of row_bytes packed bytes: a multiple of tile_rows, at least one tile.
inline int64_t slab_rows(int64_t row_bytes, int64_t tile_rows) {
    return std::max<int64_t>(tile_rows, kSlabBytes / std::max<int64_t>(row_bytes, 1) / tile_rows * tile_rows);
}

// A prefill product's panels are claimed by the threads in ~10-15 pieces each (ThreadPool::
// parallel_for_balanced), and every piece streams all the rows it is given: at M = 4096 and K = 2048 those
// are 16 MB of packed activations a piece, which with the product's output and weights outgrow this
// machine's 32 MB L3 and come from DRAM 20-30 times a product. ops/linear.cpp therefore hands the panels
// over in row chunks of ~kChunkBytes of packed rows, each chunk its own pass of claims. Paired in one
// process against the whole M (docs/perf.md, 27th session): 2 MiB chunks 0.86-0.93 of the time of the
// long-K products (K = 2048, 3584) at M = 4096 and 16384, 0.95-1.04 of the others; 1 and 4 MiB gained
// less.
constexpr int64_t kChunkBytes = 2 << 20;

// Rows per chunk of a product of M rows of row_bytes packed bytes: all M while they fit two chunks'
// bytes (a prompt of a few hundred rows: the L3 holds them), else M in even pieces of about
// kChunkBytes, each a multiple of 96 rows (whole 12-row vector and 32-row AMX tiles) and at least 192, so
// the weights still meet many rows per pass at any K.
inline int64_t chunk_rows(int64_t M, int64_t row_bytes) {
    row_bytes = std::max<int64_t>(row_bytes, 1);
    if (M * row_bytes <= 2 * kChunkBytes) return std::max<int64_t>(M, 1);
    const int64_t pieces = (M * row_bytes + kChunkBytes - 1) / kChunkBytes;
    return std::max<int64_t>(192, ((M + pieces - 1) / pieces + 95) / 96 * 96);
}

}  // namespace gdn::cpu
