#include "ops/quant/kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>

#include "core/dtype.h"

namespace gdn::kquant {

namespace {

constexpr float kGroupMaxEps = 1e-15f;

bool all_finite(const float* x, int n) {
    for (int i = 0; i < n; ++i)
        if (!std::isfinite(x[i])) return false;
    return true;
}

}  // namespace

int nearest_int(float v) {
    // ggml's nearest_int: adding 1.5 * 2^23 leaves round-to-nearest-even of v in the low mantissa bits
    // (|v| < 2^22; no libm call, so the fit loops vectorise).
    const float f = v + 12582912.0f;
    int32_t i;
    std::memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}

float largest_magnitude(const float* x, int n) {
    float amax = 0.0f, smax = 0.0f;
    for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            smax = x[i];
        }
    }
    return smax;
}

namespace {

// nearest_int as a float, clamped to [lo, hi]: the same value, in arithmetic the compiler vectorises.
inline float round_clamped(float v, float lo, float hi) {
    const float r = (v + 12582912.0f) - 12582912.0f;
    return std::min(std::max(r, lo), hi);
}

}  // namespace

float fit_scale_and_min(const float* x, const float* w, int n, int nmax, float rmin, float rdelta, int nstep,
                        uint8_t* L, float* neg_min) {
    float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        std::fill(L, L + n, 0);
        *neg_min = -lo;
        return 0.0f;
    }
    const float fmax = static_cast<float>(nmax);
    float iscale = nmax / (hi - lo);
    float scale = 1 / iscale, min = lo;
    float best_error = 0;
    float best_l[256], trial[256];
    for (int i = 0; i < n; ++i) {
        best_l[i] = round_clamped(iscale * (x[i] - lo), 0.0f, fmax);
        const float diff = scale * best_l[i] + lo - x[i];
        best_error += w[i] * diff * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const float l = round_clamped(iscale * (x[i] - lo), 0.0f, fmax);
            trial[i] = l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float error = 0;
        for (int i = 0; i < n; ++i) {
            const float diff = this_scale * trial[i] + this_min - x[i];
            error += w[i] * diff * diff;
        }
        if (error < best_error) {
            std::copy(trial, trial + n, best_l);
            best_error = error;
            scale = this_scale;
            min = this_min;
        }
    }
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(best_l[i]);
    *neg_min = -min;
    return scale;
}

