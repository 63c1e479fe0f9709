// The op API the model forward calls: each op dispatches, once per call, to the kernel selected for it
// (AVX-512, AVX2 or the scalar reference, see dispatch.h) and splits its work over the thread pool.
// Activations are f32 buffers; with bf16 = true values are rounded to bf16 where HF's bf16 forward rounds.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/buffer.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "ops/kv_rows.h"

namespace gdn {
struct PackedWeight;
}

namespace gdn::ops {

struct GdnSeq;
struct AttnSeq;

// Grow-only scratch buffers reused across calls (no heap allocation once warm).
class Scratch {
  public:
    // Slot's buffer of at least n floats (contents not kept when it grows: it first waits out ctx's pool's
    // late workers, which may still read the old one).
    float* f32(const ExecContext& ctx, int slot, size_t n);
    std::vector<uint8_t> gdn_chunked;  // per sequence of a GDN call: full chunks in the chunked form
    bool gdn_staged_decode = false;    // tests: decode steps through the staged path, not the fused one
    std::vector<int64_t> attn_units;   // decode attention: first key-range unit of each sequence
    std::vector<GdnSeq> gdn_step_seqs, gdn_staged_seqs;  // a GDN call's sequences by path
    std::vector<int64_t> gdn_commit_units;               // gdn_commit: the first unit of each layer
    std::vector<AttnSeq> attn_decode_seqs, attn_prefill_seqs, attn_bf16_seqs;  // an attention call's by path

