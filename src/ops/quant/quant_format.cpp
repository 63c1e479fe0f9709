#include "ops/quant/quant_format.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/log.h"
#include "core/thread_pool.h"
#include "ops/linear.h"

namespace gdn::quant {

namespace {

// Where (column c, k = kg within the group) lives inside a block: quant_format.h's layout, in one place.
inline int64_t q8_byte(int64_t c, int64_t kg) { return ((kg / 4) * kCols + c) * 4 + kg % 4; }
inline int64_t q4_byte(int64_t c, int64_t kg) { return ((kg / 8) * kCols + c) * 4 + kg % 4; }
inline bool q4_high(int64_t kg) { return (kg % 8) / 4 != 0; }

// f16 round trip of a scale: the value the kernels multiply by.
inline float f16_round(float s) { return f16_to_f32(f32_to_f16(s)); }

// Round to nearest even of v clamped to [lo, hi], without a libm call (so the loops vectorise on the
// baseline ISA): adding 1.5 * 2^23 leaves the integer part in the mantissa under the default rounding.
inline float round_clamped(float v, float lo, float hi) {
    v = std::min(std::max(v, lo), hi);
    return (v + 12582912.0f) - 12582912.0f;
}

// Squared error of w ~= d * q with q = round(w / d) clamped to [lo, hi] over one zero-padded group of
// 32 (padding adds nothing); q written out, and sum w q, sum q q for a least-squares refit. Eight
// partial sums, so the loops vectorise.
float group_error(const float* w, float d, float lo, float hi, int8_t* q, float* wq = nullptr, float* qq = nullptr) {
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0}, pwq[8] = {0, 0, 0, 0, 0, 0, 0, 0}, pqq[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    float r[kQuantGroup];
    for (int i = 0; i < kQuantGroup; ++i) r[i] = round_clamped(w[i] * inv, lo, hi);
    for (int i = 0; i < kQuantGroup; i += 8)
        for (int j = 0; j < 8; ++j) {
            const float e = w[i + j] - d * r[i + j];
            part[j] += e * e;
            pwq[j] += w[i + j] * r[i + j];
            pqq[j] += r[i + j] * r[i + j];
        }
    for (int i = 0; i < kQuantGroup; ++i) q[i] = static_cast<int8_t>(r[i]);
    auto sum8 = [](const float* p) { return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7])); };
    if (wq) *wq = sum8(pwq);
    if (qq) *qq = sum8(pqq);
    return sum8(part);
}

}  // namespace

uint16_t quantize_group(WeightFormat f, const float* w_in, int n, int8_t* q, bool* nonfinite) {
    float w[kQuantGroup] = {};
    std::copy(w_in, w_in + n, w);
    float amax = 0.0f, smax = 0.0f;  // largest magnitude, and that value with its sign
    bool finite = true;
    for (int i = 0; i < n; ++i) {
        finite = finite && std::isfinite(w[i]);
        if (std::abs(w[i]) > amax) {
            amax = std::abs(w[i]);
            smax = w[i];
        }
    }
    int8_t full[kQuantGroup];
    if (amax == 0.0f || !finite) {  // a non-finite group becomes zeros and is reported to the caller
        if (!finite && nonfinite) *nonfinite = true;
        std::fill(q, q + n, 0);
        return 0;
    }
    if (f == WeightFormat::Q8) {
        const float d = f16_round(amax / 127.0f);
        group_error(w, d, -127.0f, 127.0f, full);
        std::copy(full, full + n, q);
        return f32_to_f16(d);
    }
    GDN_CHECK(f == WeightFormat::Q4, "quantize_group: not a quantized format");
    // int4 levels are [-8, 7]: the largest magnitude may map to -8 (a scale of -smax / 8 puts it there)
    // or to +-7, or between when clipping a lone outlier lowers the error of the other 31. Candidates:
    // -smax / t for t in {7, 7.75, 8.5} (both signs of the level set), each refined once by least
    // squares on its q (d = sum w q / sum q q), keeping the lowest error. Demo-model mean KLD against
    // f32 (int8 lm_head): this set 0.01210; t in [6.5, 9] by 1/2 0.01214, by 1/4 0.01219 (2x and 4x the
    // load time); {7, 8} 0.01398; {7.5} alone 0.01493.
    int8_t cand[kQuantGroup];
    float best = -1.0f, best_d = 0.0f;
    auto consider = [&](float d, float e) {
        if (best < 0.0f || e < best) {
            best = e;
            best_d = d;
            std::memcpy(full, cand, kQuantGroup);
        }
    };
    for (const float t : {7.0f, 7.75f, 8.5f}) {
        for (float sign : {1.0f, -1.0f}) {
            const float d0 = f16_round(sign * -smax / t);
            if (d0 == 0.0f || !std::isfinite(d0)) continue;
            float wq = 0.0f, qq = 0.0f;
            consider(d0, group_error(w, d0, -8.0f, 7.0f, cand, &wq, &qq));
            const float d1 = qq > 0.0f ? f16_round(wq / qq) : 0.0f;
            if (d1 != 0.0f && std::isfinite(d1)) consider(d1, group_error(w, d1, -8.0f, 7.0f, cand));
        }
    }
    std::copy(full, full + n, q);
    return f32_to_f16(best_d);
}

void set_quantized_shape(WeightFormat f, int64_t N, int64_t K, PackedWeight* w) {
    w->format = f;
    w->N = N;
    w->K = K;
    w->K2 = (K + 1) / 2;
    w->n_panels = (N + kCols - 1) / kCols;
    w->n_groups = n_groups(K);
}

