// Decode forwards whose GEMV claims (bf16 and quantized weights) the caller stole from a descheduled
// worker give bitwise the logits of plain steps, and the forward returns with no worker still computing a
// stolen claim.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "core/thread_pool.h"
#include "model/make_model.h"
#include "model/model.h"
#include "ops/dispatch.h"
#include "test_util.h"

namespace gdn {
namespace {

// quantization: none for the bf16 dot products, else the quantized ones (their rows' view travels with
// the job: quant::QuantRowsView).
void expect_stolen_steps_match_plain(std::optional<WeightFormat> quantization) {
    // The 0.8B shape's matrices (hidden 1024: panels of 64 KB, many claims per product), 4 layers, a small
    // vocabulary: ~150 MB.
    test::TempDir dir;
    MakeModelOptions o;
    o.preset = "qwen3_5-0.8b";
    o.out_dir = dir.path();
    o.seed = 5;
    o.vocab_override = 512;
    o.layers_override = 4;
    ASSERT_TRUE(make_model(o).is_ok());
    LoadOptions lo;
    lo.quantization = quantization;
    auto m = Model::load(ExecContext::process(), dir.path(), nullptr, lo);
    ASSERT_TRUE(m.is_ok()) << m.message();
    set_global_threads(2);
    ForwardOptions fo;
    fo.bf16_activations = true;
    SequenceState plain = (*m)->new_state(), stolen = (*m)->new_state();
    const std::vector<int32_t> prompt = {5, 17, 300, 42, 7, 99, 256, 3};
    std::vector<float> a, b;
    ASSERT_TRUE((*m)->forward({{&plain, prompt.data(), 8, false}}, fo, &a).is_ok());
    ASSERT_TRUE((*m)->forward({{&stolen, prompt.data(), 8, false}}, fo, &b).is_ok());
    ThreadPool& pool = global_pool();
    const int64_t steals_before = pool.steals();
    for (int step = 0; step < 6; ++step) {
        const int32_t t = 11 + 37 * step;
        a.clear();
        b.clear();
        ASSERT_TRUE((*m)->forward({{&plain, &t, 1, false}}, fo, &a).is_ok());
        pool.run([](int, int) {});  // the worker awake: it claims in the step's first large product
        pool.delay_next_claim_for_test(1, 30);
        ASSERT_TRUE((*m)->forward({{&stolen, &t, 1, false}}, fo, &b).is_ok());
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "step " << step;
    }
    EXPECT_GE(pool.steals() - steals_before, 1) << "no claim was stolen in six steps";
    pool.delay_next_claim_for_test(1, 0);  // a hook the worker did not reach stays off for later tests
    set_global_threads(default_thread_count());
}

TEST(StealingForward, DecodeStepsWithStolenClaimsMatchPlainSteps) {
    if (!has_bf16_dot()) GTEST_SKIP() << "the stealable bf16 GEMVs are the AVX-512 bf16 dot products";
    expect_stolen_steps_match_plain(std::nullopt);
}

TEST(StealingForward, QuantizedDecodeStepsWithStolenClaimsMatchPlainSteps) {
    if (op_isa(OpId::LINEAR) == Isa::REF) GTEST_SKIP() << "the reference runs the products on one thread";
    for (WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4K}) {
        SCOPED_TRACE(weight_format_name(f));
        expect_stolen_steps_match_plain(f);
    }
}

}  // namespace
}  // namespace gdn
