// Prefill attention with vdpbf16ps (bf16 mode on AVX-512 BF16 CPUs without AMX; the AMX engine is
// attention_amx.cpp). Flash-style: a block of up to 32 query rows (tokens x the query heads of one KV
// head) walks its keys in fixed steps of kStep keys from key 0 (two packed 64-key chunks of K), keeping
// per row a running maximum m, a running sum l and an f32 output block O [rows, D] in L1:
//
//   S [rows, c] = (Q rows as bf16 pairs) . K step      vdpbf16ps, K from kt (dim pairs, keys along a row)
//   m' = max(m, scale S on the row's causal keys); P = exp(scale S - m'), 0 past the row's limit
//   O = O exp(m - m') + (P as bf16 pairs) . V step      vdpbf16ps, V from vp (key pairs, dims along a row)
//   l = l exp(m - m') + sum P;  finally out = O / l (x sigmoid(gate))
// in base 2: m, m' and the scores are in units of log2(e) (scale log2(e) S), so P = 2^(. - m') costs a
// rounding, a degree-4 polynomial and a vscalefps (exp2_nonpositive; P is then rounded to bf16 anyway),
// and l stays a vector of 16 lane sums until the row's end.
//
// Register tiles of up to kTileRows rows x 4 vectors (64 keys of S, 64 dims of O), the operand row
// loaded once per k and each row's pair broadcast. A row is only touched by steps that hold at least
// one of its keys, and a step's work for a row depends on nothing but that row's q, keys and limit (keys
// past the limit, which a step holds or not by where the block ends, add exact zeros), so a row gives the
// same bits in any block and any prefill chunk (the prefix cache's exactness), and the per-block key
// range stops at the packed chunk of the block's last causal key (causal tile skipping). 128-key steps
// halve what the softmax and the O rescale cost per key against 64-key ones.
#define GDN_SIMD_AVX512
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "ops/cpu/attention_bf16.h"
#include "ops/cpu/avx512/attention_bf16_common.h"
#include "ops/cpu/simd.h"

namespace gdn::cpu::avx512 {

namespace {

constexpr int kChunk = kDotKeyChunk;  // keys per packed K chunk: one score tile's 4 vectors
constexpr int kStep = 2 * kChunk;  // keys per online-softmax step: <= 8 vectors of S, 64 key pairs of P . V
constexpr int kTileRows = 6;       // rows per register tile: 6 x 4 f32 accumulators + 4 operand vectors
constexpr int kMaxRows = 32;

inline __m512bh as_pairs(__m512i v) {
    return (__m512bh)v;
}

// 2^x for x <= 0 (scores minus their running maximum), to ~4.5e-5 relative (the first dropped Taylor
// term, (ln2 / 2)^5 / 5!), far inside the bf16 rounding of P (up to 2^-9) that follows: x = n + f with
// n = round(x), f in [-1/2, 1/2]; 2^f by its degree-4 Taylor polynomial, 2^n by vscalefps, which gives
// exact 0 (not a denormal trap or a clamp) for x far below 0.
inline __m512 exp2_nonpositive(__m512 x) {
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(9.6181291076e-3f);                  // ln2^4 / 4!
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108665e-2f));  // ln2^3 / 3!
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650696e-1f));  // ln2^2 / 2!
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718056e-1f));  // ln2
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

// s [R][kStep] = the rows' q pairs (qa, row stride D2) dotted with keys [0, 16 NV) of the chunk (kt: row
// i = dim pair i, stride nk: the chunk's width).
template <int R, int NV>
void score_tile(const uint32_t* qa, int64_t D2, const uint32_t* kt, int64_t nk, float* s) {
    __m512 acc[R][NV];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int64_t i = 0; i < D2; ++i) {
        __m512i k[NV];
        for (int v = 0; v < NV; ++v) k[v] = _mm512_loadu_si512(kt + i * nk + 16 * v);
        for (int r = 0; r < R; ++r) {
            const __m512bh a = as_pairs(_mm512_set1_epi32(static_cast<int>(qa[r * D2 + i])));
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, as_pairs(k[v]));
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(s + r * kStep + 16 * v, acc[r][v]);
}

