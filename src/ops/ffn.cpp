#include "ops/ffn.h"

#include <algorithm>
#include <cstring>

#include "core/profiler.h"
#include "core/thread_pool.h"
#include "ops/dispatch.h"

namespace gdn::ops {

namespace {

// The scratch of one run of MoE experts: its gathered inputs, outputs and SwiGLU activations. Bounds the
// MoE's extra memory at long prefill chunks (N k rows of 2 H + I floats: 377 MB for a 2048-token chunk
// of Qwen3-Next-80B-A3B, k = 10) at a few runs per layer.
constexpr int64_t kMoeRunBytes = int64_t{64} << 20;

// o += w y over H; first: o = 0 + w y, the bits of adding to a zeroed row without a pass that zeroes it
// (a token's first route is its lowest bucketed row, so it comes in the first run holding any of them).
// The combine is bound by reading the experts' outputs (4 MB for 512 tokens x 4 routes x 512: ~135 us a
// layer either way), not by these adds.
inline void add_weighted_row(float* __restrict o, const float* __restrict y, float w, int64_t H, bool first) {
    if (first) {
        for (int64_t j = 0; j < H; ++j) o[j] = 0.0f + w * y[j];
    } else {
        for (int64_t j = 0; j < H; ++j) o[j] += w * y[j];
    }
}

// Routes bucketed by expert (a stable counting sort: each expert's rows in token order, O(N k + E)); a
// token routes to an expert at most once, so an expert's rows are distinct tokens. Fills expert_start
// [E + 1], rows / rw (each bucketed row's token and weight) and route_pos: route_pos[t k + s] is route s
// of token t's row in that order, each token's sorted (ascending rows = ascending experts).
void bucket_routes(const ExecContext& ctx, MoeWorkspace& ws, int64_t N, int64_t E, int64_t k) {
    GDN_PROFILE(ctx, "moe buckets");
    std::vector<int64_t>& start = ws.expert_start;
    start.assign(E + 1, 0);
    for (int64_t i = 0; i < N * k; ++i) ++start[ws.route_idx[i] + 1];
    for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
    ws.rows.resize(N * k);
    ws.rw.resize(N * k);
    ws.route_pos.resize(N * k);
    std::vector<int64_t>& cursor = ws.rows_cursor;
    cursor.assign(start.begin(), start.end() - 1);
    for (int64_t t = 0; t < N; ++t) {
        for (int64_t r = 0; r < k; ++r) {
            const int64_t at = cursor[ws.route_idx[t * k + r]]++;
            ws.rows[at] = t;
            ws.rw[at] = ws.route_w[t * k + r];
            ws.route_pos[t * k + r] = at;
        }
        std::sort(ws.route_pos.begin() + t * k, ws.route_pos.begin() + (t + 1) * k);
    }
}

}  // namespace

void mlp(const ExecContext& ctx, const Mlp& m, const float* h, int64_t N, float* out, bool bf16, bool hf,
         Scratch& sc, int gu_slot, int act_slot, LinearInput* in) {
    const int64_t I = m.down.K();
    if (m.fused && !hf) {  // SwiGLU in the gate|up GEMM's epilogue
        float* act = sc.f32(ctx, act_slot, N * I);
        if (in)
            linear_swiglu(ctx, *in, m.gate_up, act, bf16);
        else
            linear_swiglu(ctx, h, N, m.gate_up, act, bf16);
        linear(ctx, act, N, m.down, out, bf16, hf);
        return;
    }
    float* gu = sc.f32(ctx, gu_slot, N * 2 * I);
    linear(ctx, h, N, m.gate_up, gu, bf16, hf);
    float* act = sc.f32(ctx, act_slot, N * I);
    if (m.fused) {  // HF rounding on the interleaved layout: rows of [gate 16 | up 16] (see linear_swiglu)
        swiglu(ctx, gu, N * (I / 16), 16, act, hf);
    } else {
        swiglu(ctx, gu, N, I, act, hf);
    }
    linear(ctx, act, N, m.down, out, bf16, hf);
}

void moe(const ExecContext& ctx, const Moe& m, const MoeShape& s, const float* h, int64_t N, float* out,
         bool bf16, bool hf, Scratch& sc, MoeWorkspace& ws) {
    const int64_t H = s.hidden, E = s.n_experts, k = s.top_k;
    // The reference MoE on the checkpoint's views where the layer kept them (a float layer); a quantized
    // layer has none and is composed below from its packed weights.
    if (op_isa(OpId::MOE) == Isa::REF && !m.views.experts.empty()) {
        ref::moe(ctx, m.views, h, N, k, s.norm_topk_prob, out, bf16, hf);
        return;
    }
    // h as one shared input of the block's linears: each operand form of it is made once.
    LinearInput& in = ws.in;
    in.reset(h, N, H);
    float* logits = sc.f32(ctx, MOE_ROUTER, N * E);
    linear(ctx, in, m.router, logits, bf16, hf);
    ws.route_idx.resize(N * k);
    ws.route_w.resize(N * k);
    {
        GDN_PROFILE(ctx, "moe_route");
        ctx.pool().parallel_for(
            N,
            [&](int64_t t0, int64_t t1) {  // tokens route independently
                ref::moe_route(logits + t0 * E, t1 - t0, E, k, s.norm_topk_prob, ws.route_idx.data() + t0 * k,
                               ws.route_w.data() + t0 * k, ctx.pool().scratch().get<ref::MoeRouteScratch>());
            },
            row_grain(8 * E));
    }
    ref::round_activations(ws.route_w.data(), N * k, hf);
    bucket_routes(ctx, ws, N, E, k);
    const std::vector<int64_t>& start = ws.expert_start;
    // Experts run in runs of consecutive experts whose rows fit the scratch (kMoeRunBytes of inputs,
    // outputs and activations; at least one expert's N rows): every expert's MLP (fused: two
    // linear_group passes for all of them, reading the tokens' rows of h through the shared input; the
    // HF-rounding mode one expert at a time on gathered rows), then each token's weighted outputs added
    // in expert order, the order of a one-expert-at-a-time loop.
    const int64_t I = m.experts[0].down.K();
    const bool grouped =
        !hf && std::all_of(m.experts.begin(), m.experts.end(), [](const Mlp& x) { return x.fused; });
    const int64_t cap =
        std::max<int64_t>(N, kMoeRunBytes / static_cast<int64_t>((2 * H + I) * sizeof(float)));
    float* ye = sc.f32(ctx, MOE_OUT, cap * H);
    float* xe = grouped ? nullptr : sc.f32(ctx, MOE_IN, cap * H);
    float* act = grouped ? sc.f32(ctx, MOE_ACT, cap * I) : nullptr;
    const int64_t grain = row_grain(2 * H);
    for (int64_t e0 = 0, e1; e0 < E; e0 = e1) {
        for (e1 = e0 + 1; e1 < E && start[e1 + 1] - start[e0] <= cap;) ++e1;
        const int64_t r0 = start[e0], r1 = start[e1];
        if (r1 == r0) continue;
        if (grouped) {
            ws.gate_up_jobs.clear();
            ws.down_jobs.clear();
            for (int64_t e = e0; e < e1; ++e) {
                const int64_t at = start[e] - r0, n = start[e + 1] - start[e];
                if (n == 0) continue;
                ws.gate_up_jobs.push_back(
                    {nullptr, n, &m.experts[e].gate_up, act + at * I, ws.rows.data() + start[e], &in});
                ws.down_jobs.push_back({act + at * I, n, &m.experts[e].down, ye + at * H});
            }
            linear_group(ctx, ws.gate_up_jobs, true, bf16);
            linear_group(ctx, ws.down_jobs, false, bf16);
        } else {
            ctx.pool().parallel_for(
                r1 - r0,
                [&](int64_t i0, int64_t i1) {
                    for (int64_t i = i0; i < i1; ++i)
                        std::memcpy(xe + i * H, h + ws.rows[r0 + i] * H, H * sizeof(float));
                },
                grain);
            for (int64_t e = e0; e < e1; ++e)
                if (const int64_t n = start[e + 1] - start[e]; n > 0)
                    mlp(ctx, m.experts[e], xe + (start[e] - r0) * H, n, ye + (start[e] - r0) * H, bf16, hf,
                        sc, MOE_GATE_UP, MOE_ACT);
        }
        GDN_PROFILE(ctx, "moe combine");
        ctx.pool().parallel_for(
            N,
            [&](int64_t t0, int64_t t1) {
                for (int64_t t = t0; t < t1; ++t)
                    for (int64_t r = 0; r < k; ++r) {
                        const int64_t at = ws.route_pos[t * k + r];
                        if (at >= r0 && at < r1)
                            add_weighted_row(out + t * H, ye + (at - r0) * H, ws.rw[at], H, r == 0);
                    }
            },
            grain);
    }
    if (s.has_shared) {
        mlp(ctx, m.shared, h, N, ye, bf16, hf, sc, MOE_GATE_UP, MOE_ACT, &in);
        float* sg = sc.f32(ctx, MOE_SHARED_GATE, N);
        linear(ctx, in, m.shared_gate, sg, bf16, hf);
        ctx.pool().parallel_for(
            N,
            [&](int64_t t0, int64_t t1) {
                for (int64_t t = t0; t < t1; ++t)
                    add_weighted_row(out + t * H, ye + t * H, ref::sigmoid(sg[t]), H, false);
            },
            grain);
    }
    ref::round_activations(out, N * H, hf);
}

}  // namespace gdn::ops
