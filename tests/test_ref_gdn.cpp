// The two forms of the gated delta rule agree, and both agree with an independent float64 loop
// written directly from model_spec.md §4.5.4 in the HF [Dk, Dv] state convention.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "ops/ref/ref_ops.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

struct GdnInputs {
    int64_t T, Hk, Hv, Dk, Dv;
    std::vector<float> q, k, v, g, beta, state;  // state [Hv, Dk, Dv]
};

GdnInputs make_inputs(int64_t T, int64_t Hk, int64_t r, int64_t Dk, int64_t Dv, bool init_state,
                      uint32_t seed) {
    GdnInputs in;
    in.T = T, in.Hk = Hk, in.Hv = Hk * r, in.Dk = Dk, in.Dv = Dv;
    in.q = random_vec(T * Hk * Dk, seed + 1);
    in.k = random_vec(T * Hk * Dk, seed + 2);
    in.v = random_vec(T * in.Hv * Dv, seed + 3);
    ref::l2_norm(in.q.data(), T * Hk, Dk, 1e-6f, 1.0f / std::sqrt(float(Dk)));
    ref::l2_norm(in.k.data(), T * Hk, Dk, 1e-6f, 1.0f);
    // Log-decays as FLA's tests draw them: logsigmoid of a random value, some heads decaying fast.
    in.g = random_vec(T * in.Hv, seed + 4, -4.0f, 4.0f);
    for (auto& x : in.g) x = -std::log1p(std::exp(-x));
    in.beta = random_vec(T * in.Hv, seed + 5, 0.0f, 1.0f);
    in.state.assign(in.Hv * Dv * Dk, 0.0f);
    if (init_state) in.state = random_vec(in.Hv * Dv * Dk, seed + 6, -0.5f, 0.5f);
    return in;
}

// float64 oracle with S [Dk, Dv] per value head; value head h reads key head h / r.
void oracle(const GdnInputs& in, std::vector<double>* out, std::vector<double>* final_state) {
    const int64_t r = in.Hv / in.Hk;
    out->assign(in.T * in.Hv * in.Dv, 0.0);
    final_state->assign(in.Hv * in.Dv * in.Dk, 0.0);
    for (int64_t h = 0; h < in.Hv; ++h) {
        std::vector<double> S(in.Dk * in.Dv);
        for (int64_t i = 0; i < in.Dk; ++i)
            for (int64_t j = 0; j < in.Dv; ++j) S[i * in.Dv + j] = in.state[(h * in.Dk + i) * in.Dv + j];
        for (int64_t t = 0; t < in.T; ++t) {
            const float* q = &in.q[(t * in.Hk + h / r) * in.Dk];
            const float* k = &in.k[(t * in.Hk + h / r) * in.Dk];
            const float* v = &in.v[(t * in.Hv + h) * in.Dv];
            const double a = std::exp(double(in.g[t * in.Hv + h])), b = in.beta[t * in.Hv + h];
            for (auto& s : S) s *= a;
            for (int64_t j = 0; j < in.Dv; ++j) {
                double kv = 0;
                for (int64_t i = 0; i < in.Dk; ++i) kv += S[i * in.Dv + j] * k[i];
                const double d = b * (v[j] - kv);
                for (int64_t i = 0; i < in.Dk; ++i) S[i * in.Dv + j] += k[i] * d;
            }
            for (int64_t j = 0; j < in.Dv; ++j) {
                double o = 0;
                for (int64_t i = 0; i < in.Dk; ++i) o += S[i * in.Dv + j] * q[i];
                (*out)[(t * in.Hv + h) * in.Dv + j] = o;
            }
        }
        for (int64_t i = 0; i < in.Dk; ++i)
            for (int64_t j = 0; j < in.Dv; ++j)
                (*final_state)[(h * in.Dk + i) * in.Dv + j] = S[i * in.Dv + j];
    }
}

double max_err(const std::vector<float>& a, const std::vector<double>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
    return m;
}

struct GdnCase {
    int64_t T, Hk, r, Dk, Dv;
    bool init_state;
};
void PrintTo(const GdnCase& c, std::ostream* os) {
    *os << "T=" << c.T << " Hk=" << c.Hk << " r=" << c.r << " Dk=" << c.Dk << " Dv=" << c.Dv
        << (c.init_state ? " with initial state" : "");
}

