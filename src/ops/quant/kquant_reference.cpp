// The fits' definitions, written as ggml writes them: one candidate after another, each a running sum
// over the values. kquant.cpp evaluates the candidates side by side with the same expressions in the
// same order per candidate; the test KQuant.FitsAreBitwiseTheirDefinitions holds them equal.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/quant/kquant.h"

namespace gdn::kquant::ref {

namespace {

constexpr float kGroupMaxEps = 1e-15f;

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

float fit_scale_and_min(const float* x, const float* w, int n, int nmax, float rmin, float rdelta, int nstep,
                        uint8_t* L, float* neg_min) {
    const FitRange r = fit_range(x, w, n);
    if (r.flat(n, L, neg_min)) return 0.0f;
    const float lo = r.lo, hi = r.hi, sum_w = r.sum_w, sum_x = r.sum_x;
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

void rechoose_levels(const float* x, float d, float dmin, uint8_t* sc, uint8_t* m) {
    int best_sc = *sc, best_m = *m;
    float best = level_error(x, d, dmin, best_sc, best_m);
    for (int s = std::max(0, *sc - 2); s <= std::min(63, *sc + 2); ++s)
        for (int t = std::max(0, *m - 2); t <= std::min(63, *m + 2); ++t) {
            const float e = level_error(x, d, dmin, s, t);
            if (e < best) {
                best = e;
                best_sc = s;
                best_m = t;
            }
        }
    *sc = static_cast<uint8_t>(best_sc);
    *m = static_cast<uint8_t>(best_m);
}

}  // namespace gdn::kquant::ref
