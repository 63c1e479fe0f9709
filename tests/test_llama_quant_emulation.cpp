// The llama.cpp format emulation behind docs/perf.md's same-text quality table (bench/quant_emulate):
// each format's defining property, the error ordering of the formats, and the Q4_K_M tensor choice
// for the demo model's shape.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "../bench/llama_quant_emulation.h"
#include "core/dtype.h"
#include "ops/quant/kquant.h"

namespace gdn::llama_emul {
namespace {

float f16(float v) {
    return f16_to_f32(f32_to_f16(v));
}

std::vector<float> gaussian(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.02f);
    std::vector<float> x(n);
    for (float& v : x) v = d(rng);
    return x;
}

double rmse(GgmlType t, const std::vector<float>& x) {
    std::vector<float> y(x.size());
    round_trip(t, x.data(), static_cast<int64_t>(x.size()), y.data());
    double s = 0;
    for (size_t i = 0; i < x.size(); ++i) s += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    return std::sqrt(s / x.size());
}

TEST(LlamaQuantEmulation, Q8_0IsRoundedToTheBlockMaxOver127) {
    std::vector<float> x = gaussian(64, 1), y(64);
    round_trip(GgmlType::Q8_0, x.data(), 64, y.data());
    for (int b = 0; b < 2; ++b) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
        const float d = f16(amax / 127.0f);
        for (int i = 0; i < 32; ++i) {
            const float q = y[32 * b + i] / d;
            EXPECT_NEAR(q, std::round(q), 1e-3f);  // on the grid of f16(d)
            EXPECT_LE(std::fabs(q), 127.0f + 1e-3f);
            EXPECT_NEAR(y[32 * b + i], x[32 * b + i], 0.5f * amax / 127.0f * 1.01f);
        }
    }
}

TEST(LlamaQuantEmulation, Q4_0PutsTheLargestMagnitudeAtMinus8) {
    std::vector<float> x = gaussian(32, 2), y(32);
    round_trip(GgmlType::Q4_0, x.data(), 32, y.data());
    int imax = 0;
    for (int i = 1; i < 32; ++i)
        if (std::fabs(x[i]) > std::fabs(x[imax])) imax = i;
    const float d = f16(x[imax] / -8.0f);
    EXPECT_FLOAT_EQ(y[imax], -8.0f * d);
    for (int i = 0; i < 32; ++i) {
        const float q = y[i] / d;
        EXPECT_NEAR(q, std::round(q), 1e-4f);
        EXPECT_GE(q, -8.0f - 1e-4f);
        EXPECT_LE(q, 7.0f + 1e-4f);
    }
}

TEST(LlamaQuantEmulation, Q4_KBlockIsTwoLevelScalesAndMins) {
    const std::vector<float> x = gaussian(256, 3);
    const kquant::Q4KBlock b = kquant::quantize_q4k(x.data(), kquant::Q4KFit::GGML);
    EXPECT_EQ(b.d, f16(b.d));
    EXPECT_EQ(b.dmin, f16(b.dmin));
    std::vector<float> y(256);
    round_trip(GgmlType::Q4_K, x.data(), 256, y.data());
    for (int j = 0; j < 8; ++j) {
        EXPECT_LE(b.sc[j], 63);
        EXPECT_LE(b.m[j], 63);
        for (int i = 0; i < 32; ++i) {
            EXPECT_LE(b.q[32 * j + i], 15);
            EXPECT_FLOAT_EQ(y[32 * j + i], b.d * b.sc[j] * b.q[32 * j + i] - b.dmin * b.m[j]);
        }
    }
}

TEST(LlamaQuantEmulation, Q4_KReproducesValuesOnItsOwnGrid) {
    // Every sub-block holds 0.0625 * q - 0.25 for q = 0..15 (twice): one scale and one min fit all of
    // them exactly, so the levels are 63 / 63 and only f16 rounding of d and dmin is left.
    std::vector<float> x(256), y(256);
    for (int i = 0; i < 256; ++i) x[i] = 0.0625f * static_cast<float>((i * 7) % 16) - 0.25f;
    round_trip(GgmlType::Q4_K, x.data(), 256, y.data());
    for (int i = 0; i < 256; ++i) EXPECT_NEAR(y[i], x[i], 1e-3f) << i;  // a step is 0.0625
}

TEST(LlamaQuantEmulation, ErrorsOrderAsTheirBits) {
    const std::vector<float> x = gaussian(256 * 64, 4);
    const double q8 = rmse(GgmlType::Q8_0, x), q6 = rmse(GgmlType::Q6_K, x), q4k = rmse(GgmlType::Q4_K, x),
                 q40 = rmse(GgmlType::Q4_0, x);
    EXPECT_LT(q8, q6);
    EXPECT_LT(q6, q4k);
    EXPECT_LT(q4k, q40);
    EXPECT_GT(q8, 0.0);
    EXPECT_LT(q40, 0.02 * 0.2);  // a 4-bit format stays within a fifth of the values' spread
}