// o [R][D] (columns [0, 16 NV) from o) = o x corr[r] + the rows' P pairs (pa, row stride kStep / 2)
// dotted with npairs key pairs of V (vp: row = key pair, stride D).
template <int R, int NV>
void value_tile(const uint32_t* pa, int npairs, const uint32_t* vp, int64_t D, const float* corr, float* o) {
    __m512 acc[R][NV];
    for (int r = 0; r < R; ++r) {
        const __m512 c = _mm512_set1_ps(corr[r]);
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_mul_ps(_mm512_loadu_ps(o + r * D + 16 * v), c);
    }
    for (int i = 0; i < npairs; ++i) {
        __m512i w[NV];
        for (int v = 0; v < NV; ++v) w[v] = _mm512_loadu_si512(vp + i * D + 16 * v);
        for (int r = 0; r < R; ++r) {
            const __m512bh a = as_pairs(_mm512_set1_epi32(static_cast<int>(pa[r * (kStep / 2) + i])));
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, as_pairs(w[v]));
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(o + r * D + 16 * v, acc[r][v]);
}

// Tile functions by rows (1..kTileRows) and vectors (2 or 4).
template <template <int, int> class F, int NV, int... R>
constexpr auto tiles_by_rows(std::integer_sequence<int, R...>) {
    return std::array{&F<R + 1, NV>::run...};
}
template <int R, int NV>
struct Score {
    static void run(const uint32_t* qa, int64_t D2, const uint32_t* kt, int64_t nk, float* s) {
        score_tile<R, NV>(qa, D2, kt, nk, s);
    }
};
template <int R, int NV>
struct Value {
    static void run(const uint32_t* pa, int npairs, const uint32_t* vp, int64_t D, const float* corr,
                    float* o) {
        value_tile<R, NV>(pa, npairs, vp, D, corr, o);
    }
};
constexpr auto kScore4 = tiles_by_rows<Score, 4>(std::make_integer_sequence<int, kTileRows>{});
constexpr auto kScore2 = tiles_by_rows<Score, 2>(std::make_integer_sequence<int, kTileRows>{});
constexpr auto kValue4 = tiles_by_rows<Value, 4>(std::make_integer_sequence<int, kTileRows>{});
constexpr auto kValue2 = tiles_by_rows<Value, 2>(std::make_integer_sequence<int, kTileRows>{});

// Calls f(r, R) for rows [r0, rows) as register tiles of at most kTileRows rows, as even as they go (32
// rows: 6 6 5 5 5 5, not 6 6 6 6 6 2: a 2-row tile has too few accumulators to cover vdpbf16ps' latency).
template <typename F>
void for_row_tiles(int r0, int rows, F&& f) {
    const int n = rows - r0, tiles = (n + kTileRows - 1) / kTileRows;
    for (int t = 0, r = r0; t < tiles; ++t) {
        const int R = n / tiles + (t < n % tiles ? 1 : 0);
        f(r, R);
        r += R;
    }
}

struct alignas(64) DotScratch {
    std::vector<uint32_t> qa;  // [rows][D / 2]
    std::vector<float> o;      // [rows][D]
    float s[kMaxRows * kStep];
    uint32_t pa[kMaxRows * kStep / 2];
    float m[kMaxRows], corr[kMaxRows];  // m in units of log2(e)
    __m512 l[kMaxRows];                 // per row, 16 lane sums of P
};

}  // namespace

