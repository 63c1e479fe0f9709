#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/ref/ref_ops.h"

namespace gdn::ref {

void moe_route(const float* logits, int64_t T, int64_t E, int64_t k, bool renormalize, int32_t* idx, float* w,
               MoeRouteScratch& scratch) {
    std::vector<float>& p = scratch.probs;
    std::vector<int32_t>& top = scratch.top;
    p.resize(E);
    top.resize(k);
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
        // Top-k by insertion in expert order: an expert enters only above a strictly smaller
        // probability, so among equal ones the lower index stays first (k is 2..10: a few compares
        // per expert, where a partial sort of all E indices cost more than the softmax's exps).
        int64_t n = 0;
        for (int32_t e = 0; e < E; ++e) {
            if (n == k && !(p[e] > p[top[k - 1]])) continue;
            int64_t at = n < k ? n++ : k - 1;
            for (; at > 0 && p[e] > p[top[at - 1]]; --at) top[at] = top[at - 1];
            top[at] = e;
        }
        float wsum = 0.0f;
        for (int64_t s = 0; s < k; ++s) wsum += p[top[s]];
        for (int64_t s = 0; s < k; ++s) {
            idx[t * k + s] = top[s];
            w[t * k + s] = renormalize ? p[top[s]] / wsum : p[top[s]];
        }
    }
}

}  // namespace gdn::ref
