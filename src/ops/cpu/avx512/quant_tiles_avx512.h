// What the AVX-512 VNNI kernels of every quantized format share (linear_quant_avx512.cpp,
// linear_kquant_avx512.cpp): one 512-bit vector holds 16 columns x one k-quad (4 bytes per column), so a
// panel row of 32 columns is 2 vectors; the activation quad of a row is broadcast to all lanes; tiles of
// up to kMR rows. Every tile ends in store_tile, which writes the products or, for a gate|up weight
// packed for the fused SwiGLU (ops/linear.h: each panel is 16 gate columns then the 16 matching up
// columns), silu(gate) x up. Compiled only into -mavx512vnni objects; include after defining
// GDN_SIMD_AVX512.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/cpu/row_slabs.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/stream_ahead.h"
#include "ops/packed_weight.h"
#include "ops/quant/quant_format.h"

namespace gdn::cpu::avx512 {

constexpr int kMR = 6;  // rows per tile: 6 x 2 int32 accumulators + 6 x 2 f32 sums + weights = 29 of 32 zmm

inline __m512i bcast_quad(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// A one-row tile (decode) asks for the lines of its group record kStreamAheadBytes further on, spread
// over the record's `steps` steps: the int4-k and int6-k tiles, whose streams the hardware prefetchers
// alone left behind; the int8 and int4-sym tiles do without, which was faster for them (docs/perf.md,
// behind the constants: ops/cpu/avx512/quant_tiles_avx512.h).
// kFar: the distance of a one-row tile on a CPU whose DRAM is far (streams_far).
template <bool kFar = false>
inline void record_ahead(const uint8_t* rec, int step, int steps, int64_t record_bytes) {
    const uint8_t* p = rec + step * (record_bytes / steps);
    constexpr int64_t ahead = kFar ? kStreamAheadFarBytes : kStreamAheadBytes;
    prefetch_128_ahead(p, ahead);
    prefetch_128_ahead(p + 128, ahead);
}

// Whether one-row tiles (decode at c = 1) ask for their panel's lines kStreamAheadFarBytes ahead (every
// format; the `far` tiles of run_format): on CPUs with AMX (Xeon server cores), whose DRAM is about
// twice a desktop core's latency away (docs/perf.md, thirty-third session).
bool streams_far();

// A decode batch (2 to 2 kMR rows: one or two tiles a panel) streams each panel from memory, and its
// tiles' dot products take about the memory's time for the panel's bytes: they ask for the lines
// kStreamAheadBatchBytes ahead so that the two overlap (ops/cpu/stream_ahead.h; docs/perf.md, behind the
// constants). One row (M = 1) and prefill tiles (cache-resident panels) do without.
inline bool streams_batch(const quant::QuantRowsView& x) {
    return x.M >= 2 && x.M <= 2 * kMR;
}

// 16 f16 values (16 columns' scales) as f32.
inline __m512 f16x16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The first n of 16 lanes (n clamped to [0, 16]): a partial panel's columns.
inline __mmask16 first_lanes(int n) {
    return n >= 16 ? 0xffff : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
}

// The products of rows m0.. (y + m0 ldy, ncols of the panel's 32) or, kSwiglu, the panel's 16
// activations silu(sum[m][0]) x sum[m][1] (y: the activation block's first column).
template <int MR, bool kSwiglu>
inline void store_tile(__m512 (&sum)[MR][2], float* y, int64_t ldy, int ncols) {
    if constexpr (kSwiglu) {
        for (int m = 0; m < MR; ++m)
            _mm512_storeu_ps(y + m * ldy, _mm512_mul_ps(simd::vsilu(sum[m][0]), sum[m][1]));
        return;
    }
    const __mmask16 m0 = first_lanes(ncols), m1 = first_lanes(ncols - 16);
    for (int m = 0; m < MR; ++m) {
        _mm512_mask_storeu_ps(y + m * ldy, m0, sum[m][0]);
        _mm512_mask_storeu_ps(y + m * ldy + 16, m1, sum[m][1]);
    }
}

// d sc and dmin m of an int4-k group record's columns 16v..16v+15 (levels: 32 B + 16 B at
// kQ4KLevelsOffset; sc in the low 6 bits of byte c, m's top 2 bits above it, m's low 4 bits in nibble
// c / 16 of byte 32 + c % 16).
inline void q4k_group_scales(const uint8_t* lv, int v, __m512 d, __m512 dmin, __m512* ds, __m512* dm) {
    const __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lv + 16 * v)));
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lv + 32)));
    const __m512i m_low = v == 0 ? _mm512_and_si512(b, _mm512_set1_epi32(15)) : _mm512_srli_epi32(b, 4);
    const __m512i m =
        _mm512_or_si512(m_low, _mm512_and_si512(_mm512_srli_epi32(a, 2), _mm512_set1_epi32(0x30)));
    *ds = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(a, _mm512_set1_epi32(0x3F))));
    *dm = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(m));
}

