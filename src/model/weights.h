// Typed per-layer weights with every load-time transform of model_spec.md applied once:
// Qwen3-Next in_proj_qkvz / in_proj_ba regrouped to the flat q|k|v, z, b, a order; (1 + w) precomputed
// for the zero-centred norms (not for linear_attn.norm); -exp(A_log) and dt_bias in f32; conv taps in
// f32; per-expert and packed experts exposed the same way; a tied lm_head viewing the embedding.
//
// Large matrices stay in their stored dtype (views into the mmapped checkpoint, or a regrouped copy);
// small vectors become f32.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/buffer.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "ops/ffn.h"
#include "ops/linear.h"
#include "ops/ref/ref_ops.h"

namespace gdn {

struct AttentionWeights {
    TensorView q_proj;    // [Hq*2*D, H]; per head: D query rows, then D gate rows
    TensorView k_proj;    // [Hkv*D, H]
    TensorView v_proj;    // [Hkv*D, H]
    TensorView o_proj;    // [H, Hq*D]
    const float* q_norm;  // [D], (1 + w)
    const float* k_norm;  // [D], (1 + w)
    LinearWeight qkv;     // q_proj | k_proj | v_proj as one GEMM: [Hq*2*D + 2*Hkv*D, H]
    LinearWeight o;       // [H, Hq*D]
};

struct GdnWeights {
    TensorView in_qkv;       // [CD, H], rows q | k | v (flat, value head g*r+j)
    TensorView in_z;         // [VD, H]
    TensorView in_b;         // [Hv, H]
    TensorView in_a;         // [Hv, H]
    const float* conv;       // [CD, K]; tap K-1 multiplies the current token
    const float* neg_exp_A;  // [Hv], -exp(A_log) in f32
    const float* dt_bias;    // [Hv]
    const float* norm;       // [Dv], plain w (gated RMSNorm)
    TensorView out_proj;     // [H, VD]
    const float* conv_T;     // [K, CD]: conv taps transposed for the channel-vectorised kernel
    LinearWeight in_proj;    // qkv | z | b | a as one GEMM: [CD + VD + 2*Hv, H]
    LinearWeight out;        // [H, VD]
};

struct LayerWeights {
    LayerKind kind;
    const float* input_norm;  // [H], (1 + w)
    const float* post_norm;   // [H], (1 + w)
    AttentionWeights attn;    // when kind == FULL_ATTENTION
    GdnWeights gdn;           // when kind == LINEAR_ATTENTION
    bool is_moe = false;
    Mlp mlp;  // dense layers
    Moe moe;  // MoE layers
};

// The MTP (multi-token prediction) draft layer, model_spec.md §4.8: fc over concat(RMSNorm1p(embed(t+1)),
// RMSNorm1p(h_t)), one full-attention decoder layer with its own KV cache, a final norm, the shared lm_head.
struct MtpWeights {
    const float* pre_fc_norm_embedding;  // [H], (1 + w)
    const float* pre_fc_norm_hidden;     // [H], (1 + w)
    LinearWeight fc;                     // [H, 2H]: the embedding half first
    LayerWeights layer;                  // kind FULL_ATTENTION; MoE when the family's layers are
    const float* norm;                   // [H], (1 + w)
    // The lm_head quantized for the drafts' argmax (LoadOptions::mtp_draft_head): drafting streams it k
    // times a step, and on the CPU it is most of an MTP step's bytes (0.5 of 0.56 GB at the 0.8B shape).
    // Empty when the lm_head itself is quantized already or the option is off.
    LinearWeight draft_head;
};

struct ModelWeights {
    // Set when the matrices were quantized at load (--quantization): every LinearWeight is packed in
    // that format, no view into the checkpoint is kept, and the mapping's pages were released.
    std::optional<WeightFormat> quantization;
    bool prepacked = false;   // read packed from a `gdn quantize` checkpoint (model/packed_checkpoint.h)
    TensorView embed;         // [V, H]; data null when quantized (rows come from embed_packed)
    const float* final_norm;  // [H], (1 + w)
    TensorView lm_head;       // [V, H] (the embedding when tied)
    LinearWeight lm_head_packed;
    const PackedWeight* embed_packed = nullptr;  // the embedding packed (tied: lm_head_packed), else null
    PackedWeight embed_quantized;                // an untied embedding's quantized table
    std::vector<LayerWeights> layers;
    std::unique_ptr<MtpWeights> mtp;  // loaded with LoadOptions::mtp