float fit_symmetric_scale(const float* x, int n, int nmax) {
    const float smax = largest_magnitude(x, n);
    if (std::fabs(smax) < kGroupMaxEps) return 0.0f;
    auto sums = [&](float iscale, float* sumlx, float* suml2) {
        *sumlx = *suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            *sumlx += w * x[i] * l;
            *suml2 += w * l * l;
        }
    };
    float sumlx, suml2;
    sums(-nmax / smax, &sumlx, &suml2);
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        sums(-(nmax + 0.1f * is) / smax, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

namespace {

// Squared error of one sub-block of 32 at levels (sc, m) of d / dmin, q re-chosen for them.
float level_error(const float* x, float d, float dmin, int sc, int m) {
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    const float inv = dl != 0.0f ? 1.0f / dl : 0.0f;
    float e = 0.0f;
    for (int i = 0; i < 32; ++i) {
        const float q = round_clamped((x[i] + ml) * inv, 0.0f, 15.0f);
        const float diff = dl * q - ml - x[i];
        e += diff * diff;
    }
    return e;
}

}  // namespace

Q4KBlock quantize_q4k(const float* x, Q4KFit fit, bool* nonfinite) {
    constexpr int nmax = 15;
    Q4KBlock b;
    if (!all_finite(x, 256)) {
        if (nonfinite) *nonfinite = true;
        return b;
    }
    // ggml weighs a value in the fit by its size over the sub-block's RMS (quantize_row_q4_K_ref:
    // errors on large weights cost more); ours fits the plain squared error.
    float scales[8], mins[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        const float* xs = x + 32 * j;
        float sum_x2 = 0;
        for (int i = 0; i < 32; ++i) sum_x2 += xs[i] * xs[i];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int i = 0; i < 32; ++i) w[i] = fit == Q4KFit::GGML ? av_x + std::fabs(xs[i]) : 1.0f;
        scales[j] = fit_scale_and_min(xs, w, 32, nmax, -1.0f, 0.1f, 20, b.q + 32 * j, &mins[j]);
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; ++j) {  // levels are stored as uint8 before the clamp to 63, as ggml does
        b.sc[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
        b.m[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    }
    b.d_bits = f32_to_f16(max_scale / 63.0f);
    b.dmin_bits = f32_to_f16(max_min / 63.0f);
    b.d = f16_to_f32(b.d_bits);
    b.dmin = f16_to_f32(b.dmin_bits);
    if (!std::isfinite(b.d) || !std::isfinite(b.dmin)) {  // beyond f16's range
        if (nonfinite) *nonfinite = true;
        return Q4KBlock();
    }
    for (int j = 0; j < 8; ++j) {
        const float* xs = x + 32 * j;
        if (fit == Q4KFit::ENGINE) {
            // The levels were rounded from the unrounded fit; the 5 x 5 levels around them, each with its
            // q re-chosen, often fit better once d and dmin are what they are (demo model, docs/perf.md:
            // mean KLD of int4 0.00691 -> 0.00649 with the plain fit; +-1 0.0067, +-3 no better than +-2).
            int best_sc = b.sc[j], best_m = b.m[j];
            float best = level_error(xs, b.d, b.dmin, best_sc, best_m);
            for (int sc = std::max(0, b.sc[j] - 2); sc <= std::min(63, b.sc[j] + 2); ++sc)
                for (int m = std::max(0, b.m[j] - 2); m <= std::min(63, b.m[j] + 2); ++m) {
                    const float e = level_error(xs, b.d, b.dmin, sc, m);
                    if (e < best) {
                        best = e;
                        best_sc = sc;
                        best_m = m;
                    }
                }
            b.sc[j] = static_cast<uint8_t>(best_sc);
            b.m[j] = static_cast<uint8_t>(best_m);
        }
        const float dl = b.d * b.sc[j];
        if (dl == 0.0f) continue;  // the sub-block dequantizes to -dmin * m whatever q holds
        const float ml = b.dmin * b.m[j];
        for (int i = 0; i < 32; ++i)
            b.q[32 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((xs[i] + ml) / dl), 0, nmax));
    }
    return b;
}

Q6KBlock quantize_q6k(const float* x, bool* nonfinite) {
    Q6KBlock b;
    if (!all_finite(x, 256)) {
        if (nonfinite) *nonfinite = true;
        return b;
    }
    float scales[8];
    float max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < 8; ++j) {
        scales[j] = fit_symmetric_scale(x + 32 * j, 32, 32);
        if (std::fabs(scales[j]) > max_abs_scale) {
            max_abs_scale = std::fabs(scales[j]);
            max_scale = scales[j];
        }
    }
    if (max_abs_scale < kGroupMaxEps) return b;
    // The largest sub-block scale is level -128 (its sign free), the others in proportion.
    const float iscale = -128.0f / max_scale;
    b.d_bits = f32_to_f16(1 / iscale);
    b.d = f16_to_f32(b.d_bits);
    if (!std::isfinite(b.d)) {
        if (nonfinite) *nonfinite = true;
        return Q6KBlock();
    }
    for (int j = 0; j < 8; ++j) {
        b.sc[j] = static_cast<int8_t>(std::clamp(nearest_int(iscale * scales[j]), -128, 127));
        const float dl = b.d * b.sc[j];
        for (int i = 0; i < 32; ++i)
            b.q[32 * j + i] =
                static_cast<int8_t>(dl != 0.0f ? std::clamp(nearest_int(x[32 * j + i] / dl), -32, 31) : 0);
    }
    return b;
}

}  // namespace gdn::kquant
