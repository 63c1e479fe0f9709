// Prefill tiles of the super-block formats int4-k and int6-k on AVX2 and AVX-VNNI (layouts in
// ops/quant/quant_format.h; the two builds: quant_tiles_avx2.h). The packed tiles
// (linear_kquant_avx2.cpp) unpack a group's nibbles and high bits for every tile of kMR rows: with two
// rows that is 3 (int4-k) to 4.5 (int6-k) of every 7 to 9.5 vector ops per row. Here a panel's
// super-block is unpacked once into the unsigned bytes the dots take (int4-k: q in [0, 15]; int6-k: u =
// q + 32 in [0, 63]), 8 KB that stay in L1, and every row of a block of rows multiplies them: 2 ops
// per row and weight vector (int4-k), 2.5 (int6-k) on AVX2; one vpdpbusd on AVX-VNNI.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/cpu/avx2/quant_tiles_avx2.h"
#include "ops/cpu/linear_quant_kernels.h"

namespace gdn::cpu::GDN_AVX2_KERNELS {

namespace {

constexpr int64_t kQuadBytes = kNV * 32;         // one k-quad of a 32-column panel
constexpr int64_t kGroupBytes = 8 * kQuadBytes;  // a group's 32 k as 8 quads
constexpr int64_t kRowBlock = 64;                // rows whose f32 sums stay on the stack (8 KB)

// A super-block of one panel, unpacked: [groups][8 quads][32 columns][4] bytes, quad t holding k
// 4t..4t+3 of the group (the packed step s holds quads 2s in its low nibbles and 2s + 1 in its high).
struct UnpackedBlock {
    alignas(32) uint8_t q[kGroupsPerBlock * kGroupBytes];
    alignas(32) uint8_t scale_levels[kGroupsPerBlock][kNV][32];  // int4-k: sc as level_operand gives it
    alignas(32) float min_terms[kGroupsPerBlock][32];            // int4-k: dmin * m
    alignas(32) float scales[kGroupsPerBlock][32];               // int6-k: d * sc
    alignas(32) float d[32];                                     // int4-k: d
};

void store32(uint8_t* p, __m256i v) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(p), v);
}

void unpack_q4k(const uint8_t* blk, int64_t groups, UnpackedBlock* u) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const uint8_t* f16 = blk + quant::f16_offset(WeightFormat::Q4K);
    __m256 d[kNV], dmin[kNV];
    for (int v = 0; v < kNV; ++v) {
        d[v] = f16x8(f16 + v * 16);
        dmin[v] = f16x8(f16 + 64 + v * 16);
        _mm256_store_ps(u->d + v * 8, d[v]);
    }
    for (int64_t j = 0; j < groups; ++j) {
        const uint8_t* rec = blk + j * quant::kQ4KRecordBytes;
        uint8_t* out = u->q + j * kGroupBytes;
        for (int s = 0; s < 4; ++s)
            for (int v = 0; v < kNV; ++v) {
                const __m256i b =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + s * 128 + v * 32));
                store32(out + 2 * s * kQuadBytes + v * 32, _mm256_and_si256(b, low4));
                store32(out + (2 * s + 1) * kQuadBytes + v * 32,
                        _mm256_and_si256(_mm256_srli_epi16(b, 4), low4));
            }
        __m256i sc, mn;
        q4k_levels(rec + quant::kQ4KLevelsOffset, &sc, &mn);
        const __m256i sc_half[2] = {_mm256_permute2x128_si256(sc, sc, 0x00),
                                    _mm256_permute2x128_si256(sc, sc, 0x11)};
        const __m256i mn_half[2] = {_mm256_permute2x128_si256(mn, mn, 0x00),
                                    _mm256_permute2x128_si256(mn, mn, 0x11)};
        for (int v = 0; v < kNV; ++v) {
            _mm256_store_si256(reinterpret_cast<__m256i*>(u->scale_levels[j][v]),
                               level_operand(sc_half[v / 2], v));
            const __m256 m = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(mn_half[v / 2], level_words_pattern(v)));
            _mm256_store_ps(u->min_terms[j] + v * 8, _mm256_mul_ps(dmin[v], m));
        }
    }
}