  private:
    std::vector<Buffer>
        f_;  // huge-page backed when large (page faults on first touch cost ~10 us per 4 KiB here)
};

// out [n, H] = rows ids of table [V, H]. With `packed` (the same matrix packed: a tied lm_head), the rows
// are gathered from it: the checkpoint's table is an mmap on 4 KiB pages, where the one row a decode step
// reads costs a page walk (the packed copy is on huge pages; see core/arena.h).
void embedding(const ExecContext& ctx, const TensorView& table, const PackedWeight* packed,
               const int32_t* ids, int64_t n, float* out, bool bf16);

// y[r] = rmsnorm(x[r]) * w, rows of n (w holds 1 + weight)
void rms_norm(const ExecContext& ctx, const float* x, int64_t rows, int64_t n, const float* w, float eps,
              float* y, bool bf16);
// x[r] += d[r] (the residual add), then y[r] = rmsnorm(x[r]) * w
void add_rms_norm(const ExecContext& ctx, float* x, const float* d, int64_t rows, int64_t n, const float* w,
                  float eps, float* y, bool bf16);
// Heads of one kind in a token row: n heads of D floats at row + first + i * stride, RMS-normed with w.
struct RopeHeads {
    int64_t first, n, stride;
    const float* w;
};
// Per-head RMSNorm then partial rotate-half RoPE, in place, of every head set in each of the N token rows
// (ld floats apart; token t at position pos[t]). The rotary angles are computed once per token for all
// sets (their pow / cos / sin outweigh the norms).
void qk_norm_rope(const ExecContext& ctx, float* x, int64_t ld, int64_t N,
                  std::initializer_list<RopeHeads> heads, int64_t D, float eps, int64_t rot, float theta,
                  const int64_t* pos, bool bf16);
// out [M, I] = silu(gu[:, :I]) * gu[:, I:]   (gu [M, 2I]: the fused gate|up projection)
void swiglu(const ExecContext& ctx, const float* gu, int64_t M, int64_t I, float* out, bool bf16);
int64_t argmax(const ExecContext& ctx, const float* x, int64_t n);

// One sequence's slice of a GDN layer batch.
struct GdnSeq {
    int64_t t0, T;  // rows [t0, t0 + T) of the batch
    float* conv;    // [K-1, CD]
    float* ssm;     // [Hv, Dk, Dv]
    // The state after token t goes to conv_out[t] / ssm_out[t] (T pointers each; an entry may equal the
    // state it follows, i.e. in place): a decode step that keeps its input state (a prefix-cache
    // snapshot), and the commit of verified tokens into another slot. Null: in place.
    float* const* conv_out = nullptr;
    float* const* ssm_out = nullptr;
    // Speculative verification: the outputs of every token, and the state is only read: the states after
    // each token live in per-thread scratch and are dropped (the engine then commits the accepted prefix,
    // rerunning its tokens into the slot). A verified sequence, like one with per-token outputs, runs
    // token by token with the decode step's arithmetic: every token is bitwise what a decode step computes.
    bool keep_state = false;
    bool stepwise() const { return T == 1 || ssm_out != nullptr || keep_state; }
};
// Value heads per key head (Hv / Hk) a GDN layer may have (config.cpp checks it; released models: 1 to 4).
constexpr int64_t kMaxValueHeadsPerKey = 16;

struct GdnParams {
    int64_t Hk, Hv, Dk, Dv, K;
    float eps;
    const float* conv_w;                      // [CD, K] (reference layout)
    const float* conv_wT;                     // [K, CD] (kernel layout)
    const float *neg_exp_A, *dt_bias, *norm;  // [Hv], [Hv], [Dv]
    bool chunked_reference;  // reference path: chunked form for long sequences (else recurrent)
    // The value heads' order: grouped (HF: key head hk's are hk * r .. hk * r + r - 1) or tiled (a GGUF
    // Qwen3.5 file: hk, hk + Hk, ...). Every V-sized row, gate and state follows it, out_proj's columns too.
    bool v_tiled = false;
};
// Value head j (< Hv / Hk) of key head hk in p's order.
inline int64_t gdn_value_head(const GdnParams& p, int64_t hk, int64_t j) {
    return p.v_tiled ? j * p.Hk + hk : hk * (p.Hv / p.Hk) + j;
}
// The GDN mixer between the input projection and out_proj: conv + SiLU, q/k L2 norm and scale, gating,
// the gated delta rule on each sequence's state, gated RMSNorm with silu(z).
// proj [N, ldp] rows hold q|k|v (CD) | z (VD) | b (Hv) | a (Hv); out [N, VD].
void gdn_mixer(const ExecContext& ctx, const float* proj, int64_t ldp, const std::vector<GdnSeq>& seqs,
               const GdnParams& p, float* out, Scratch& scratch, bool bf16);
// The states only (no outputs) of several GDN layers' sequences in one parallel pass: the commit of
// verified tokens (Model::commit_verified), whose outputs the verification already produced. Every
// sequence must run stepwise (per-token outputs; the tokens few); the layers share their head shape.
struct GdnCommitLayer {
    const float* proj;
    int64_t ldp;
    const std::vector<GdnSeq>* seqs;
    const GdnParams* p;
};
void gdn_commit(const ExecContext& ctx, const std::vector<GdnCommitLayer>& layers, Scratch& scratch,
                bool bf16);

// One sequence's slice of an attention batch: its keys j < n_past + T (the new rows already written) are
// located by `kv` (contiguous or paged; rows of Hkv * D floats).
struct AttnSeq {
    int64_t t0, T, n_past;
    KvRows kv;
    // A one-token query that is one row of a prefill (the rest of whose rows nobody reads): it takes the
    // prefill kernels, whose bits for a row do not depend on the other rows, not the decode kernel.
    bool prefill_row = false;
};
// out [N, Hq, D] = causal softmax attention with GQA, times sigmoid(gate). q, gate rows of ldq floats.
// bf16 (the activation mode): prefill rows with more than 256 keys run with Q, K, V and the
// probabilities in bf16 on AVX-512 BF16 CPUs (AMX tiles or vdpbf16ps; uses_bf16_attention); the rest,
// one-token rows (but prefill_row ones) and f32 mode stay in f32.
void attention(const ExecContext& ctx, const float* q, const float* gate, int64_t ldq,
               const std::vector<AttnSeq>& seqs, int64_t Hq, int64_t Hkv, int64_t D, float* out,
               Scratch& scratch, bool bf16);
bool uses_bf16_attention(int64_t Hq, int64_t Hkv, int64_t D, bool bf16);

}  // namespace gdn::ops