void attention_dot_block(const float* q, const float* gate, int64_t ldq, int64_t group, int64_t D,
                         int64_t n_past, int64_t tb, int64_t ntok, const uint32_t* kt, const uint32_t* vp,
                         int64_t nk, float scale, float* out, int64_t ldo) {
    const int rows = static_cast<int>(ntok * group);
    const int64_t D2 = D / 2;
    const int64_t nkb = n_past + tb + ntok;  // keys the block's last token sees
    thread_local DotScratch b;
    if (b.qa.size() < static_cast<size_t>(kMaxRows * D2)) b.qa.resize(kMaxRows * D2);
    if (b.o.size() < static_cast<size_t>(kMaxRows * D)) b.o.resize(kMaxRows * D);
    auto q_row = [&](int r) { return q + (tb + r / group) * ldq + (r % group) * D; };
    auto limit = [&](int r) { return n_past + tb + r / group + 1; };  // row r's keys: [0, limit)
    for (int r = 0; r < rows; ++r) {
        for (int64_t d = 0; d < D; d += 32) pack_pairs32(q_row(r) + d, b.qa.data() + r * D2 + d / 2);
        std::fill(b.o.data() + r * D, b.o.data() + (r + 1) * D, 0.0f);
        b.m[r] = -INFINITY;
        b.l[r] = _mm512_setzero_ps();
    }
    const __m512 vscale = _mm512_set1_ps(scale * 1.44269504088896341f);  // scale log2(e)
    for (int64_t c0 = 0; c0 < nkb; c0 += kStep) {
        // Rows with a key in this step: limits grow with the row, so they are [r0, rows).
        int r0 = 0;
        while (limit(r0) <= c0) ++r0;
        // The step's packed chunks that hold keys of the block: [c0, c0 + 64), and [c0 + 64, c0 + 128) unless
        // the block ends before it (a chunk is 64 keys wide, or 32 at a 32-key tail of nk).
        int nv = 0;  // vectors of S in this step
        for (int64_t k0 = c0; k0 < std::min<int64_t>(c0 + kStep, nkb); k0 += kChunk) {
            const int64_t width = packed_key_chunk_width(k0, nk, kChunk);
            const uint32_t* kc = kt + packed_key_chunk_start(k0, D2, kChunk);
            for_row_tiles(r0, rows, [&](int r, int R) {
                (width == kChunk ? kScore4 : kScore2)[R - 1](b.qa.data() + r * D2, D2, kc, width,
                                                             b.s + r * kStep + 16 * nv);
            });
            nv += static_cast<int>(width / 16);
        }
        for (int r = r0; r < rows; ++r) {
            const float* sr = b.s + r * kStep;
            const int64_t valid = std::min<int64_t>(16 * nv, limit(r) - c0);
            __m512 sv[kStep / 16], vmax = _mm512_set1_ps(-INFINITY);
            for (int v = 0; v < nv; ++v) {
                sv[v] = _mm512_mul_ps(_mm512_loadu_ps(sr + 16 * v), vscale);
                vmax = _mm512_mask_max_ps(vmax, simd::lanes_mask(valid - 16 * v), vmax, sv[v]);
            }
            const float m_new = std::max(b.m[r], _mm512_reduce_max_ps(vmax));
            // exp(m - m') is exactly 1 when the maximum stays (and 0 on the row's first chunk).
            b.corr[r] = m_new == b.m[r] ? 1.0f : std::exp2(b.m[r] - m_new);
            b.m[r] = m_new;
            const __m512 mx = _mm512_set1_ps(m_new);
            __m512 vsum = _mm512_setzero_ps();
            __m512 p[kStep / 16];
            for (int v = 0; v < nv; ++v) {
                // Keys past the row's limit are exact zeros (their scores are not <= m').
                p[v] = _mm512_maskz_mov_ps(simd::lanes_mask(valid - 16 * v),
                                           exp2_nonpositive(_mm512_sub_ps(sv[v], mx)));
                vsum = _mm512_add_ps(vsum, p[v]);
            }
            b.l[r] = _mm512_fmadd_ps(b.l[r], _mm512_set1_ps(b.corr[r]), vsum);
            uint32_t* pr = b.pa + r * (kStep / 2);
            for (int v = 0; v < nv; v += 2)
                _mm512_storeu_si512(pr + 8 * v, (__m512i)_mm512_cvtne2ps_pbh(p[v + 1], p[v]));
        }
        const uint32_t* vc = vp + (c0 / 2) * D;
        // Dims outside, rows inside: a 64-dim strip of the step's V (16 KiB) stays in L1 for every row tile.
        for (int64_t d = 0; d < D; d += 64) {
            const auto& value = D - d >= 64 ? kValue4 : kValue2;
            for_row_tiles(r0, rows, [&](int r, int R) {
                value[R - 1](b.pa + r * (kStep / 2), 8 * nv, vc + d, D, b.corr + r, b.o.data() + r * D + d);
            });
        }
    }
    for (int r = 0; r < rows; ++r) {
        const int64_t at = (r % group) * D;  // row r: token tb + r / group, head r % group of the group
        const float* gate_row = gate ? gate + (tb + r / group) * ldq + at : nullptr;
        write_gated_row(b.o.data() + r * D, 1.0f / _mm512_reduce_add_ps(b.l[r]), gate_row, D,
                        out + (tb + r / group) * ldo + at);
    }
}

