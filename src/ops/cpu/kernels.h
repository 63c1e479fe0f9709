// Per-ISA elementwise, normalisation, GDN and attention kernels (generic source kernels.inc, compiled
// for AVX-512 and AVX2). Single-row / single-head building blocks: threading lives in the op layer.
#pragma once

#include <cstdint>

#include "ops/kv_rows.h"

namespace gdn::cpu {

// Tokens per chunk of the chunked delta-rule kernel (the WY form's C; model_spec.md §4.5.5).
constexpr int64_t kGdnChunk = 64;

// The attention kernels read keys and values through ops/kv_rows.h's KvRows (the op API's type).
using KvRows = gdn::KvRows;

#define GDN_DECLARE_KERNELS                                                                                  \
    /* y = x * rsqrt(mean(x^2) + eps) * w over one row of n; y may alias x */                                \
    void rms_norm_row(const float* x, int64_t n, const float* w, float eps, float* y, bool bf16);            \
    /* x += d (residual, rounded in bf16 mode), then y = rms_norm(x) */                                      \
    void add_rms_norm_row(float* x, const float* d, int64_t n, const float* w, float eps, float* y,          \
                          bool bf16);                                                                        \
    /* per-head RMSNorm (1+w folded) then rotate-half RoPE on the first rot dims; cs = [cos(rot/2) |         \
     * sin(rot/2)] */                                                                                        \
    void norm_rope_head(float* x, int64_t D, const float* w, float eps, int64_t rot, const float* cs,        \
                        bool bf16);                                                                          \
    /* out = silu(g) * u over n */                                                                           \
    void silu_mul(const float* g, const float* u, int64_t n, float* out, bool bf16);                         \
    /* causal depthwise conv + SiLU for channels [c0, c1): x rows of ldx, wT [K, C], state [K-1, C]          \
     * (updated) */                                                                                          \
    void conv1d_silu(const float* x, int64_t ldx, int64_t T, int64_t C, const float* wT, int64_t K,          \
                     float* state, float* y, int64_t ldy, int64_t c0, int64_t c1, bool bf16);                \
    /* the same for tokens [t0, t1) only, y + (t - t0) ldy + (c - c0) getting (t, c); the state is only read \
     */                                                                                                      \
    void conv1d_silu_rows(const float* x, int64_t ldx, int64_t t0, int64_t t1, int64_t C, const float* wT,   \
                          int64_t K, const float* state, float* y, int64_t ldy, int64_t c0, int64_t c1,      \
                          bool bf16);                                                                        \
    /* the state after T tokens: the window's last K-1 rows, channels [c0, c1) */                            \
    void conv1d_state_update(const float* x, int64_t ldx, int64_t T, int64_t C, int64_t K, float* state,     \
                             int64_t c0, int64_t c1);                                                        \
    /* x *= scale / sqrt(sum(x^2) + eps) */                                                                  \
    void l2_norm_scale(float* x, int64_t n, float eps, float scale);                                         \
    float dot(const float* a, const float* b, int64_t n);                                                    \
    /* one decode step of one head: state S [Dk, Dv] in, the next state to So (So == S: in place); o [Dv] */ \
    void gdn_step(const float* S, float* So, const float* q, const float* k, const float* v, float decay,    \
                  float beta, float kq, int64_t Dk, int64_t Dv, float* o);                                   \
    /* T tokens of one head on value columns [j0, j1): the slab of S stays in L1 for all tokens.             \
       q, k rows of ldqk; v rows of ldv; o rows of ldo; decay/beta per token with stride ldg, kq stride ldkq \
     */                                                                                                      \
    void gdn_slab(float* S, const float* q, const float* k, int64_t ldqk, const float* v, int64_t ldv,       \
                  float* o, int64_t ldo, const float* decay, const float* beta, int64_t ldg,                 \
                  const float* kq, int64_t ldkq, int64_t T, int64_t Dk, int64_t Dv, int64_t j0, int64_t j1); \
    /* One full chunk (kGdnChunk tokens) of one head in the chunked (WY) form: S [Dk, Dv] in/out; q, k rows  \
       of Dk, v and o rows of Dv; g = log decay and beta per token. Dk, Dv multiples of 16. scratch:         \
       gdn_chunk_scratch_floats(Dk, Dv) floats */                                                            \
    void gdn_chunk(float* S, const float* q, const float* k, const float* v, const float* g,                 \
                   const float* beta, int64_t Dk, int64_t Dv, float* o, float* scratch);                     \
    int64_t gdn_chunk_scratch_floats(int64_t Dk, int64_t Dv);                                                \
    /* gated RMSNorm of one head: y = rmsnorm(x) * w * silu(z) */                                            \
    void gated_norm_row(const float* x, const float* z, int64_t n, const float* w, float eps, float* y,      \
                        bool bf16);                                                                          \
    /* causal attention of one query row for the heads [h0, h1) of one KV head group, over n_keys keys:      \
       key j's K row is kv.k(j) + hoff (D elements). Tiled online softmax; out = softmax(q k^T * scale) v *  \
       sigmoid(gate) */                                                                                      \
    void attention_group(const float* q, const float* gate, int64_t nh, int64_t D, const KvRows& kv,         \
                         int64_t hoff, int64_t n_keys, float scale, float* out, float* scratch);             \
    /* Whether attention_decode_range has an instance for head size D (D a supported number of vectors). */  \
    bool attention_decode_supported(int64_t D);                                                              \
    /* Decode: the query row q [Hkv * group heads, D] over keys [j0, j1) of all KV heads, whole rows per     \
       tile. Leaves the running softmax state (out unnormalised [Hq, D], mx, sum [Hq]) for attention_merge.  \
       False (nothing done) when D is not a multiple of the vector width. */                                 \
    bool attention_decode_range(const float* q, int64_t Hkv, int64_t group, int64_t D, const KvRows& kv,     \
                                int64_t j0, int64_t j1, float scale, float* out, float* mx, float* sum);     \
    /* One head: combine n_parts key-range states (parts [i * stride * D], mx/sum [i * stride]) and apply    \
       the gate: out [D] = softmax-weighted sum * sigmoid(gate). */                                          \
    void attention_merge(const float* parts, const float* mx, const float* sum, int64_t n_parts,             \
                         int64_t stride, int64_t D, const float* gate, float* out);                          \
    int64_t argmax(const float* x, int64_t n);

namespace avx512 {
GDN_DECLARE_KERNELS
}
namespace avx2 {
GDN_DECLARE_KERNELS
}

// The kernels above of one ISA build as a table: the op layer takes the table of the ISA an op runs on
// (ops/dispatch.h op_isa) once per call and calls through it, so no op branches between builds.
struct KernelTable {
    const char* isa;  // "avx512" | "avx2"
    decltype(&avx512::rms_norm_row) rms_norm_row;
    decltype(&avx512::add_rms_norm_row) add_rms_norm_row;
    decltype(&avx512::norm_rope_head) norm_rope_head;
    decltype(&avx512::silu_mul) silu_mul;
    decltype(&avx512::conv1d_silu) conv1d_silu;
    decltype(&avx512::conv1d_silu_rows) conv1d_silu_rows;
    decltype(&avx512::conv1d_state_update) conv1d_state_update;
    decltype(&avx512::l2_norm_scale) l2_norm_scale;
    decltype(&avx512::dot) dot;
    decltype(&avx512::gdn_step) gdn_step;
    decltype(&avx512::gdn_slab) gdn_slab;
    decltype(&avx512::gdn_chunk) gdn_chunk;
    decltype(&avx512::gdn_chunk_scratch_floats) gdn_chunk_scratch_floats;
    decltype(&avx512::gated_norm_row) gated_norm_row;
    decltype(&avx512::attention_group) attention_group;
    decltype(&avx512::attention_decode_supported) attention_decode_supported;
    decltype(&avx512::attention_decode_range) attention_decode_range;
    decltype(&avx512::attention_merge) attention_merge;
    decltype(&avx512::argmax) argmax;
};
const KernelTable& avx512_kernels();
const KernelTable& avx2_kernels();

}  // namespace gdn::cpu
