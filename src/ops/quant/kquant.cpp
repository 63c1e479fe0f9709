#include "ops/quant/kquant.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/dtype.h"
#include "core/log.h"

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

FitRange fit_range(const float* x, const float* w, int n) {
    FitRange r{x[0], x[0], w[0], w[0] * x[0]};
    for (int i = 1; i < n; ++i) {
        r.lo = std::min(r.lo, x[i]);
        r.hi = std::max(r.hi, x[i]);
        r.sum_w += w[i];
        r.sum_x += w[i] * x[i];
    }
    if (r.lo > 0) r.lo = 0;
    return r;
}

// The searches below evaluate every candidate (grid, level pair) at once: lane g of each array holds
// candidate g's running sums, each accumulated over i in ascending order with the reference's
// expressions (kquant_reference.cpp), so the results are bitwise the reference's while the candidates'
// chains run side by side instead of one after another (the reference is bound by the latency of its
// one running sum). The selection after the sums keeps the reference's order and comparisons.
// Each is also compiled for AVX2 (8 lanes instead of SSE2's 4), picked at load by the CPU; "avx2"
// alone enables no FMA, so no product is contracted and every clone gives the same bits.
#define GDN_FIT_CLONES __attribute__((target_clones("avx2", "default")))

GDN_FIT_CLONES float fit_scale_and_min(const float* x, const float* w, int n, int nmax, float rmin,
                                       float rdelta, int nstep, uint8_t* L, float* neg_min) {
    GDN_CHECK(nstep + 1 <= kMaxGrids, "fit_scale_and_min: at most kMaxGrids grids");
    const FitRange r = fit_range(x, w, n);
    if (r.flat(n, L, neg_min)) return 0.0f;
    const float lo = r.lo, hi = r.hi, sum_w = r.sum_w, sum_x = r.sum_x;
    const float fmax = static_cast<float>(nmax);
    const float iscale0 = nmax / (hi - lo);
    float scale = 1 / iscale0, min = lo;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const float l = round_clamped(iscale0 * (x[i] - lo), 0.0f, fmax);
        const float diff = scale * l + lo - x[i];
        best_error += w[i] * diff * diff;
    }
    const int grids = nstep + 1;
    float iscale[kMaxGrids], sum_l[kMaxGrids] = {}, sum_l2[kMaxGrids] = {}, sum_xl[kMaxGrids] = {};
    for (int g = 0; g < kMaxGrids; ++g) iscale[g] = (rmin + rdelta * (g < grids ? g : 0) + nmax) / (hi - lo);
    for (int i = 0; i < n; ++i) {
        const float xi = x[i], wi = w[i], dx = x[i] - lo;
        for (int g = 0; g < kMaxGrids; ++g) {
            const float l = round_clamped(iscale[g] * dx, 0.0f, fmax);
            sum_l[g] += wi * l;
            sum_l2[g] += wi * l * l;
            sum_xl[g] += wi * l * xi;
        }
    }
    float this_scale[kMaxGrids], this_min[kMaxGrids], error[kMaxGrids] = {};
    bool valid[kMaxGrids];
    for (int g = 0; g < kMaxGrids; ++g) {
        const float D = sum_w * sum_l2[g] - sum_l[g] * sum_l[g];
        valid[g] = g < grids && D > 0;
        this_scale[g] = valid[g] ? (sum_w * sum_xl[g] - sum_x * sum_l[g]) / D : 0.0f;
        this_min[g] = valid[g] ? (sum_l2[g] * sum_x - sum_l[g] * sum_xl[g]) / D : 0.0f;
        if (this_min[g] > 0) {
            this_min[g] = 0;
            this_scale[g] = sum_xl[g] / sum_l2[g];
        }
    }
    for (int i = 0; i < n; ++i) {
        const float xi = x[i], wi = w[i], dx = x[i] - lo;
        for (int g = 0; g < kMaxGrids; ++g) {
            const float l = round_clamped(iscale[g] * dx, 0.0f, fmax);
            const float diff = this_scale[g] * l + this_min[g] - xi;
            error[g] += wi * diff * diff;
        }
    }
    int best = -1;
    for (int g = 0; g < grids; ++g)
        if (valid[g] && error[g] < best_error) {
            best = g;
            best_error = error[g];
            scale = this_scale[g];
            min = this_min[g];
        }
    const float chosen = best < 0 ? iscale0 : iscale[best];
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(round_clamped(chosen * (x[i] - lo), 0.0f, fmax));
    *neg_min = -min;
    return scale;
}