class GdnForms : public ::testing::TestWithParam<GdnCase> {};

TEST_P(GdnForms, RecurrentAndChunkedMatchOracle) {
    const GdnCase c = GetParam();
    GdnInputs in = make_inputs(c.T, c.Hk, c.r, c.Dk, c.Dv, c.init_state, 1000 + uint32_t(c.T * 7 + c.r));
    std::vector<double> want_out, want_state;
    oracle(in, &want_out, &want_state);

    std::vector<float> out_rec(c.T * in.Hv * c.Dv), st_rec = in.state;
    ref::gated_delta_rule_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), c.T,
                                    c.Hk, in.Hv, c.Dk, c.Dv, st_rec.data(), out_rec.data());
    std::vector<float> out_chk(c.T * in.Hv * c.Dv), st_chk = in.state;
    ref::gated_delta_rule_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), c.T,
                                  c.Hk, in.Hv, c.Dk, c.Dv, st_chk.data(), out_chk.data());
    // Outputs are O(1); f32 accumulation over <= a few hundred steps stays far below 1e-4.
    EXPECT_LT(max_err(out_rec, want_out), 1e-4);
    EXPECT_LT(max_err(st_rec, want_state), 1e-4);
    EXPECT_LT(max_err(out_chk, want_out), 1e-4);
    EXPECT_LT(max_err(st_chk, want_state), 1e-4);
    EXPECT_LT(max_abs_diff(out_rec.data(), out_chk.data(), out_rec.size()), 1e-4f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GdnForms,
                         ::testing::Values(GdnCase{1, 2, 1, 16, 16, false}, GdnCase{1, 2, 2, 16, 16, true},
                                           GdnCase{63, 2, 1, 16, 8, false}, GdnCase{64, 1, 2, 16, 16, true},
                                           GdnCase{65, 2, 3, 12, 20, true}, GdnCase{150, 2, 2, 32, 32, false},
                                           GdnCase{150, 2, 2, 32, 32, true}, GdnCase{200, 1, 3, 16, 24, true},
                                           GdnCase{129, 2, 1, 64, 64, true}),
                         [](const auto& info) {
                             const GdnCase& c = info.param;
                             char name[96];
                             std::snprintf(name, sizeof name, "T%lld_Hk%lld_r%lld_Dk%lld_Dv%lld_%s",
                                           static_cast<long long>(c.T), static_cast<long long>(c.Hk),
                                           static_cast<long long>(c.r), static_cast<long long>(c.Dk),
                                           static_cast<long long>(c.Dv), c.init_state ? "state" : "zero");
                             return std::string(name);
                         });

// Running a sequence in pieces (state carried) equals running it at once, in both forms.
TEST(GdnForms, StateCarriesAcrossCalls) {
    GdnInputs in = make_inputs(150, 2, 2, 16, 16, true, 77);
    std::vector<float> out_once(150 * in.Hv * 16), st_once = in.state;
    ref::gated_delta_rule_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), 150, 2,
                                  in.Hv, 16, 16, st_once.data(), out_once.data());
    std::vector<float> out_split(out_once.size()), st = in.state;
    int64_t t0 = 0;
    for (int64_t len : {64, 1, 37, 48}) {
        auto q = &in.q[t0 * 2 * 16], k = &in.k[t0 * 2 * 16], v = &in.v[t0 * in.Hv * 16];
        auto g = &in.g[t0 * in.Hv], b = &in.beta[t0 * in.Hv];
        if (len % 2)
            ref::gated_delta_rule_recurrent(q, k, v, g, b, len, 2, in.Hv, 16, 16, st.data(),
                                            &out_split[t0 * in.Hv * 16]);
        else
            ref::gated_delta_rule_chunked(q, k, v, g, b, len, 2, in.Hv, 16, 16, st.data(),
                                          &out_split[t0 * in.Hv * 16]);
        t0 += len;
    }
    ASSERT_EQ(t0, 150);
    EXPECT_LT(max_abs_diff(out_once.data(), out_split.data(), out_once.size()), 1e-4f);
    EXPECT_LT(max_abs_diff(st_once.data(), st.data(), st.size()), 1e-4f);
}

}  // namespace
