// What the AVX2 kernels of every quantized format share (linear_quant_avx2.cpp, linear_kquant_avx2.cpp,
// linear_kquant_unpacked_avx2.cpp): a panel row of 32 columns is kNV vectors of 8 columns x one k-quad,
// tiles of kMR rows (or one), the activation quad broadcast to all lanes.
//
// Those files are compiled twice: into -mavx2 objects (namespace avx2), which multiply bytes with
// vpmaddubsw into int16 pair sums and widen them with vpmaddwd, and with GDN_AVX_VNNI into -mavxvnni
// objects (namespace avxvnni) for CPUs with AVX-VNNI (Alder Lake and later client cores, Sapphire
// Rapids, Zen 4/5), where one vpdpbusd adds the products of a quad straight into an int32 lane. The
// dot primitives below are the only difference; both give the same exact integer sums, so the two
// builds' outputs are bitwise equal.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/packed_weight.h"

#ifndef GDN_SIMD_AVX2
#define GDN_SIMD_AVX2  // simd::vsilu for the SwiGLU epilogue: ops::swiglu's AVX2 formula
#endif
#include "ops/cpu/simd.h"

#ifdef GDN_AVX_VNNI
#define GDN_AVX2_KERNELS avxvnni
#else
#define GDN_AVX2_KERNELS avx2
#endif

namespace gdn::cpu::GDN_AVX2_KERNELS {

constexpr int kNV = 4;  // vectors per 32-column panel
constexpr int kMR = 2;  // rows per tile: 2 x 4 int32 accumulators + 2 x 4 f32 sums

inline __m256i bcast_quad(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// 8 f16 values (8 columns' scales) as f32.
inline __m256 f16x8(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 8 int8 values (8 columns' int6-k scale levels) as f32.
inline __m256 i8x8_to_f32(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Group sums: per column, the sum over a group's quads of unsigned weight bytes u times signed
// activation bytes s. AVX2 keeps them as int16 pair sums (exact within the bounds each caller states)
// and widens once per group; AVX-VNNI adds into int32 lanes directly.
inline __m256i group_sums_add(__m256i acc, __m256i u, __m256i s) {
#ifdef GDN_AVX_VNNI
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s));
#endif
}
// The group sums as int32 per column.
inline __m256i group_sums_widen(__m256i acc) {
#ifdef GDN_AVX_VNNI
    return acc;
#else
    return _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
#endif
}
// The group sums times a per-column level as int32: `level` is level_operand's form of it.
inline __m256i group_sums_scaled(__m256i acc, __m256i level) {
#ifdef GDN_AVX_VNNI
    return _mm256_mullo_epi32(acc, level);
#else
    return _mm256_madd_epi16(acc, level);
#endif
}

// acc (int32 per column) += the dot of one quad of unsigned u and signed s. In AVX2 each pair sum must
// fit int16: the int8 kernel's 2 * 127 * 127 does.
inline __m256i quad_dot_add(__m256i acc, __m256i u, __m256i s) {
#ifdef GDN_AVX_VNNI
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}
// acc += the dots of two quads (u0 . s0 + u1 . s1); AVX2 adds their pair sums in int16 before widening
// (int6-k: 4 * 63 * 127 < 2^15).
inline __m256i two_quad_dots_add(__m256i acc, __m256i u0, __m256i s0, __m256i u1, __m256i s1) {
#ifdef GDN_AVX_VNNI
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, u0, s0), u1, s1);
#else
    const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}

// A gate|up weight packed for the fused SwiGLU (ops/linear.h) has 16 gate columns, then the 16 matching up
// columns, in each panel: the panel's 16 activations silu(gate) x up, from a row's 32 sums.
inline void store_swiglu_row(const __m256* sum, float* y) {
    _mm256_storeu_ps(y, _mm256_mul_ps(simd::vsilu(sum[0]), sum[2]));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(simd::vsilu(sum[1]), sum[3]));
}

