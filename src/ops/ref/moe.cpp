#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/ref/ref_ops.h"

namespace gdn::ref {

void moe_route(const float* logits, int64_t T, int64_t E, int64_t k, bool renormalize, int32_t* idx, float* w) {
    thread_local std::vector<float> p;  // grow-only: no allocation per call once warm
    thread_local std::vector<int32_t> order;
    p.resize(E);
    order.resize(E);
    for (int64_t t = 0; t < T; ++t) {
        const float* l = logits + t * E;
        float mx = l[0];
        for (int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
        float sum = 0.0f;
        for (int64_t e = 0; e < E; ++e) {
            p[e] = std::exp(l[e] - mx);
            sum += p[e];
        }
        for (int64_t e = 0; e < E; ++e) p[e] /= sum;  // softmax over ALL experts, f32
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
            return p[a] > p[b] || (p[a] == p[b] && a < b);
        });
        float wsum = 0.0f;
        for (int64_t s = 0; s < k; ++s) wsum += p[order[s]];
        for (int64_t s = 0; s < k; ++s) {
            idx[t * k + s] = order[s];
            w[t * k + s] = renormalize ? p[order[s]] / wsum : p[order[s]];
        }
    }
}

}  // namespace gdn::ref