void unpack_q6k(const uint8_t* blk, int64_t groups, UnpackedBlock* u) {
    const uint8_t* f16 = blk + quant::f16_offset(WeightFormat::Q6K);
    for (int64_t j = 0; j < groups; ++j) {
        const uint8_t* rec = blk + j * quant::kQ6KRecordBytes;
        uint8_t* out = u->q + j * kGroupBytes;
        for (int s = 0; s < 4; ++s) {
            for_each_q6k_vector(rec, s, [&](int v, __m256i lo, __m256i hi) {
                store32(out + 2 * s * kQuadBytes + v * 32, lo);
                store32(out + (2 * s + 1) * kQuadBytes + v * 32, hi);
            });
        }
        const uint8_t* sc = rec + quant::kQ6KScalesOffset;
        for (int v = 0; v < kNV; ++v) {
            _mm256_store_ps(u->scales[j] + v * 8,
                            _mm256_mul_ps(f16x8(f16 + v * 16), i8x8_to_f32(sc + v * 8)));
        }
    }
}

// Rows m0..m0+MR-1, one group: sums [MR][32] (row stride 32) += the group's products.
// int4-k: group sums of all 8 quads (8 * 2 * 15 * 127 < 2^15), times the scale level as they widen, then
// y += d xs (sc D) - (dmin m) xs S (the packed tiles' order too: a row's bits do not depend on its batch).
template <int MR>
inline void group_q4k(const quant::QuantRowsView& x, int64_t m0, int64_t g, int j, const UnpackedBlock& u,
                      float* sums) {
    const uint8_t* q = u.q + j * kGroupBytes;
    __m256i acc[MR][kNV];
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < kNV; ++v) acc[m][v] = _mm256_setzero_si256();
    for (int t = 0; t < 8; ++t) {
        __m256i xb[MR];
        for (int m = 0; m < MR; ++m) xb[m] = bcast_quad(x.row(m0 + m) + g * kQuantGroup + 4 * t);
        for (int v = 0; v < kNV; ++v) {
            const __m256i w =
                _mm256_load_si256(reinterpret_cast<const __m256i*>(q + t * kQuadBytes + v * 32));
            for (int m = 0; m < MR; ++m) acc[m][v] = group_sums_add(acc[m][v], w, xb[m]);
        }
    }
    for (int m = 0; m < MR; ++m) {
        const int64_t i = (m0 + m) * x.G + g;
        const __m256 xs = _mm256_set1_ps(x.xs[i]),
                     xs_sum = _mm256_set1_ps(x.xs[i] * static_cast<float>(x.xsum[i]));
        for (int v = 0; v < kNV; ++v) {
            const __m256i sl = _mm256_load_si256(reinterpret_cast<const __m256i*>(u.scale_levels[j][v]));
            const __m256 dot = _mm256_cvtepi32_ps(group_sums_scaled(acc[m][v], sl));
            float* s = sums + m * 32 + v * 8;
            __m256 r =
                _mm256_fmadd_ps(dot, _mm256_mul_ps(_mm256_load_ps(u.d + v * 8), xs), _mm256_load_ps(s));
            r = _mm256_fnmadd_ps(_mm256_load_ps(u.min_terms[j] + v * 8), xs_sum, r);
            _mm256_store_ps(s, r);
        }
    }
}

// int6-k: two quads at a time (AVX2: their pair sums in int16, 2 * 2 * 63 * 127 < 2^15); then
// y += (d sc) xs (sum u x - 32 S).
template <int MR>
inline void group_q6k(const quant::QuantRowsView& x, int64_t m0, int64_t g, int j, const UnpackedBlock& u,
                      float* sums) {
    const uint8_t* q = u.q + j * kGroupBytes;
    __m256i acc[MR][kNV];
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < kNV; ++v) acc[m][v] = _mm256_setzero_si256();
    for (int t = 0; t < 8; t += 2) {
        __m256i x0[MR], x1[MR];
        for (int m = 0; m < MR; ++m) {
            x0[m] = bcast_quad(x.row(m0 + m) + g * kQuantGroup + 4 * t);
            x1[m] = bcast_quad(x.row(m0 + m) + g * kQuantGroup + 4 * t + 4);
        }
        for (int v = 0; v < kNV; ++v) {
            const __m256i w0 =
                _mm256_load_si256(reinterpret_cast<const __m256i*>(q + t * kQuadBytes + v * 32));
            const __m256i w1 =
                _mm256_load_si256(reinterpret_cast<const __m256i*>(q + (t + 1) * kQuadBytes + v * 32));
            for (int m = 0; m < MR; ++m) acc[m][v] = two_quad_dots_add(acc[m][v], w0, x0[m], w1, x1[m]);
        }
    }
    for (int m = 0; m < MR; ++m) {
        const int64_t i = (m0 + m) * x.G + g;
        const __m256 xs = _mm256_set1_ps(x.xs[i]);
        const __m256i offset = _mm256_set1_epi32(32 * x.xsum[i]);
        for (int v = 0; v < kNV; ++v) {
            const __m256 dot = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[m][v], offset));
            float* s = sums + m * 32 + v * 8;
            _mm256_store_ps(s, _mm256_fmadd_ps(dot, _mm256_mul_ps(_mm256_load_ps(u.scales[j] + v * 8), xs),
                                               _mm256_load_ps(s)));
        }
    }
}

