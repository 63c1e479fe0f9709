#include <cstring>
#include <vector>

#include "ops/ref/ref_ops.h"

namespace gdn::ref {

namespace {
std::vector<float> linear_rounded(const float* x, int64_t N, const TensorView& W, bool bf16) {
    std::vector<float> y(N * W.shape[0]);
    linear(x, N, W, y.data());
    round_activations(y.data(), static_cast<int64_t>(y.size()), bf16);
    return y;
}
}  // namespace

void swiglu_mlp(const MlpWeights& w, const float* x, int64_t N, float* out, bool bf16) {
    std::vector<float> g = linear_rounded(x, N, w.gate, bf16);  // [N, I]
    std::vector<float> u = linear_rounded(x, N, w.up, bf16);    // [N, I]
    silu_mul(g.data(), u.data(), static_cast<int64_t>(g.size()), g.data(), bf16);
    round_activations(g.data(), static_cast<int64_t>(g.size()), bf16);
    linear(g.data(), N, w.down, out);
    round_activations(out, N * w.down.shape[0], bf16);
}

void moe(const MoeWeights& w, const float* x, int64_t N, int64_t k, bool renormalize, float* out, bool bf16) {
    const int64_t H = w.router.shape[1], E = w.router.shape[0];
    std::vector<float> logits = linear_rounded(x, N, w.router, bf16);  // [N, E]
    std::vector<int32_t> idx(N * k);
    std::vector<float> wts(N * k);
    moe_route(logits.data(), N, E, k, renormalize, idx.data(), wts.data());
    round_activations(wts.data(), N * k, bf16);
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
        swiglu_mlp(w.experts[e], xe.data(), n, ye.data(), bf16);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < H; ++j) out[rows[i] * H + j] += rw[i] * ye[i * H + j];
    }
    if (w.has_shared) {
        std::vector<float> ys(N * H);
        swiglu_mlp(w.shared, x, N, ys.data(), bf16);
        std::vector<float> sg(N);  // [N, 1]
        linear(x, N, w.shared_gate, sg.data());
        round_activations(sg.data(), N, bf16);
        for (int64_t t = 0; t < N; ++t) {
            const float gate = sigmoid(sg[t]);
            for (int64_t j = 0; j < H; ++j) out[t * H + j] += gate * ys[t * H + j];
        }
    }
    round_activations(out, N * H, bf16);
}

}  // namespace gdn::ref
