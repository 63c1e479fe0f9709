#include <cmath>
#include <vector>

#include "ops/ref/ref_ops.h"

namespace gdn::ref {

void rope_neox(float* x, int64_t T, int64_t n_heads, int64_t D, int64_t rot_dim, const int64_t* pos,
               float theta, bool bf16) {
    const int64_t half = rot_dim / 2;
    std::vector<float> cs(half), sn(half);
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < half; ++j) {
            // inv_freq in f32 as HF computes it: 1 / theta^(2j / rot)
            const float inv_freq =
                1.0f / std::pow(theta, static_cast<float>(2 * j) / static_cast<float>(rot_dim));
            const float ang = static_cast<float>(pos[t]) * inv_freq;
            cs[j] = std::cos(ang);
            sn[j] = std::sin(ang);
            if (bf16) {
                cs[j] = round_bf16(cs[j]);
                sn[j] = round_bf16(sn[j]);
            }
        }
        for (int64_t h = 0; h < n_heads; ++h) {
            float* u = x + (t * n_heads + h) * D;
            for (int64_t j = 0; j < half; ++j) {
                const float a = u[j], b = u[j + half];
                float ra = a * cs[j] - b * sn[j];
                float rb = b * cs[j] + a * sn[j];
                if (bf16) {
                    ra = round_bf16(ra);
                    rb = round_bf16(rb);
                }
                u[j] = ra;
                u[j + half] = rb;
            }
        }
    }
}

}  // namespace gdn::ref