// The products of rows m0.. (y + m0 ldy, ncols of the panel's 32) or, kSwiglu, the panel's 16
// activations (y: the activation block's first column; the panel is whole).
template <int MR, bool kSwiglu = false>
inline void store_tile(__m256 (&sum)[MR][kNV], float* y, int64_t ldy, int ncols) {
    if constexpr (kSwiglu) {
        for (int m = 0; m < MR; ++m) store_swiglu_row(sum[m], y + m * ldy);
        return;
    }
    for (int m = 0; m < MR; ++m) {
        if (ncols == 32) {
            for (int v = 0; v < kNV; ++v) _mm256_storeu_ps(y + m * ldy + v * 8, sum[m][v]);
        } else {
            alignas(32) float tmp[32];
            for (int v = 0; v < kNV; ++v) _mm256_store_ps(tmp + v * 8, sum[m][v]);
            std::memcpy(y + m * ldy, tmp, ncols * sizeof(float));
        }
    }
}

// acc[m][v] += the group sums (group_sums_add) of one group's nibble pairs (nib: 512 B, [4 quad
// pairs][32 cols][4], values 0..15) times the rows' activations: |.| <= 8 * 2 * 15 * 127 over the
// group, so AVX2's int16 pair sums hold it.
// ahead(s) runs before step s. A one-row tile (decode) streams the weights from memory: its steps stay
// a loop, because -O3 unrolled them completely, hoisted their loads and spilled them to the stack, and
// the stores behind the cache misses stalled the stream (docs/perf.md, behind the constants:
// ops/cpu/avx2/quant_tiles_avx2.h); ahead requests its lines (ops/cpu/stream_ahead.h). The 2-row tile
// works from cache (prefill) and is the same either way.
template <int MR, typename Ahead>
inline void nibble_group_dots(const quant::QuantRowsView& x, int64_t m0, int64_t g, const uint8_t* nib,
                              __m256i (&acc)[MR][kNV], const Ahead& ahead) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    auto step = [&](int s) __attribute__((always_inline)) {  // k = 8s..8s+7 of the group
        __m256i xlo[MR], xhi[MR];
        for (int m = 0; m < MR; ++m) {
            const int8_t* xr = x.row(m0 + m) + g * kQuantGroup + 8 * s;
            xlo[m] = bcast_quad(xr);
            xhi[m] = bcast_quad(xr + 4);
        }
        for (int v = 0; v < kNV; ++v) {
            const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(nib + s * 128 + v * 32));
            const __m256i lo = _mm256_and_si256(b, low4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), low4);
            for (int m = 0; m < MR; ++m)
                acc[m][v] = group_sums_add(group_sums_add(acc[m][v], lo, xlo[m]), hi, xhi[m]);
        }
    };
    if constexpr (MR == 1) {
#pragma GCC unroll 1
        for (int s = 0; s < 4; ++s) {
            ahead(s);
            step(s);
        }
    } else {
        for (int s = 0; s < 4; ++s) step(s);
    }
}

using QuantTileFn = void (*)(const quant::QuantRowsView&, int64_t m0, const PackedWeight&, int64_t p,
                             float* y, int64_t ldy, int ncols);

// Columns of panels [p0, p1) for all rows: kMR-row tiles, then single rows. kSwiglu: the tiles store
// each panel's 16 activations, at column p * 16 of y.
template <QuantTileFn Tile1, QuantTileFn TileMR, bool kSwiglu = false>
void run_panels(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
        const int ncols = static_cast<int>(std::min<int64_t>(quant::kCols, w.N - p * quant::kCols));
        float* yp = y + p * (kSwiglu ? quant::kCols / 2 : quant::kCols);
        int64_t m = 0;
        for (; m + kMR <= x.M; m += kMR) TileMR(x, m, w, p, yp, ldy, ncols);
        for (; m < x.M; ++m) Tile1(x, m, w, p, yp, ldy, ncols);
    }
}

constexpr int kGroupsPerBlock = kSuperBlock / kQuantGroup;

// The 6-bit levels of an int4-k group record (32 B + 16 B at kQ4KLevelsOffset): sc in the low 6 bits of
// byte c, m's top 2 bits above it, m's low 4 bits in nibble c / 16 of byte 32 + c % 16.
inline void q4k_levels(const uint8_t* lv, __m256i* sc, __m256i* mn) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lv));
    const __m128i bl = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lv + 32));
    const __m256i mlo = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(bl, 4), bl), low4);
    *sc = _mm256_and_si256(a, _mm256_set1_epi8(0x3F));
    *mn = _mm256_or_si256(mlo, _mm256_and_si256(_mm256_srli_epi16(a, 2), _mm256_set1_epi8(0x30)));
}