// int6-k, step s of a group record, vector v (columns 16v..16v+15): the unsigned values u = q + 32 of
// the low quad (k 8s..8s+3, *lo) and high quad (8s+4..8s+7, *hi). The high bit pairs of vector v are
// the 32 B of half v at kQ6KHighOffset + 64 s: their low nibbles belong to the first 8 columns (the
// vector's lower 256 bits), their high nibbles to the next 8, so the upper copy is shifted down by 4
// (a 64-bit shift: only bits 0-3 of each byte are used after it). Then a pair is shifted to bits 4-5,
// above its nibble, and masked (16-bit shifts: the mask drops what crossed from the next byte).
inline void q6k_quads(const uint8_t* rec, int s, int v, __m512i* lo, __m512i* hi) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    const uint8_t* pairs = rec + quant::kQ6KHighOffset + s * 64 + v * 32;
    const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pairs));
    const __m512i hb =
        _mm512_srlv_epi64(_mm512_broadcast_i64x4(half), _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0));
    const __m512i b = _mm512_loadu_si512(rec + s * 128 + v * 64);
    *lo = _mm512_or_si512(_mm512_and_si512(b, low4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), bits45));
    *hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b, 4), low4),
                          _mm512_and_si512(_mm512_slli_epi16(hb, 2), bits45));
}

// d sc of an int6-k group record's columns 16v..16v+15 (f16: its super-block's d).
inline __m512 q6k_group_scale(const uint8_t* rec, const uint8_t* f16, int v) {
    const uint8_t* sc = rec + quant::kQ6KScalesOffset;
    const __m512i level =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16 * v)));
    return _mm512_mul_ps(f16x16(f16 + 32 * v), _mm512_cvtepi32_ps(level));
}

using TileFn = void (*)(const quant::QuantRowsView&, int64_t, const PackedWeight&, int64_t, float*, int64_t,
                        int);

// tiles[mr - 1] = tile<mr>: the last row block of a batch is one tile too. kSwiglu: y is the
// activation [M, ldy], panel p's 16 columns at p * 16.
template <bool kSwiglu>
inline void run_panels(const TileFn (&tiles)[kMR], const quant::QuantRowsView& x, const PackedWeight& w,
                       float* y, int64_t ldy, int64_t p0, int64_t p1) {
    // Rows in L2-sized slabs of int8 activations (ops/cpu/row_slabs.h).
    const int64_t slab = slab_rows(x.Kp, kMR);
    for (int64_t s0 = 0; s0 < x.M; s0 += slab) {
        const int64_t s1 = std::min(x.M, s0 + slab);
        for (int64_t p = p0; p < p1; ++p) {
            const int ncols = static_cast<int>(std::min<int64_t>(quant::kCols, w.N - p * quant::kCols));
            float* yp = y + p * (kSwiglu ? quant::kCols / 2 : quant::kCols);
            for (int64_t m = s0; m < s1; m += kMR) {
                const int mr = static_cast<int>(std::min<int64_t>(kMR, s1 - m));
                tiles[mr - 1](x, m, w, p, yp, ldy, ncols);
            }
        }
    }
}

// Every tile size of one format over the panels: Tile<MR, kSwiglu>::run is the format's tile of MR rows,
// ::streamed its form for a decode batch (streams_batch), Tile<1, kSwiglu>::far a one-row tile's on a
// CPU that streams_far() (separate instantiations, so that the prefetch is decided at compile time: a
// run-time test in the tile's loop kept GCC from unrolling it).
template <template <int, bool> class Tile, bool kSwiglu>
inline void run_format(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                       int64_t p0, int64_t p1) {
    if (x.M == 1 && streams_far()) {
        static constexpr TileFn far[kMR] = {Tile<1, kSwiglu>::far};  // one row: only the first is used
        return run_panels<kSwiglu>(far, x, w, y, ldy, p0, p1);
    }
    static constexpr TileFn tiles[kMR] = {Tile<1, kSwiglu>::run, Tile<2, kSwiglu>::run,
                                          Tile<3, kSwiglu>::run, Tile<4, kSwiglu>::run,
                                          Tile<5, kSwiglu>::run, Tile<6, kSwiglu>::run};
    static constexpr TileFn streamed[kMR] = {Tile<1, kSwiglu>::streamed, Tile<2, kSwiglu>::streamed,
                                             Tile<3, kSwiglu>::streamed, Tile<4, kSwiglu>::streamed,
                                             Tile<5, kSwiglu>::streamed, Tile<6, kSwiglu>::streamed};
    static_assert(kMR == 6, "one table entry per tile size");
    run_panels<kSwiglu>(streams_batch(x) ? streamed : tiles, x, w, y, ldy, p0, p1);
}

}  // namespace gdn::cpu::avx512
