#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/ref/ref_ops.h"

namespace gdn::ref {

namespace {
// y = round?(round?(x) @ W^T)
std::vector<float> linear_rounded(const ExecContext& ctx, const float* x, int64_t N, const TensorView& W,
                                  bool bf16_in, bool round_out) {
    std::vector<float> y(N * W.shape[0]);
    if (bf16_in) {
        std::vector<float> xr(x, x + N * W.shape[1]);
        round_activations(xr.data(), static_cast<int64_t>(xr.size()), true);
        linear(ctx, xr.data(), N, W, y.data());
    } else {
        linear(ctx, x, N, W, y.data());
    }
    round_activations(y.data(), static_cast<int64_t>(y.size()), round_out);
    return y;
}
}  // namespace

void swiglu_mlp(const ExecContext& ctx, const MlpWeights& w, const float* x, int64_t N, float* out,
                bool bf16_in, bool hf) {
    std::vector<float> g = linear_rounded(ctx, x, N, w.gate, bf16_in, hf);  // [N, I]
    std::vector<float> u = linear_rounded(ctx, x, N, w.up, bf16_in, hf);    // [N, I]
    silu_mul(g.data(), u.data(), static_cast<int64_t>(g.size()), g.data(), hf);
    round_activations(g.data(), static_cast<int64_t>(g.size()), hf);
    std::vector<float> y = linear_rounded(ctx, g.data(), N, w.down, bf16_in, hf);
    std::copy(y.begin(), y.end(), out);
}

void moe(const ExecContext& ctx, const MoeWeights& w, const float* x, int64_t N, int64_t k, bool renormalize,
         float* out, bool bf16_in, bool hf) {
    const int64_t H = w.router.shape[1], E = w.router.shape[0];
    std::vector<float> logits = linear_rounded(ctx, x, N, w.router, bf16_in, hf);  // [N, E]
    std::vector<int32_t> idx(N * k);
    std::vector<float> wts(N * k);
    MoeRouteScratch route_scratch;
    moe_route(logits.data(), N, E, k, renormalize, idx.data(), wts.data(), route_scratch);
    round_activations(wts.data(), N * k, hf);
    std::memset(out, 0, N * H * sizeof(float));
    std::vector<int64_t> rows;
    std::vector<float> rw, xe, ye;
    for (int64_t e = 0; e < E; ++e) {
        rows.clear();
        rw.clear();
        for (int64_t t = 0; t < N; ++t)
            for (int64_t s = 0; s < k; ++s)
                if (idx[t * k + s] == e) {
                    rows.push_back(t);
                    rw.push_back(wts[t * k + s]);
                }
        if (rows.empty()) continue;
        const int64_t n = static_cast<int64_t>(rows.size());
        xe.resize(n * H);
        ye.resize(n * H);
        for (int64_t i = 0; i < n; ++i) std::memcpy(&xe[i * H], x + rows[i] * H, H * sizeof(float));
        swiglu_mlp(ctx, w.experts[e], xe.data(), n, ye.data(), bf16_in, hf);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < H; ++j) out[rows[i] * H + j] += rw[i] * ye[i * H + j];
    }
    if (w.has_shared) {
        std::vector<float> ys(N * H);
        swiglu_mlp(ctx, w.shared, x, N, ys.data(), bf16_in, hf);
        std::vector<float> sg = linear_rounded(ctx, x, N, w.shared_gate, bf16_in, hf);  // [N, 1]
        for (int64_t t = 0; t < N; ++t) {
            const float gate = sigmoid(sg[t]);
            for (int64_t j = 0; j < H; ++j) out[t * H + j] += gate * ys[t * H + j];
        }
    }
    round_activations(out, N * H, hf);
}

}  // namespace gdn::ref
