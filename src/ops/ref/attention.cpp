#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/ref/ref_ops.h"

namespace gdn::ref {

void attention(const float* q, const float* gate, const float* k, const float* v, int64_t T, int64_t n_past,
               int64_t Hq, int64_t Hkv, int64_t D, float* out) {
    const int64_t group = Hq / Hkv;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    std::vector<float> p(n_past + T);
    for (int64_t t = 0; t < T; ++t) {
        const int64_t n_keys = n_past + t + 1;  // causal: keys 0 .. n_past + t
        for (int64_t h = 0; h < Hq; ++h) {
            const int64_t kvh = h / group;
            const float* qh = q + (t * Hq + h) * D;
            float mx = -INFINITY;
            for (int64_t j = 0; j < n_keys; ++j) {
                const float* kj = k + (j * Hkv + kvh) * D;
                float s = 0.0f;
                for (int64_t d = 0; d < D; ++d) s += qh[d] * kj[d];
                p[j] = s * scale;
                mx = std::max(mx, p[j]);
            }
            double sum = 0.0;
            for (int64_t j = 0; j < n_keys; ++j) {
                p[j] = std::exp(p[j] - mx);
                sum += p[j];
            }
            float* oh = out + (t * Hq + h) * D;
            for (int64_t d = 0; d < D; ++d) oh[d] = 0.0f;
            for (int64_t j = 0; j < n_keys; ++j) {
                const float pj = static_cast<float>(p[j] / sum);
                const float* vj = v + (j * Hkv + kvh) * D;
                for (int64_t d = 0; d < D; ++d) oh[d] += pj * vj[d];
            }
            if (gate) {
                const float* gh = gate + (t * Hq + h) * D;
                for (int64_t d = 0; d < D; ++d) oh[d] *= sigmoid(gh[d]);
            }
        }
    }
}

}  // namespace gdn::ref