    // Canonical names of the checkpoint tensors read and kept in float form (norms, conv taps, gates,
    // the MoE router): with the packed weights, all that `gdn quantize` writes out.
    std::vector<std::string> float_tensors;
    // A GGUF model's linears by source types and what they were packed as ("Q4_K -> int4-k (native)": 60):
    // the start-up log's per-type line, so a widened type is visible.
    std::map<std::string, int> gguf_packing;
    std::shared_ptr<Checkpoint> checkpoint;  // keeps the mapping alive
    std::vector<Buffer> owned;               // regrouped matrices (Qwen3-Next in_proj)
    HugePageArena small;                     // the small f32 tensors (norms, conv taps, gates): huge pages
};

// progress(done, total) is called after each layer is loaded and packed (for a load progress bar).
using LoadProgress = std::function<void(int done, int total)>;

struct LoadOptions {
    // Quantize every weight matrix (projections, fused or not, MoE experts routed and shared, the
    // lm_head and the embedding table) to this format, tensor by tensor from the mapping; the source
    // pages are released after each layer, so peak memory is about the quantized size plus one layer.
    // The MoE router and the shared-expert gate ([E, H] and [1, H]: a negligible share of the bytes, and
    // they pick experts) stay in their float format. With int4, the lm_head (and a tied embedding with it)
    // is int8: the one matrix whose error reaches the logits directly (docs/perf.md has the comparison).
    std::optional<WeightFormat> quantization;
    bool prepacked = false;  // read packed from a `gdn quantize` checkpoint (model/packed_checkpoint.h)
    // Load the MTP draft layer (mtp.*) too, for --speculative-config '{"method": "mtp"}' (an error when the
    // checkpoint has none). Off, the mtp.* tensors are not read.
    bool mtp = false;
    // The format of the MTP drafts' copy of the lm_head (none: the lm_head itself). Measured on the demo
    // model and the 0.8B shape in docs/perf.md.
    std::optional<WeightFormat> mtp_draft_head = WeightFormat::Q8;
    // A float model's MTP layer (mtp.fc and its decoder layer) packed in this format (none: as the rest).
    // The layer only drafts, and verification makes the output exact whatever it proposes; drafting
    // streams it k times a step, so a smaller format drafts faster at the same acceptance (docs/perf.md,
    // behind the constants: model/weights.h). Off here, so the MTP reference checks see the checkpoint's
    // weights; on by default in SpeculativeConfig::draft_layer.
    std::optional<WeightFormat> mtp_layer;
};

Result<std::unique_ptr<ModelWeights>> load_weights(const ExecContext& ctx, const ModelConfig& config,
                                                   std::shared_ptr<Checkpoint> ck,
                                                   const LoadProgress& progress = nullptr,
                                                   const LoadOptions& options = {});

// Every linear layer of the model with a name ("layers.3.mlp.gate_up", "lm_head", ...): for reports.
void for_each_linear(const ModelWeights& w,
                     const std::function<void(const std::string&, const PackedWeight&)>& fn);

// "weights: 0.5 MB bf16 (16 matrices, 31.03 bits/weight), 156.6 MB int8 (546 matrices, 8.50 bits/weight)":
// bytes per format of the packed matrices (padding included), for the start-up log.
std::string weights_summary(const ModelWeights& w);

}  // namespace gdn