using UnpackFn = void (*)(const uint8_t* blk, int64_t groups, UnpackedBlock* u);

template <UnpackFn Unpack, template <int> class Group, bool kSwiglu = false>
void unpacked_panels(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                     int64_t p1) {
    UnpackedBlock u;
    alignas(32) float sums[kRowBlock * 32];
    for (int64_t p = p0; p < p1; ++p) {
        const int ncols = static_cast<int>(std::min<int64_t>(quant::kCols, w.N - p * quant::kCols));
        for (int64_t r0 = 0; r0 < x.M; r0 += kRowBlock) {
            const int64_t r1 = std::min(x.M, r0 + kRowBlock);
            std::fill(sums, sums + (r1 - r0) * 32, 0.0f);
            for (int64_t b = 0; b < w.n_blocks; ++b) {
                const int64_t groups = std::min<int64_t>(kGroupsPerBlock, x.G - b * kGroupsPerBlock);
                Unpack(w.quant_block(p, b), groups, &u);
                for (int j = 0; j < groups; ++j) {
                    const int64_t g = b * kGroupsPerBlock + j;
                    int64_t m = r0;
                    for (; m + kMR <= r1; m += kMR) Group<kMR>::run(x, m, g, j, u, sums + (m - r0) * 32);
                    for (; m < r1; ++m) Group<1>::run(x, m, g, j, u, sums + (m - r0) * 32);
                }
            }
            for (int64_t m = r0; m < r1; ++m) {
                const float* row = sums + (m - r0) * 32;
                if constexpr (kSwiglu) {
                    const __m256 v[kNV] = {_mm256_load_ps(row), _mm256_load_ps(row + 8),
                                           _mm256_load_ps(row + 16), _mm256_load_ps(row + 24)};
                    store_swiglu_row(v, y + m * ldy + p * (quant::kCols / 2));
                } else {
                    std::memcpy(y + m * ldy + p * quant::kCols, row, ncols * sizeof(float));
                }
            }
        }
    }
}

template <int MR>
struct GroupQ4K {
    static void run(const quant::QuantRowsView& x, int64_t m0, int64_t g, int j, const UnpackedBlock& u,
                    float* s) {
        group_q4k<MR>(x, m0, g, j, u, s);
    }
};
template <int MR>
struct GroupQ6K {
    static void run(const quant::QuantRowsView& x, int64_t m0, int64_t g, int j, const UnpackedBlock& u,
                    float* s) {
        group_q6k<MR>(x, m0, g, j, u, s);
    }
};

}  // namespace

void unpacked_q4k(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                  int64_t p1) {
    unpacked_panels<unpack_q4k, GroupQ4K>(x, w, y, ldy, p0, p1);
}

void unpacked_q6k(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                  int64_t p1) {
    unpacked_panels<unpack_q6k, GroupQ6K>(x, w, y, ldy, p0, p1);
}

void unpacked_q4k_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                         int64_t p0, int64_t p1) {
    unpacked_panels<unpack_q4k, GroupQ4K, true>(x, w, y, ldy, p0, p1);
}

void unpacked_q6k_swiglu(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                         int64_t p0, int64_t p1) {
    unpacked_panels<unpack_q6k, GroupQ6K, true>(x, w, y, ldy, p0, p1);
}

}  // namespace gdn::cpu::GDN_AVX2_KERNELS