// What both engines use (attention_bf16.h) lives here, in the file built without the AMX flags.

bool attention_bf16_supported(int64_t D, int64_t group) {
    return D % 32 == 0 && D <= 512 && group >= 1 && group <= 32;
}

namespace {

// 16 K/V values of a cache row as bf16: f32 rows rounded (vcvtneps2bf16: to nearest even, as f32_to_bf16;
// it flushes f32 denormals, which vdpbf16ps and tdpbf16ps read as zero anyway), bf16 rows as stored.
template <typename E>
inline __m256i bf16x16(const E* p) {
    if constexpr (sizeof(E) == 2)
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    else
        return (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(p));
}

template <typename E>
void pack_keys(const KvRows& kv, int64_t hoff, int64_t D, int64_t n_keys, int64_t j0, int64_t j1,
               uint32_t* kt, uint32_t* vp, int64_t nk, int64_t key_chunk) {
    // kt: key j's dims as pairs in its chunk's [D/2][width] array; vp [nk/2][D]: row jp holds keys 2jp,
    // 2jp+1 per dim.
    const int64_t D2 = D / 2;
    alignas(64) uint32_t pairs[256];  // one key's dim pairs (D <= 512)
    for (int64_t j = j0; j < j1; ++j) {
        const int64_t width = packed_key_chunk_width(j, nk, key_chunk);
        uint32_t* col = kt + packed_key_chunk_start(j, D2, key_chunk) + j % key_chunk;
        if (j < n_keys) {
            const E* k = kv.k<E>(j) + hoff;
            for (int64_t d = 0; d < D; d += 16)
                _mm256_store_si256(reinterpret_cast<__m256i*>(pairs + d / 2), bf16x16(k + d));
            for (int64_t i = 0; i < D2; ++i) col[i * width] = pairs[i];
        } else {
            for (int64_t i = 0; i < D2; ++i) col[i * width] = 0;
        }
    }
    for (int64_t jp = j0 / 2; jp < j1 / 2; ++jp) {
        uint32_t* row = vp + jp * D;
        const int64_t ja = 2 * jp, jb = 2 * jp + 1;
        const E* va = ja < n_keys ? kv.v<E>(ja) + hoff : nullptr;
        const E* vb = jb < n_keys ? kv.v<E>(jb) + hoff : nullptr;
        for (int64_t d = 0; d < D; d += 16) {
            const __m512i a = va ? _mm512_cvtepu16_epi32(bf16x16(va + d)) : _mm512_setzero_si512();
            const __m512i b = vb ? _mm512_cvtepu16_epi32(bf16x16(vb + d)) : _mm512_setzero_si512();
            _mm512_storeu_si512(row + d, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
        }
    }
}

}  // namespace

void attention_bf16_pack(const KvRows& kv, int64_t hoff, int64_t D, int64_t n_keys, int64_t j0, int64_t j1,
                         uint32_t* kt, uint32_t* vp, int64_t nk, int64_t key_chunk) {
    if (kv.bf16)
        pack_keys<uint16_t>(kv, hoff, D, n_keys, j0, j1, kt, vp, nk, key_chunk);
    else
        pack_keys<float>(kv, hoff, D, n_keys, j0, j1, kt, vp, nk, key_chunk);
}

}  // namespace gdn::cpu::avx512