TEST(LlamaQuantEmulation, RowsThatDoNotFillBlocksAreRefused) {
    std::vector<float> x(100, 1.0f), y(100);
    EXPECT_THROW(round_trip(GgmlType::Q4_K, x.data(), 100, y.data()), std::invalid_argument);
    EXPECT_THROW(choose_types(Mixture::Q4_K_M, {{"layers.0.mlp.up_proj.weight", 8, 100}}, true, 1),
                 std::invalid_argument);
}

// The demo model's 2-D weights (8 layers, full attention at 3 and 7, tied embedding).
std::vector<WeightInfo> demo_weights() {
    std::vector<WeightInfo> w = {{"embed_tokens.weight", 4160, 256}};
    for (int l = 0; l < 8; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        if (l % 4 == 3) {
            for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"})
                w.push_back({p + "self_attn." + n + ".weight", 128, 256});
        } else {
            for (const char* n : {"in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"})
                w.push_back({p + "linear_attn." + n + ".weight", 256, 256});
        }
        w.push_back({p + "mlp.gate_proj.weight", 768, 256});
        w.push_back({p + "mlp.up_proj.weight", 768, 256});
        w.push_back({p + "mlp.down_proj.weight", 256, 768});
    }
    return w;
}

TEST(LlamaQuantEmulation, Q4_K_MChoosesQ6_KWhereLlamaQuantizeDoes) {
    const auto w = demo_weights();
    const auto t = choose_types(Mixture::Q4_K_M, w, /*tied=*/true, 8);
    std::map<std::string, GgmlType> by;
    for (size_t i = 0; i < w.size(); ++i) by[w[i].name] = t[i];
    // The tied embedding is the output matrix; the 8 attention-v-like tensors (6 GDN qkv + 2 attn_v)
    // and the 8 ffn_down get Q6_K at use_more_bits indices 0, 3, 6, 7.
    const std::vector<std::string> q6 = {"embed_tokens.weight",
                                         "layers.0.linear_attn.in_proj_qkv.weight",
                                         "layers.3.self_attn.v_proj.weight",
                                         "layers.6.linear_attn.in_proj_qkv.weight",
                                         "layers.7.self_attn.v_proj.weight",
                                         "layers.0.mlp.down_proj.weight",
                                         "layers.3.mlp.down_proj.weight",
                                         "layers.6.mlp.down_proj.weight",
                                         "layers.7.mlp.down_proj.weight"};
    for (const auto& [name, type] : by) {
        const bool more = std::find(q6.begin(), q6.end(), name) != q6.end();
        EXPECT_EQ(type, more ? GgmlType::Q6_K : GgmlType::Q4_K) << name;
    }
}

TEST(LlamaQuantEmulation, PlainMixturesKeepTheirOutputRule) {
    const auto w = demo_weights();
    const auto q8 = choose_types(Mixture::Q8_0, w, true, 8);
    const auto q40 = choose_types(Mixture::Q4_0, w, true, 8);
    const auto q40_untied = choose_types(Mixture::Q4_0, w, false, 8);
    for (size_t i = 0; i < w.size(); ++i) {
        EXPECT_EQ(q8[i], GgmlType::Q8_0) << w[i].name;
        const bool embed = w[i].name == "embed_tokens.weight";
        EXPECT_EQ(q40[i], embed ? GgmlType::Q6_K : GgmlType::Q4_0) << w[i].name;
        EXPECT_EQ(q40_untied[i], GgmlType::Q4_0) << w[i].name;  // an untied embedding is only gathered
    }
}

TEST(LlamaQuantEmulation, RoutersStayUnquantized) {
    const std::vector<WeightInfo> w = {{"layers.0.mlp.gate.weight", 64, 256},
                                       {"layers.0.mlp.shared_expert_gate.weight", 1, 256},
                                       {"layers.0.mlp.experts.3.gate_proj.weight", 128, 256},
                                       {"layers.0.mlp.shared_expert.gate_proj.weight", 128, 256}};
    const auto t = choose_types(Mixture::Q4_K_M, w, true, 1);
    EXPECT_EQ(t[0], GgmlType::F32);
    EXPECT_EQ(t[1], GgmlType::F32);
    EXPECT_EQ(t[2], GgmlType::Q4_K);
    EXPECT_EQ(t[3], GgmlType::Q4_K);
}

}  // namespace
}  // namespace gdn::llama_emul
