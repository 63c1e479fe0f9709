// Reference ops against hand-computed values and independent float64 loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "ops/ref/ref_ops.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

TEST(RefOps, LinearAllWeightDtypesAndThreadCounts) {
    const int64_t M = 3, K = 37, N = 11;
    auto x = random_vec(M * K, 1);
    auto wf = random_vec(N * K, 2);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
        std::vector<uint8_t> wb(N * K * dtype_size(dt));
        convert_from_f32(wf.data(), dt, wb.data(), N * K);
        std::vector<float> wr(N * K);
        convert_to_f32(dt, wb.data(), wr.data(), N * K);  // the exact weight values the op sees
        TensorView W = TensorView::contiguous(wb.data(), dt, {N, K});
        std::vector<float> y1(M * N), y2(M * N);
        set_global_threads(1);
        ref::linear(ctx(), x.data(), M, W, y1.data());
        set_global_threads(3);
        ref::linear(ctx(), x.data(), M, W, y2.data());
        EXPECT_EQ(y1, y2) << "thread count changed the result";
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
                double want = 0;
                for (int64_t k = 0; k < K; ++k) want += double(x[m * K + k]) * wr[n * K + k];
                EXPECT_NEAR(y1[m * N + n], want, 1e-5) << dtype_name(dt);
            }
    }
    set_global_threads(default_thread_count());
}

TEST(RefOps, RmsNormAndGatedNorm) {
    const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0.5f}, z[4] = {0, 1, -1, 10};
    float y[4];
    ref::rms_norm(x, 1, 4, w, 0.0f, y);
    const float inv = 1.0f / std::sqrt(7.5f);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] * inv * w[i], 1e-6);
    ref::gated_rms_norm(x, z, 1, 4, w, 0.0f, y, false);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] * inv * w[i] * z[i] / (1 + std::exp(-z[i])), 1e-6);
}

TEST(RefOps, L2NormAndGating) {
    float x[3] = {3, 4, 0};
    ref::l2_norm(x, 1, 3, 0.0f, 2.0f);
    EXPECT_NEAR(x[0], 1.2f, 1e-6);
    EXPECT_NEAR(x[1], 1.6f, 1e-6);
    const float a[2] = {0.5f, 30.0f}, b[2] = {0.0f, 2.0f}, negA[2] = {-2.0f, -0.5f}, dt[2] = {0.1f, -5.0f};
    float g[2], beta[2];
    ref::gdn_gating(a, b, 1, 2, negA, dt, g, beta);
    EXPECT_NEAR(g[0], -2.0f * std::log1p(std::exp(0.6f)), 1e-6);
    EXPECT_NEAR(g[1], -0.5f * 25.0f, 1e-5);  // softplus threshold: x > 20 returns x
    EXPECT_NEAR(beta[0], 0.5f, 1e-7);
    EXPECT_NEAR(beta[1], 1.0f / (1.0f + std::exp(-2.0f)), 1e-7);
}

TEST(RefOps, RopeRotatesHalfPairsOfTheRotaryDims) {
    const int64_t D = 8, rot = 4;
    auto x = random_vec(2 * D, 3);
    auto y = x;
    const int64_t pos[2] = {0, 5};
    ref::rope_neox(y.data(), 2, 1, D, rot, pos, 100.0f, false);
    for (int64_t i = 0; i < D; ++i) EXPECT_FLOAT_EQ(y[i], x[i]);  // position 0: identity
    for (int64_t j = 0; j < rot / 2; ++j) {
        const double f = std::pow(100.0, -2.0 * j / rot), ang = 5 * f;
        const double a = x[D + j], b = x[D + j + rot / 2];
        EXPECT_NEAR(y[D + j], a * std::cos(ang) - b * std::sin(ang), 1e-5);
        EXPECT_NEAR(y[D + j + rot / 2], b * std::cos(ang) + a * std::sin(ang), 1e-5);
    }
    for (int64_t i = rot; i < D; ++i) EXPECT_FLOAT_EQ(y[D + i], x[D + i]);  // pass-through dims
}