GDN_FIT_CLONES float fit_symmetric_scale(const float* x, int n, int nmax) {
    const float smax = largest_magnitude(x, n);
    if (std::fabs(smax) < kGroupMaxEps) return 0.0f;
    // Lane 0: the grid with the largest magnitude at -nmax; lanes 1..18: is = -9..9 without 0; the rest
    // pad to whole vectors (a lane left over would run as one scalar chain).
    constexpr int kGrids = 19, kLanes = 24;
    float iscale[kLanes];
    iscale[0] = -nmax / smax;
    for (int g = 1; g < kLanes; ++g) {
        const int is = g >= kGrids ? 0 : g <= 9 ? g - 10 : g - 9;
        iscale[g] = is == 0 ? iscale[0] : -(nmax + 0.1f * is) / smax;
    }
    float sumlx[kLanes] = {}, suml2[kLanes] = {};
    for (int i = 0; i < n; ++i) {
        const float xi = x[i], wi = x[i] * x[i];
        for (int g = 0; g < kLanes; ++g) {
            const int l = std::clamp(nearest_int(iscale[g] * xi), -nmax, nmax - 1);
            sumlx[g] += wi * xi * l;
            suml2[g] += wi * l * l;
        }
    }
    float scale = suml2[0] != 0 ? sumlx[0] / suml2[0] : 0.0f;
    float best = scale * sumlx[0];
    for (int g = 1; g < kGrids; ++g)
        if (suml2[g] > 0 && sumlx[g] * sumlx[g] > best * suml2[g]) {
            scale = sumlx[g] / suml2[g];
            best = scale * sumlx[g];
        }
    return scale;
}

GDN_FIT_CLONES void rechoose_levels(const float* x, float d, float dmin, uint8_t* sc, uint8_t* m) {
    // Lane c = 5 a + b: levels (sc - 2 + a, m - 2 + b), out-of-range ones clamped (and skipped below);
    // lanes 25..31 pad to whole vectors.
    constexpr int kLanes = 32;
    const int sc0 = *sc, m0 = *m;
    float dl[kLanes], ml[kLanes], inv[kLanes], e[kLanes] = {};
    for (int c = 0; c < kLanes; ++c) {
        const int a = c < 25 ? c / 5 : 2, b = c < 25 ? c % 5 : 2;
        const int s = std::clamp(sc0 - 2 + a, 0, 63), t = std::clamp(m0 - 2 + b, 0, 63);
        dl[c] = d * static_cast<float>(s);
        ml[c] = dmin * static_cast<float>(t);
        inv[c] = dl[c] != 0.0f ? 1.0f / dl[c] : 0.0f;
    }
    for (int i = 0; i < 32; ++i) {
        const float xi = x[i];
        for (int c = 0; c < kLanes; ++c) {
            const float q = round_clamped((xi + ml[c]) * inv[c], 0.0f, 15.0f);
            const float diff = dl[c] * q - ml[c] - xi;
            e[c] += diff * diff;
        }
    }
    int best_sc = sc0, best_m = m0;
    float best = e[2 * 5 + 2];  // the levels as they were
    for (int s = std::max(0, sc0 - 2); s <= std::min(63, sc0 + 2); ++s)
        for (int t = std::max(0, m0 - 2); t <= std::min(63, m0 + 2); ++t) {
            const float et = e[(s - sc0 + 2) * 5 + (t - m0 + 2)];
            if (et < best) {
                best = et;
                best_sc = s;
                best_m = t;
            }
        }
    *sc = static_cast<uint8_t>(best_sc);
    *m = static_cast<uint8_t>(best_m);
}

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
            rechoose_levels(xs, b.d, b.dmin, &b.sc[j], &b.m[j]);
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
