// The --quantization schemes: which format each packed linear takes (model/quant_scheme.h), and that
// a loaded model carries exactly those.
#include <gtest/gtest.h>

#include "model/model.h"
#include "model/quant_scheme.h"
#include "model/weights.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

TEST(QuantScheme, Int4GivesInt6KWhereQ4KMGivesQ6K) {
    const WeightFormat s = WeightFormat::Q4K;
    const int n = 8;  // use_more_bits: layers 0, 3, 6, 7
    EXPECT_EQ(scheme_format(s, "lm_head", n), WeightFormat::Q6K);
    EXPECT_EQ(scheme_format(s, "embed_tokens", n), WeightFormat::Q4K);  // untied: only gathered
    EXPECT_EQ(scheme_format(s, "layers.0.linear_attn.in_proj", n), WeightFormat::Q6K);
    EXPECT_EQ(scheme_format(s, "layers.1.linear_attn.in_proj", n), WeightFormat::Q4K);
    EXPECT_EQ(scheme_format(s, "layers.0.linear_attn.out", n), WeightFormat::Q4K);
    EXPECT_EQ(scheme_format(s, "layers.3.self_attn.qkv", n), WeightFormat::Q4K);  // v is fused with q, k
    for (const char* down :
         {"layers.3.mlp.down", "layers.7.mlp.experts.5.down", "layers.6.mlp.shared_expert.down"})
        EXPECT_EQ(scheme_format(s, down, n), WeightFormat::Q6K) << down;
    EXPECT_EQ(scheme_format(s, "layers.2.mlp.down", n), WeightFormat::Q4K);
    EXPECT_EQ(scheme_format(s, "layers.3.mlp.gate_up", n), WeightFormat::Q4K);
    EXPECT_EQ(scheme_format(s, "mtp.layers.0.mlp.down", n), WeightFormat::Q4K);
    EXPECT_EQ(scheme_format(s, "layers.14.mlp.down", 24), WeightFormat::Q6K);  // (14 - 3) % 3 == 2
    EXPECT_EQ(scheme_format(s, "layers.13.mlp.down", 24), WeightFormat::Q4K);
    EXPECT_EQ(scheme_format(WeightFormat::Q4, "lm_head", n), WeightFormat::Q8);
    EXPECT_EQ(scheme_format(WeightFormat::Q4, "layers.0.mlp.down", n), WeightFormat::Q4);
    EXPECT_EQ(scheme_format(WeightFormat::Q8, "layers.0.mlp.down", n), WeightFormat::Q8);
}

TEST(QuantScheme, UseMoreBitsIsLlamaQuantsRule) {
    // n = 24: the first and last eighth (0-2, 21-23) and every third from 3 on at offset 2 (5, 8, ...).
    std::vector<int> got;
    for (int i = 0; i < 24; ++i)
        if (use_more_bits(i, 24)) got.push_back(i);
    EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23}));
}

TEST(QuantScheme, LoadedDemoModelCarriesTheSchemesFormats) {
    LoadOptions lo;
    lo.quantization = WeightFormat::Q4K;
    auto m = Model::load(ExecContext::process(), demo_model_dir(), nullptr, lo);
    ASSERT_TRUE(m.is_ok()) << m.message();
    const ModelWeights& w = (*m)->weights();
    EXPECT_EQ(w.lm_head_packed.packed.format, WeightFormat::Q6K);  // tied: the embedding rows too
    EXPECT_EQ(w.embed_packed, &w.lm_head_packed.packed);
    EXPECT_EQ(w.layers[0].gdn.in_proj.packed.format, WeightFormat::Q6K);
    EXPECT_EQ(w.layers[1].gdn.in_proj.packed.format, WeightFormat::Q4K);
    EXPECT_EQ(w.layers[3].attn.qkv.packed.format, WeightFormat::Q4K);
    EXPECT_EQ(w.layers[3].mlp.down.packed.format, WeightFormat::Q6K);
    EXPECT_EQ(w.layers[4].mlp.down.packed.format, WeightFormat::Q4K);
    EXPECT_EQ(w.layers[4].mlp.gate_up.packed.format, WeightFormat::Q4K);
}

}  // namespace
