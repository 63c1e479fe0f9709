// The feed-forward ops (model_spec.md §4.6-4.7): the SwiGLU MLP and the sparse MoE block with its
// sigmoid-gated shared expert, on packed weights, with the reference ops (ops/ref/ref_ops.h) on the
// checkpoint's views where a layer keeps them.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/layers.h"
#include "ops/linear.h"
#include "ops/linear_group.h"
#include "ops/linear_input.h"
#include "ops/ref/ref_ops.h"
#include "ops/scratch_slots.h"

namespace gdn {

using ref::MlpWeights;
using ref::MoeWeights;

// A SwiGLU MLP in both forms: the plain views (reference op) and packed, gate|up fused into one GEMM.
struct Mlp {
    MlpWeights views;
    LinearWeight gate_up;  // [2I, H]: rows [0, I) gate, [I, 2I) up
    LinearWeight down;     // [H, I]
    bool fused = false;    // gate_up is make_swiglu_linear's interleaved form (I % 16 == 0)
};

struct Moe {
    MoeWeights views;     // for the reference op (empty on a quantized layer)
    LinearWeight router;  // [E, H]
    std::vector<Mlp> experts;
    Mlp shared;
    LinearWeight shared_gate;  // [1, H]
};

}  // namespace gdn

namespace gdn::ops {

struct MoeShape {
    int64_t hidden = 0, n_experts = 0, top_k = 0;
    bool norm_topk_prob = false;
    bool has_shared = false;  // a shared expert (shared_intermediate > 0)
};

// The MoE op's bookkeeping, kept across calls (grow-only, no allocation once warm); its activations
// live in the Scratch slots MOE_* (ops/scratch_slots.h).
struct MoeWorkspace {
    std::vector<int32_t> route_idx;  // [N, k] each token's experts
    std::vector<float> route_w, rw;  // [N, k] their weights; rw: in expert order
    // The routes bucketed by expert: expert e's rows are rows[expert_start[e] .. expert_start[e + 1]),
    // token ids in token order; route_pos[t k + s]: where route s of token t sits in that order.
    std::vector<int64_t> rows, expert_start, rows_cursor, route_pos;
    std::vector<LinearJob> gate_up_jobs, down_jobs;  // a run of experts' MLPs
    LinearInput in;  // the block's input h: router, shared expert and experts convert it once
};

// out [N, H] = down(silu(h gate^T) * (h up^T)). Its gate|up products and activations go to the slots
// gu_slot and act_slot of sc. in: h as a shared input whose kept forms the gate|up reads, or null.
// bf16: bf16 matmul inputs; hf: round where HF's bf16 forward rounds.
void mlp(const ExecContext& ctx, const Mlp& m, const float* h, int64_t N, float* out, bool bf16, bool hf,
         Scratch& sc, int gu_slot, int act_slot, LinearInput* in = nullptr);

// out [N, H] = the MoE block on h [N, H]: softmax(router) over all experts in f32, top-k (renormalised
// when norm_topk_prob), each token's experts' MLPs weighted and added in expert order, plus
// sigmoid(h shared_gate^T) * shared(h). On the reference ISA the reference op runs on the layer's views
// (where it has them); otherwise the experts run as two linear_group passes (every expert's gate|up
// with its SwiGLU, then every down projection) over runs of experts whose rows fit 64 MB of scratch.
void moe(const ExecContext& ctx, const Moe& m, const MoeShape& s, const float* h, int64_t N, float* out,
         bool bf16, bool hf, Scratch& sc, MoeWorkspace& ws);

}  // namespace gdn::ops