TEST(RefOps, AttentionCausalGqaGated) {
    const int64_t T = 3, n_past = 2, Hq = 4, Hkv = 2, D = 5, Tk = n_past + T;
    auto q = random_vec(T * Hq * D, 4), gate = random_vec(T * Hq * D, 5);
    auto k = random_vec(Tk * Hkv * D, 6), v = random_vec(Tk * Hkv * D, 7);
    std::vector<float> out(T * Hq * D);
    ref::attention(q.data(), gate.data(), k.data(), v.data(), T, n_past, Hq, Hkv, D, out.data());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < Hq; ++h) {
            const int64_t kh = h / (Hq / Hkv);
            std::vector<double> s;
            for (int64_t j = 0; j <= n_past + t; ++j) {
                double d = 0;
                for (int64_t i = 0; i < D; ++i)
                    d += double(q[(t * Hq + h) * D + i]) * k[(j * Hkv + kh) * D + i];
                s.push_back(d / std::sqrt(double(D)));
            }
            double mx = *std::max_element(s.begin(), s.end()), sum = 0;
            for (auto& e : s) sum += (e = std::exp(e - mx));
            for (int64_t i = 0; i < D; ++i) {
                double o = 0;
                for (size_t j = 0; j < s.size(); ++j) o += s[j] / sum * v[(j * Hkv + kh) * D + i];
                o /= 1 + std::exp(-double(gate[(t * Hq + h) * D + i]));
                EXPECT_NEAR(out[(t * Hq + h) * D + i], o, 1e-5);
            }
        }
}

TEST(RefOps, CausalConvStateSplitEqualsWhole) {
    const int64_t T = 7, C = 5, K = 4;
    auto x = random_vec(T * C, 8), w = random_vec(C * K, 9);
    std::vector<float> st(3 * C, 0.0f), y(T * C);
    ref::causal_conv1d(x.data(), T, C, w.data(), K, st.data(), y.data(), true);
    // Direct formula with zero left padding.
    for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) {
            double s = 0;
            for (int64_t j = 0; j < K; ++j) {
                int64_t src = t - (K - 1) + j;
                if (src >= 0) s += double(w[c * K + j]) * x[src * C + c];
            }
            EXPECT_NEAR(y[t * C + c], s / (1 + std::exp(-s)), 1e-5);
        }
    std::vector<float> st2(3 * C, 0.0f), y2(T * C);
    ref::causal_conv1d(x.data(), 2, C, w.data(), K, st2.data(), y2.data(), true);
    ref::causal_conv1d(x.data() + 2 * C, 1, C, w.data(), K, st2.data(), y2.data() + 2 * C, true);
    ref::causal_conv1d(x.data() + 3 * C, 4, C, w.data(), K, st2.data(), y2.data() + 3 * C, true);
    EXPECT_EQ(y, y2);
    EXPECT_EQ(st, st2);
}

TEST(RefOps, MoeRouteSoftmaxTopkRenormalise) {
    const float logits[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.0f};
    int32_t idx[2];
    float w[2];
    ref::MoeRouteScratch scratch;
    ref::moe_route(logits, 1, 5, 2, true, idx, w, scratch);
    EXPECT_EQ(idx[0], 1);  // tie between 1 and 3: lower index first
    EXPECT_EQ(idx[1], 3);
    EXPECT_NEAR(w[0], 0.5f, 1e-6);
    EXPECT_NEAR(w[1], 0.5f, 1e-6);
    ref::moe_route(logits, 1, 5, 2, false, idx, w, scratch);
    double z = 0;
    for (float l : logits) z += std::exp(double(l));
    EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-6);  // softmax over ALL experts when not renormalised
}

// The selection against a stable sort of all experts by descending probability (ties: lower index
// first), on logits from a few levels so that ties are common, for k from 1 to E.
TEST(RefOps, MoeRouteTopkIsTheStableSortsPrefix) {
    const int64_t T = 64, E = 12;
    ref::MoeRouteScratch scratch;
    auto r = random_vec(T * E, 5, 0.0f, 4.0f);
    std::vector<float> logits(T * E);
    for (int64_t i = 0; i < T * E; ++i) logits[i] = std::floor(r[i]);  // 4 levels
    for (int64_t k = 1; k <= E; ++k) {
        std::vector<int32_t> idx(T * k);
        std::vector<float> w(T * k);
        ref::moe_route(logits.data(), T, E, k, false, idx.data(), w.data(), scratch);
        for (int64_t t = 0; t < T; ++t) {
            const float* l = logits.data() + t * E;
            std::vector<int32_t> order(E);
            for (int32_t e = 0; e < E; ++e) order[e] = e;
            std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
            for (int64_t s = 0; s < k; ++s)
                ASSERT_EQ(idx[t * k + s], order[s]) << "token " << t << " k " << k << " rank " << s;
        }
    }
}
