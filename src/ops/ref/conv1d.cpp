#include <cstring>
#include <vector>

#include "ops/ref/ref_ops.h"

namespace gdn::ref {

void causal_conv1d(const float* x, int64_t T, int64_t C, const float* w, int64_t K, float* state, float* y,
                   bool apply_silu) {
    // window = [state (K-1 rows, oldest first) ; x (T rows)]: row K-1+t is token t.
    std::vector<float> win((K - 1 + T) * C);
    std::memcpy(win.data(), state, (K - 1) * C * sizeof(float));
    std::memcpy(win.data() + (K - 1) * C, x, T * C * sizeof(float));
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t c = 0; c < C; ++c) {
            float s = 0.0f;
            for (int64_t j = 0; j < K; ++j) s += w[c * K + j] * win[(t + j) * C + c];
            y[t * C + c] = apply_silu ? silu(s) : s;
        }
    }
    // New state: the last K-1 rows of the window.
    std::memcpy(state, win.data() + T * C, (K - 1) * C * sizeof(float));
}

void gdn_gating(const float* a, const float* b, int64_t T, int64_t Hv, const float* neg_exp_A,
                const float* dt_bias, float* g, float* beta) {
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < Hv; ++h) {
            g[t * Hv + h] = neg_exp_A[h] * softplus(a[t * Hv + h] + dt_bias[h]);
            beta[t * Hv + h] = sigmoid(b[t * Hv + h]);
        }
}

}  // namespace gdn::ref
