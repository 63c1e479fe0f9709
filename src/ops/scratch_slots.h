// The buffers of ops::Scratch (ops/layers.h) by name: every op and the model forward take theirs from
// one Scratch, so the slots are one table. Ops that run one after another share a slot where the
// earlier one's contents are dead by the time the later one writes (noted per slot), which bounds the
// forward's activation memory at long prefill chunks.
#pragma once

namespace gdn::ops {

enum ScratchSlot : int {
    // ops::gdn_mixer
    // (decode steps, verification and commits; prefill keeps its conv output in per-thread head blocks)
    GDN_QKV = 0,   // conv output q | k | v per token [N, CD] (a commit: [L N, CD])
    GDN_CORE = 4,  // delta-rule output [N, VD]
    // ops::attention
    ATTN_ROW_SCRATCH = 10,  // f32 prefill rows: 64 floats per thread
    ATTN_PART = 11,         // decode: per key-range unit partial outputs, maxima and sums
    ATTN_MAX = 12,
    ATTN_SUM = 13,
    ATTN_PACKED_KV = 14,  // bf16 prefill: a sequence's keys and values packed as bf16 pairs
    // The model forward (model/forward.cpp)
    X = 30,     // residual stream [N, H]
    H_MIX,      // mixer input [N, H]
    H_FFN,      // FFN input [N, H]
    MIX,        // mixer output [N, H]
    FFN,        // FFN output [N, H]
    PROJ,       // a mixer's input projection; then the dense MLP's gate|up products
    ACT,        // a mixer's activations before its output projection; then the dense MLP's SwiGLU
    Q,          // attention queries [N, Hq D]
    GATE,       // attention output gates [N, Hq D]
    LAST_ROWS,  // the rows whose logits are asked [R, H]
    MTP_CAT,    // the MTP layer's concatenated input [N, 2H]
    MTP_EMB,    // its embedded tokens [N, H]
    // ops::moe (ops/ffn.h)
    MOE_ROUTER,       // router logits [N, E]
    MOE_IN,           // a run of experts' gathered inputs (the per-expert path)
    MOE_OUT,          // their outputs, then the shared expert's
    MOE_GATE_UP,      // an expert's gate|up products (the per-expert path)
    MOE_ACT,          // experts' SwiGLU activations
    MOE_SHARED_GATE,  // the shared expert's gate logit per token [N]
};

}  // namespace gdn::ops
