// The super-block fits that evaluate their candidates side by side (ops/quant/kquant.cpp) against
// their definitions written one candidate after another (kquant_reference.cpp): bitwise equal, on
// value shapes that reach every branch (a minimum clamped to 0, a degenerate grid, all-equal values,
// levels at 0 and 63).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ops/quant/kquant.h"

namespace gdn::kquant {
namespace {

uint32_t bits(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
}

// Sub-blocks of n values: gaussian, uniform, one-signed, with an outlier, on a few levels only,
// constant, zero, and at tiny and large magnitudes.
std::vector<std::vector<float>> value_shapes(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::vector<std::vector<float>> out;
    for (int rep = 0; rep < 40; ++rep)
        for (int kind = 0; kind < 9; ++kind) {
            std::vector<float> x(n);
            const float scale = kind == 7 ? 1e-6f : kind == 8 ? 300.0f : 0.02f;
            for (int i = 0; i < n; ++i) {
                switch (kind) {
                    case 0:
                    case 7:
                    case 8:
                        x[i] = scale * gauss(rng);
                        break;
                    case 1:
                        x[i] = uni(rng);
                        break;
                    case 2:
                        x[i] = std::fabs(uni(rng)) + 0.5f;
                        break;  // all positive: the minimum clamps
                    case 3:
                        x[i] = -std::fabs(gauss(rng));
                        break;
                    case 4:
                        x[i] = i == rep % n ? 40.0f * uni(rng) : 0.01f * gauss(rng);
                        break;
                    case 5:
                        x[i] = 0.25f * static_cast<float>(static_cast<int>(4 * uni(rng)));
                        break;
                    case 6:
                        x[i] = rep % 2 ? 0.0f : 0.3f;
                        break;  // constant
                }
            }
            out.push_back(x);
        }
    return out;
}

TEST(KQuant, FitsAreBitwiseTheirDefinitions) {
    int checked = 0;
    for (const auto& x : value_shapes(32, 1)) {
        // fit_scale_and_min with Q4_K's grid arguments, plain and |x|-weighted (ggml's) weights.
        for (bool weighted : {false, true}) {
            float w[32], sum_x2 = 0;
            for (float v : x) sum_x2 += v * v;
            for (int i = 0; i < 32; ++i) w[i] = weighted ? std::sqrt(sum_x2 / 32) + std::fabs(x[i]) : 1.0f;
            uint8_t L[32], L_ref[32];
            float mn = 0, mn_ref = 0;
            const float s = fit_scale_and_min(x.data(), w, 32, 15, -1.0f, 0.1f, 20, L, &mn);
            const float s_ref = ref::fit_scale_and_min(x.data(), w, 32, 15, -1.0f, 0.1f, 20, L_ref, &mn_ref);
            ASSERT_EQ(bits(s), bits(s_ref));
            ASSERT_EQ(bits(mn), bits(mn_ref));
            ASSERT_EQ(0, std::memcmp(L, L_ref, 32));
        }
        ASSERT_EQ(bits(fit_symmetric_scale(x.data(), 32, 32)),
                  bits(ref::fit_symmetric_scale(x.data(), 32, 32)));
        ASSERT_EQ(bits(fit_symmetric_scale(x.data(), 16, 32)),
                  bits(ref::fit_symmetric_scale(x.data(), 16, 32)));
        ++checked;
    }
    // The level re-choice: levels anywhere in [0, 63] (the edges clip the +-2 window), d and dmin from
    // a block's fit and perturbed.
    std::mt19937 rng(2);
    for (const auto& x : value_shapes(32, 3)) {
        for (int t = 0; t < 4; ++t) {
            const float d = std::ldexp(1.0f + (rng() % 64) / 64.0f, -10 + static_cast<int>(rng() % 8));
            const float dmin =
                t == 3 ? 0.0f : std::ldexp(1.0f + (rng() % 64) / 64.0f, -10 + static_cast<int>(rng() % 8));
            const uint8_t sc0 = t == 0 ? 0 : t == 1 ? 63 : static_cast<uint8_t>(rng() % 64);
            const uint8_t m0 = t == 0 ? 63 : t == 1 ? 0 : static_cast<uint8_t>(rng() % 64);
            uint8_t sc = sc0, m = m0, sc_ref = sc0, m_ref = m0;
            rechoose_levels(x.data(), d, dmin, &sc, &m);
            ref::rechoose_levels(x.data(), d, dmin, &sc_ref, &m_ref);
            ASSERT_EQ(sc, sc_ref);
            ASSERT_EQ(m, m_ref);
        }
    }
    EXPECT_EQ(checked, 9 * 40);
}

// The equality above must not hold only because the search never moves: on fitted blocks the
// re-choice moves some levels away from the rounded ones.
TEST(KQuant, LevelReChoiceMovesSomeLevels) {
    int moved = 0;
    for (const auto& x : value_shapes(256, 5)) {
        const Q4KBlock b = quantize_q4k(x.data(), Q4KFit::GGML);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc = b.sc[j], m = b.m[j];
            rechoose_levels(x.data() + 32 * j, b.d, b.dmin, &sc, &m);
            moved += sc != b.sc[j] || m != b.m[j];
        }
    }
    EXPECT_GT(moved, 0);
}

}  // namespace
}  // namespace gdn::kquant
