// Many independent linears in two passes over the thread pool: an MoE layer's experts, each a small
// GEMM over the rows routed to it. Run one by one, each expert costs two or three pool dispatches and
// barriers (activations, then panels) and splits its few panels between the threads; as a group, every
// job's activations are prepared in one pass over all their rows and every job's panels run in one
// balanced pass. Same kernels as linear() / linear_swiglu() on each job, so the same bits (a row's
// products never depend on the rows beside it).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/linear.h"
#include "ops/linear_input.h"

namespace gdn {

struct LinearJob {
    const float* x = nullptr;  // [M, K], or with rows: a matrix [., K] whose rows rows[0..M) are the input
    int64_t M = 0;
    const LinearWeight* w = nullptr;
    float* y = nullptr;  // [M, N] products; swiglu: [M, N / 2] silu(gate) x up (w: make_swiglu_linear)
    const int64_t* rows = nullptr;  // input row m is x + rows[m] K (an expert's tokens: no gathered copy)
    // Instead of x: a shared input (ops/linear_input.h), whose kept operand form the job reads (its rows
    // copied from it where the job names rows), so a token's row routed to k experts is converted once.
    LinearInput* in = nullptr;
};

// Every job as linear(x, M, w, y, bf16_act) (outputs not rounded) or, with swiglu, linear_swiglu(x, M,
// w, y, bf16_act). Jobs
// whose kernel has no pooled panel form (the f32-FMA and reference paths, a SwiGLU without an
// epilogue) run one by one through those calls.
void linear_group(const ExecContext& ctx, const std::vector<LinearJob>& jobs, bool swiglu, bool bf16_act);

}  // namespace gdn