void pack_quantized(WeightFormat f, int64_t N, int64_t K, const std::function<void(int64_t n, float* out)>& row,
                    PackedWeight* w, const std::function<void(int64_t n0, int64_t n1)>& rows_done) {
    GDN_CHECK(is_quantized(f), "pack_quantized: %s is not a quantized format", weight_format_name(f));
    set_quantized_shape(f, N, K, w);
    // Padding columns and k are q = 0 with scale 0: zero bytes for int8, and for int4 the offset level 8
    // in every nibble (0x88), not a zero nibble (q = -8).
    w->data.allocate(w->bytes(), true);
    const int64_t so = scales_offset(f);
    if (f == WeightFormat::Q4)
        for (int64_t b = 0; b < w->n_panels * w->n_groups; ++b) std::memset(w->data.as<uint8_t>() + b * block_bytes(f), 0x88, so);
    std::atomic<int64_t> nonfinite{0};
    // Rows in parallel: a row's values and scales are bytes no other row writes (a Q4 byte holds two
    // k of one column).
    global_pool().parallel_for(N, [&](int64_t n0, int64_t n1) {
        std::vector<float> src(w->n_groups * kQuantGroup, 0.0f);
        int8_t q[kQuantGroup];
        for (int64_t n = n0; n < n1; ++n) {
            if (rows_done && n > n0 && (n - n0) % 256 == 0) rows_done(n - 256, n);
            row(n, src.data());
            const int64_t p = n / kCols, c = n % kCols;
            for (int64_t g = 0; g < w->n_groups; ++g) {
                const int len = static_cast<int>(std::min<int64_t>(kQuantGroup, K - g * kQuantGroup));
                std::fill(q, q + kQuantGroup, 0);
                bool bad = false;
                const uint16_t s = quantize_group(f, src.data() + g * kQuantGroup, len, q, &bad);
                if (bad) nonfinite.fetch_add(1, std::memory_order_relaxed);
                uint8_t* blk = const_cast<uint8_t*>(w->quant_block(p, g));
                std::memcpy(blk + so + c * 2, &s, 2);
                for (int k = 0; k < kQuantGroup; ++k) {
                    if (f == WeightFormat::Q8) {
                        blk[q8_byte(c, k)] = static_cast<uint8_t>(q[k]);
                    } else {
                        uint8_t& b = blk[q4_byte(c, k)];
                        const uint8_t nib = static_cast<uint8_t>(q[k] + 8);
                        b = q4_high(k) ? static_cast<uint8_t>((b & 0x0F) | (nib << 4)) : static_cast<uint8_t>((b & 0xF0) | nib);
                    }
                }
            }
        }
        if (rows_done && n1 > n0) rows_done(n0 + (n1 - n0 - 1) / 256 * 256, n1);
    });
    w->nonfinite_groups = nonfinite.load();
}

int q_value(const PackedWeight& w, int64_t n, int64_t k) {
    if (n >= w.N || k >= w.K) return 0;
    const int64_t p = n / kCols, c = n % kCols, g = k / kQuantGroup, kg = k % kQuantGroup;
    const uint8_t* blk = w.quant_block(p, g);
    if (w.format == WeightFormat::Q8) return static_cast<int8_t>(blk[q8_byte(c, kg)]);
    const uint8_t b = blk[q4_byte(c, kg)];
    return (q4_high(kg) ? (b >> 4) : (b & 0x0F)) - 8;
}

float q_scale(const PackedWeight& w, int64_t n, int64_t g) {
    if (n >= w.N) return 0.0f;
    const uint8_t* blk = w.quant_block(n / kCols, g) + scales_offset(w.format);
    uint16_t s;
    std::memcpy(&s, blk + (n % kCols) * 2, 2);
    return f16_to_f32(s);
}

void dequantize_row(const PackedWeight& w, int64_t n, float* out) {
    for (int64_t g = 0; g < w.n_groups; ++g) {
        const float s = q_scale(w, n, g);
        for (int64_t k = g * kQuantGroup; k < std::min<int64_t>(w.K, (g + 1) * kQuantGroup); ++k)
            out[k] = s * static_cast<float>(q_value(w, n, k));
    }
}

void QuantizedRows::resize(int64_t m, int64_t k) {
    M = m;
    K = k;
    G = n_groups(K);
    Kp = G * kQuantGroup;
    if (xq.size() < static_cast<size_t>(M * Kp)) xq.resize(M * Kp);
    if (xs.size() < static_cast<size_t>(M * G)) {
        xs.resize(M * G);
        xsum.resize(M * G);
    }
}

void quantize_activations(const float* x, int64_t M, int64_t K, QuantizedRows* out) {
    out->resize(M, K);
    for (int64_t m = 0; m < M; ++m) quantize_activation_row(x + m * K, out, m);
}

void quantize_activation_row(const float* xr, QuantizedRows* out, int64_t m) {
    const int64_t K = out->K;
    int8_t* q = out->xq.data() + m * out->Kp;
    for (int64_t g = 0; g < out->G; ++g) {
        const int64_t k0 = g * kQuantGroup, len = std::min<int64_t>(kQuantGroup, K - k0);
        float amax = 0.0f;
        for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::abs(xr[k0 + i]));
        const float s = amax / 127.0f;
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int64_t i = 0; i < kQuantGroup; ++i) {
            // NaN (an inf activation times inv = 0) maps to INT_MIN as vcvtps2dq does, so -127 after the
            // clamp; |x * inv| <= 127 otherwise.
            const float r = i < len ? xr[k0 + i] * inv : 0.0f;
            const int v = std::isnan(r) ? INT32_MIN : static_cast<int>(std::nearbyint(r));
            const int c = std::clamp(v, -127, 127);
            q[k0 + i] = static_cast<int8_t>(c);
            sum += c;
        }
        out->xs[m * out->G + g] = s;
        out->xsum[m * out->G + g] = sum;
    }
}

}  // namespace gdn::quant