// vpshufb patterns that spread the 8 byte levels of vector v (columns 8v..8v+7, from a 128-bit half
// broadcast to both lanes: v = 0, 1 from bytes 0-15, v = 2, 3 from 16-31) over that vector's lanes.
// Pair lanes: column c's level in int16 lanes 2c and 2c+1, the layout of vpmaddubsw's pair sums, so one
// vpmaddwd applies the scale level as it widens. Word lanes: column c's level in int32 lane c.
inline __m256i level_pairs_pattern(int v) {
    const char o = static_cast<char>(8 * (v % 2)), z = static_cast<char>(0x80);
    return _mm256_setr_epi8(o, z, o, z, o + 1, z, o + 1, z, o + 2, z, o + 2, z, o + 3, z, o + 3, z,  //
                            o + 4, z, o + 4, z, o + 5, z, o + 5, z, o + 6, z, o + 6, z, o + 7, z, o + 7, z);
}
inline __m256i level_words_pattern(int v) {
    const char o = static_cast<char>(8 * (v % 2)), z = static_cast<char>(0x80);
    return _mm256_setr_epi8(o, z, z, z, o + 1, z, z, z, o + 2, z, z, z, o + 3, z, z, z,  //
                            o + 4, z, z, z, o + 5, z, z, z, o + 6, z, z, z, o + 7, z, z, z);
}
// Vector v's scale levels in the form group_sums_scaled takes: pair lanes for AVX2's vpmaddwd, word
// lanes for AVX-VNNI's vpmulld (its group sums are int32 already).
inline __m256i level_operand(__m256i levels_half, int v) {
#ifdef GDN_AVX_VNNI
    return _mm256_shuffle_epi8(levels_half, level_words_pattern(v));
#else
    return _mm256_shuffle_epi8(levels_half, level_pairs_pattern(v));
#endif
}

// int6-k, step s of a group record: the unsigned values u = q + 32 (0..63) of vector v's low quad (k
// 8s..8s+3, *lo) and high quad (8s+4..8s+7, *hi). hb: the 32 bytes of high pairs at kQ6KHighOffset +
// 64 s + 32 (v / 2). Each byte holds the high pairs of vector 2h (bits 0-1: its low nibble's, 2-3: its
// high nibble's) and of 2h + 1 (bits 4-5, 6-7); each pair is shifted to bits 4-5, above its nibble, and
// masked (16-bit shifts: the mask drops what crossed from the next byte).
inline void q6k_quads(const uint8_t* rec, int s, int v, __m256i hb, __m256i* lo, __m256i* hi) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
    const bool first = v % 2 == 0;
    const __m256i lo_high = first ? _mm256_slli_epi16(hb, 4) : hb;
    const __m256i hi_high = first ? _mm256_slli_epi16(hb, 2) : _mm256_srli_epi16(hb, 2);
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + s * 128 + v * 32));
    *lo = _mm256_or_si256(_mm256_and_si256(b, low4), _mm256_and_si256(lo_high, bits45));
    *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), low4), _mm256_and_si256(hi_high, bits45));
}

// Calls fn(v, lo, hi) for the 4 vectors of int6-k step s of a group record (q6k_quads' values).
template <typename Fn>
inline void for_each_q6k_vector(const uint8_t* rec, int s, const Fn& fn) {
    const uint8_t* hp = rec + quant::kQ6KHighOffset + s * 64;
    for (int h = 0; h < 2; ++h) {
        const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hp + h * 32));
        for (int v = 2 * h; v < 2 * h + 2; ++v) {
            __m256i lo, hi;
            q6k_quads(rec, s, v, hb, &lo, &hi);
            fn(v, lo, hi);
        }
    }
}

// Many rows (prefill) of the super-block formats: each panel's super-block is unpacked once into the
// unsigned bytes vpmaddubsw takes, then multiplied by every row (linear_kquant_unpacked_avx2.cpp).
// From kUnpackRows rows on; fewer run the packed tiles, which unpack per tile of kMR rows.
constexpr int64_t kUnpackRows = 4;
void unpacked_q4k(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                  int64_t p1);
void unpacked_q6k(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                  int64_t p1);
// The same with the SwiGLU epilogue (store_swiglu_row).
void unpacked_q4k_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                         int64_t p0, int64_t p1);
void unpacked_q6k_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                         int64_t p0, int64_t p1);

}  // namespace gdn::cpu::GDN_AVX2_KERNELS
