// Prefill attention on AMX tiles (bf16 mode, where dispatch.h has_amx_bf16()): for a block of up to 32
// query rows (tokens x the query heads of one KV head), S = Q K^T and O = P V are two tile GEMMs over the
// block's keys, with an exact softmax per row in between (f32, on the vector units):
//
//   S [rows, nkb] = (Q rows as bf16) x K^T    tdpbf16ps, K^T from kt (pairs of dims, keys along a row)
//   P = exp(scale S - row max) on the row's causal keys, 0 past them; row sum in f32
//   O [rows, D]  = (P as bf16) x V             tdpbf16ps, V from vp (pairs of keys, dims along a row)
//   out = O / row sum (x sigmoid(gate))
//
// Q and P are rounded to bf16 (the products and every sum are f32); K and V are bf16 in the packed
// copies whatever the cache holds. A row's result depends on its own q, keys and causal limit only:
// the keys are taken in fixed 32-key steps from key 0, and keys past a row's limit add exact zeros, so a
// row gives the same bits in any prefill chunk and any block (prefix cache == recompute).
#define GDN_SIMD_AVX512
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/attention_bf16.h"
#include "ops/cpu/avx512/amx_tiles.h"
#include "ops/cpu/avx512/attention_bf16_common.h"
#include "ops/cpu/simd.h"

namespace gdn::cpu::avx512 {

namespace {

struct BlockScratch {
    std::vector<uint32_t> qa, pa;
    std::vector<float> s, o, inv_sum;
};

}  // namespace

void attention_amx_block(const float* q, const float* gate, int64_t ldq, int64_t group, int64_t D,
                         int64_t n_past, int64_t tb, int64_t ntok, const uint32_t* kt, const uint32_t* vp,
                         int64_t nk, float scale, float* out, int64_t ldo) {
    const int rows = static_cast<int>(ntok * group);
    const int64_t nkb = n_past + tb + ntok;      // keys the block's last token sees
    const int64_t nkb32 = (nkb + 31) / 32 * 32;  // <= nk
    const int64_t D2 = D / 2;
    thread_local BlockScratch b;
    if (b.qa.size() < static_cast<size_t>(32 * D2)) b.qa.resize(32 * D2);
    if (b.o.size() < static_cast<size_t>(32 * D)) b.o.resize(32 * D);
    if (b.s.size() < static_cast<size_t>(32 * nkb32)) b.s.resize(32 * nkb32);
    if (b.pa.size() < static_cast<size_t>(32 * nkb32 / 2)) b.pa.resize(32 * nkb32 / 2);
    if (b.inv_sum.size() < 32) b.inv_sum.resize(32);
    auto q_row = [&](int r) { return q + (tb + r / group) * ldq + (r % group) * D; };

    for (int r = 0; r < rows; ++r)
        for (int64_t d = 0; d < D; d += 32) pack_pairs32(q_row(r) + d, b.qa.data() + r * D2 + d / 2);

    // S: 32 keys per block of C tiles, D / 32 k-steps of 16 dim pairs.
    for (int64_t kc = 0; kc < nkb32; kc += 32)
        amx::gemm_block(b.qa.data(), D2, rows, kt + kc, nk, 16 * nk, D / 32, b.s.data() + kc, nkb32);

    // Softmax per row over its causal keys [0, nv); P as bf16 pairs, zero up to nkb32.
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int r = 0; r < rows; ++r) {
        float* sr = b.s.data() + r * nkb32;
        const int64_t nv = n_past + tb + r / group + 1;
        __m512 vmax = _mm512_set1_ps(-INFINITY);
        auto valid = [nv](int64_t j) { return simd::lanes_mask(nv - j); };
        for (int64_t j = 0; j < nkb32; j += 16) {
            const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(sr + j), vscale);
            _mm512_storeu_ps(sr + j, v);
            vmax = _mm512_mask_max_ps(vmax, valid(j), vmax, v);
        }
        const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
        __m512 vsum = _mm512_setzero_ps();
        uint32_t* pr = b.pa.data() + r * (nkb32 / 2);
        for (int64_t j = 0; j < nkb32; j += 32) {
            // Keys past the row's limit are exact zeros (vexp clamps: it never returns 0 by itself).
            const __m512 p0 =
                _mm512_maskz_mov_ps(valid(j), simd::vexp(_mm512_sub_ps(_mm512_loadu_ps(sr + j), mx)));
            const __m512 p1 = _mm512_maskz_mov_ps(
                valid(j + 16), simd::vexp(_mm512_sub_ps(_mm512_loadu_ps(sr + j + 16), mx)));
            vsum = _mm512_add_ps(vsum, _mm512_add_ps(p0, p1));
            _mm512_storeu_si512(pr + j / 2, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
        }
        b.inv_sum[r] = 1.0f / _mm512_reduce_add_ps(vsum);
    }

    // O: 32 dims per block of C tiles, nkb32 / 32 k-steps of 16 key pairs.
    for (int64_t dc = 0; dc < D; dc += 32)
        amx::gemm_block(b.pa.data(), nkb32 / 2, rows, vp + dc, D, 16 * D, nkb32 / 32, b.o.data() + dc, D);
    amx::release();

    for (int r = 0; r < rows; ++r) {
        const int64_t at = (r % group) * D;  // row r: token tb + r / group, head r % group of the group
        write_gated_row(b.o.data() + r * D, b.inv_sum[r], gate ? gate + (tb + r / group) * ldq + at : nullptr,
                        D, out + (tb + r / group) * ldo + at);
    }
}

}  // namespace gdn::cpu::avx512
