// Scalar reference ops: the model math of model_spec.md written plainly, one loop nest per formula.
// They stay forever as the oracle every fast path is tested against. All activations are f32,
// contiguous, row-major; weights may be f32/bf16/f16 views. Shapes are written next to each pointer.
//
// `bf16` flags mark ops with rounding points INSIDE the op (where HF's bf16 forward rounds); the caller
// rounds op outputs itself.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/exec_context.h"
#include "core/tensor.h"

namespace gdn {
struct PackedWeight;
namespace quant {
struct QuantRowsView;
}
}  // namespace gdn

namespace gdn::ref {

// out[i, :] = table[ids[i], :]          table [V, H], out [n, H]
void embedding(const TensorView& table, const int32_t* ids, int64_t n, float* out);

// y = x @ W^T                           x [M, K], W [N, K], y [M, N]; f32 accumulation
void linear(const ExecContext& ctx, const float* x, int64_t M, const TensorView& W, float* y);

// y [x.M, ldy] = the quantized product of ops/quant/quant_format.h, element by element: for each
// column, sum over groups of (weight scale * activation scale) * (exact int32 dot of the group); int8-x
// per half group. Columns [n0, n1) only (n1 < 0: to the last).
void linear_quant(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t n0 = 0,
                  int64_t n1 = -1);

// Zero-centred RMSNorm with (1 + w) precomputed in w: y = x * rsqrt(mean(x^2) + eps) * w, per row.
// x, y [rows, n] (may alias), w [n]
void rms_norm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y);

// Gated RMSNorm (linear_attn.norm): y = rmsnorm(x) * w * silu(z), norm before gate, plain w.
// x, z, y [rows, n], w [n]. With bf16, rounds where HF does (normalised x, then x*w, then the product).
void gated_rms_norm(const float* x, const float* z, int64_t rows, int64_t n, const float* w, float eps,
                    float* y, bool bf16);

// Per-row L2 normalisation: x *= rsqrt(sum(x^2) + eps), then x *= scale.   x [rows, n] in place
void l2_norm(float* x, int64_t rows, int64_t n, float eps, float scale);

// Partial NeoX (rotate-half) RoPE on the first rot_dim dims of every head, in place.
// x [T, n_heads, D], pos [T]; inv_freq[j] = theta^(-2j/rot_dim); pairs (i, i + rot_dim/2).
// With bf16, cos/sin and the result are rounded to bf16 (as HF does).
void rope_neox(float* x, int64_t T, int64_t n_heads, int64_t D, int64_t rot_dim, const int64_t* pos,
               float theta, bool bf16);

// Causal softmax attention with GQA (q head h uses kv head h / (Hq/Hkv)) and the sigmoid output
// gate: out = softmax(q k^T / sqrt(D) + causal) v * sigmoid(gate).
// q, gate, out [T, Hq, D]; k, v [n_past + T, Hkv, D] (the whole cache of this sequence, new rows last).
// Query t sits at position n_past + t and sees keys 0 .. n_past + t. gate may be null.
void attention(const float* q, const float* gate, const float* k, const float* v, int64_t T, int64_t n_past,
               int64_t Hq, int64_t Hkv, int64_t D, float* out);

// Causal depthwise conv1d with carried state, then optional SiLU.
// x, y [T, C]; w [C, K] (tap K-1 multiplies the current token);
// state [K-1, C] in/out: the last K-1 raw inputs before x, oldest row first (zeros for a new sequence).
void causal_conv1d(const float* x, int64_t T, int64_t C, const float* w, int64_t K, float* state, float* y,
                   bool silu);

// GDN gates: g = neg_exp_A * softplus(a + dt_bias) (softplus threshold 20), beta = sigmoid(b).
// a, b, g, beta [T, Hv]; neg_exp_A, dt_bias [Hv]
void gdn_gating(const float* a, const float* b, int64_t T, int64_t Hv, const float* neg_exp_A,
                const float* dt_bias, float* g, float* beta);

// Gated delta rule, token by token (model_spec.md §4.5.4). q, k are already L2-normalised and q scaled.
// q, k [T, Hk, Dk]; v [T, Hv, Dv]; g, beta [T, Hv]; value head h uses key head h / (Hv/Hk), or h % Hk
// with v_tiled (the value heads of a GGUF Qwen3.5 file: llama.cpp's converter tiles them).
// state [Hv, Dk, Dv] f32 in/out (S of the spec per value head, values contiguous); out [T, Hv, Dv].
void gated_delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g,
                                const float* beta, int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                                float* state, float* out, bool v_tiled = false);

// The same rule in chunked (WY / UT transform) form, chunk size 64 (model_spec.md §4.5.5).
void gated_delta_rule_chunked(const float* q, const float* k, const float* v, const float* g,
                              const float* beta, int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                              float* state, float* out, bool v_tiled = false);

// out = silu(gate) * up, elementwise over n values. With bf16, silu(gate) is rounded first.
void silu_mul(const float* gate, const float* up, int64_t n, float* out, bool bf16);

// MoE routing: softmax over all E logits in f32 -> top-k (ties: lower index first) -> optional
// renormalisation. logits [T, E]; idx, w [T, k]. `scratch`: the calling thread's buffers (grow-only).
struct MoeRouteScratch {
    std::vector<float> probs;  // [E]
    std::vector<int32_t> top;  // [k]
};
void moe_route(const float* logits, int64_t T, int64_t E, int64_t k, bool renormalize, int32_t* idx, float* w,
               MoeRouteScratch& scratch);

// Weights of one SwiGLU MLP: down(silu(gate(x)) * up(x)).
struct MlpWeights {
    TensorView gate;  // [I, H]
    TensorView up;    // [I, H]
    TensorView down;  // [H, I]
};

// Weights of a sparse MoE block with a sigmoid-gated shared expert.
struct MoeWeights {
    TensorView router;                // [E, H]
    std::vector<MlpWeights> experts;  // [E], each gate/up [Ie, H], down [H, Ie]
    MlpWeights shared;                // gate/up [Is, H], down [H, Is]; absent when Is == 0
    TensorView shared_gate;           // [1, H]
    bool has_shared = false;
};

// SwiGLU MLP. x, out [N, H]. bf16_in: matmul inputs rounded to bf16; hf: every activation rounded where
// HF's bf16 forward rounds.
void swiglu_mlp(const ExecContext& ctx, const MlpWeights& w, const float* x, int64_t N, float* out,
                bool bf16_in, bool hf);

// MoE: softmax(router) over all experts in f32 -> top-k -> renormalise (if asked) -> weighted sum of
// the chosen experts (tokens grouped per expert, one batched MLP per active expert) + sigmoid(x Wsg^T) *
// shared expert. x, out [N, H].
void moe(const ExecContext& ctx, const MoeWeights& w, const float* x, int64_t N, int64_t top_k,
         bool renormalize, float* out, bool bf16_in, bool hf);

// Rounds n values to bf16 in place when bf16 is set (the activation-precision helper of the ref path).
inline void round_activations(float* x, int64_t n, bool bf16) {
    if (bf16)
        for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

// Index of the largest value (the first one on ties).
int64_t argmax(const float* x, int64_t n);

inline float sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}
inline float silu(float x) {
    return x / (1.0f + std::exp(-x));
}
inline float softplus(float x) {
    return x > 20.0f ? x : std::log1p(std::exp(x));
}

}  // namespace gdn::ref
