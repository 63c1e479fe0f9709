#include <cmath>

#include "ops/ref/ref_ops.h"

namespace gdn::ref {

void rms_norm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
        const float inv = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * w[i];
    }
}

void gated_rms_norm(const float* x, const float* z, int64_t rows, int64_t n, const float* w, float eps,
                    float* y, bool bf16) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        const float* zr = z + r * n;
        float* yr = y + r * n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
        const float inv = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
        for (int64_t i = 0; i < n; ++i) {
            float t = xr[i] * inv;
            if (bf16)
                t = round_bf16(round_bf16(t) * w[i]);
            else
                t *= w[i];
            yr[i] = t * silu(zr[i]);
        }
    }
}

void l2_norm(float* x, int64_t rows, int64_t n, float eps, float scale) {
    for (int64_t r = 0; r < rows; ++r) {
        float* xr = x + r * n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
        const float inv = 1.0f / std::sqrt(static_cast<float>(ss) + eps);
        for (int64_t i = 0; i < n; ++i) xr[i] = xr[i] * inv * scale;
    }
}

}  // namespace gdn::ref
