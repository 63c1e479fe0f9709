// Whole-model state handling on random checkpoints written by make-model, for every family:
// one prefill == two calls == token by token; batching sequences together == running each alone.
#include <gtest/gtest.h>

#include "model/model.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

std::vector<int32_t> random_ids(int64_t n, int vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
    return ids;
}

class Presets : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        // The MoE preset is written as two shards to exercise the index path.
        dir_ = make_preset(GetParam(), 42, GetParam() == "qwen3_5_moe-tiny" ? 2 : 1);
        auto m = Model::load(ExecContext::process(), dir_->path());
        ASSERT_TRUE(m.is_ok()) << m.message();
        model_ = std::move(*m);
    }
    std::unique_ptr<TempDir> dir_;
    std::unique_ptr<Model> model_;
};

TEST_P(Presets, PrefillOneCallEqualsTwoCallsEqualsTokenByToken) {
    const int64_t n = 150, V = model_->config().vocab;
    auto ids = random_ids(n, V, 1);
    std::vector<float> once, twice, steps;
    SequenceState a = model_->new_state(), b = model_->new_state(), c = model_->new_state();
    ASSERT_TRUE(model_->forward({{&a, ids.data(), n, true}}, {}, &once).is_ok());
    ASSERT_TRUE(model_->forward({{&b, ids.data(), 70, true}}, {}, &twice).is_ok());
    ASSERT_TRUE(model_->forward({{&b, ids.data() + 70, n - 70, true}}, {}, &twice).is_ok());
    for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(model_->forward({{&c, &ids[i], 1, true}}, {}, &steps).is_ok());
    ASSERT_EQ(once.size(), size_t(n * V));
    ASSERT_EQ(twice.size(), once.size());
    ASSERT_EQ(steps.size(), once.size());
    // Chunked vs recurrent delta rule round differently; the tolerance is f32 noise on O(1) logits.
    EXPECT_LT(max_abs_diff(once.data(), twice.data(), once.size()), 1e-4f);
    EXPECT_LT(max_abs_diff(once.data(), steps.data(), once.size()), 1e-4f);
    EXPECT_EQ(a.n_past, n);
    EXPECT_EQ(c.n_past, n);
}

TEST_P(Presets, BatchedSequencesEqualEachAlone) {
    const int64_t V = model_->config().vocab;
    auto p1 = random_ids(37, V, 2), p2 = random_ids(150, V, 3), p3 = random_ids(5, V, 4);
    // Alone.
    std::vector<float> alone;
    std::vector<SequenceState> solo;
    for (int i = 0; i < 3; ++i) solo.push_back(model_->new_state());
    ASSERT_TRUE(model_->forward({{&solo[0], p1.data(), 37, true}}, {}, &alone).is_ok());
    ASSERT_TRUE(model_->forward({{&solo[1], p2.data(), 150, true}}, {}, &alone).is_ok());
    ASSERT_TRUE(model_->forward({{&solo[2], p3.data(), 5, false}}, {}, &alone).is_ok());
    // Together, in one batch.
    std::vector<float> together;
    std::vector<SequenceState> st;
    for (int i = 0; i < 3; ++i) st.push_back(model_->new_state());
    ASSERT_TRUE(model_
                    ->forward({{&st[0], p1.data(), 37, true},
                               {&st[1], p2.data(), 150, true},
                               {&st[2], p3.data(), 5, false}},
                              {}, &together)
                    .is_ok());
    EXPECT_EQ(alone, together);  // rows are computed independently: bitwise equal
    // A mixed decode step (three sequences at different positions) equals three single steps.
    int32_t t1 = 7, t2 = 8, t3 = 9;
    std::vector<float> alone_dec, together_dec;
    ASSERT_TRUE(model_->forward({{&solo[0], &t1, 1, false}}, {}, &alone_dec).is_ok());
    ASSERT_TRUE(model_->forward({{&solo[1], &t2, 1, false}}, {}, &alone_dec).is_ok());
    ASSERT_TRUE(model_->forward({{&solo[2], &t3, 1, false}}, {}, &alone_dec).is_ok());
    ASSERT_TRUE(model_
                    ->forward({{&st[0], &t1, 1, false}, {&st[1], &t2, 1, false}, {&st[2], &t3, 1, false}}, {},
                              &together_dec)
                    .is_ok());
    EXPECT_EQ(alone_dec, together_dec);
}

// A bf16 KV cache (--kv-cache-dtype bf16): with HF rounding K and V are bf16 values already, so it
// holds them exactly (bitwise the logits of an f32 cache, at half its size); in the default bf16 mode
// it rounds them (as HF's bf16 forward stores them), a small change; with f32 activations it is refused.
TEST_P(Presets, Bf16KvCache) {
    const int64_t n = 150, V = model_->config().vocab;
    auto ids = random_ids(n, V, 5);
    for (bool hf : {true, false}) {
        ForwardOptions bf;
        bf.bf16_activations = true;
        bf.hf_rounding = hf;
        std::vector<float> with_f32, with_bf16;
        SequenceState a = model_->new_state(DType::F32), b = model_->new_state(DType::BF16);
        ASSERT_TRUE(model_->forward({{&a, ids.data(), n, true}}, bf, &with_f32).is_ok());
        ASSERT_TRUE(model_->forward({{&b, ids.data(), n, true}}, bf, &with_bf16).is_ok());
        for (int i = 0; i < 4; ++i) {
            const int32_t t = ids[i];
            ASSERT_TRUE(model_->forward({{&a, &t, 1, false}}, bf, &with_f32).is_ok());
            ASSERT_TRUE(model_->forward({{&b, &t, 1, false}}, bf, &with_bf16).is_ok());
        }
        ASSERT_EQ(with_f32.size(), with_bf16.size());
        if (hf)
            EXPECT_EQ(with_f32, with_bf16);
        else
            EXPECT_LT(max_abs_diff(with_f32.data(), with_bf16.data(), with_f32.size()), 0.1f);
        ASSERT_FALSE(a.k_cache.empty());
        EXPECT_EQ(b.k_cache[0].size() * 2, a.k_cache[0].size());
    }
    std::vector<float> logits;
    SequenceState c = model_->new_state(DType::BF16);
    Status st = model_->forward({{&c, ids.data(), 4, false}}, {}, &logits);
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("bf16 KV cache"), std::string::npos) << st.message();
    EXPECT_EQ(c.n_past, 0);
}

// Without hidden states asked, the last layer after its mixer runs on the rows the head reads only (a
// prompt's last row): the logits and greedy ids, and the caches later steps read, are bitwise those of
// the full pass (hidden asked: every row), in f32 and bf16 mode, with prompt rows past 256 keys (the
// bf16 attention kernels), one sequence wanting all its rows and decode rows in the same batches.
TEST_P(Presets, OutputRowsOnlyMatchTheFullPass) {
    const int64_t V = model_->config().vocab;
    const auto p1 = random_ids(300, V, 11), p2 = random_ids(40, V, 12), p3 = random_ids(20, V, 13);
    for (bool bf16 : {false, true}) {
        ForwardOptions o;
        o.bf16_activations = bf16;
        std::vector<float> logits[2];
        std::vector<int32_t> ids[2];
        for (int full = 0; full < 2; ++full) {
            std::vector<float> hidden;
            std::vector<float>* h = full ? &hidden : nullptr;
            std::vector<SequenceState> st;
            for (int i = 0; i < 3; ++i) st.push_back(model_->new_state());
            const int32_t t1 = 5, t2 = 6;
            // A prompt chunk (last row only), a sequence with every row's logits, a short prompt.
            ASSERT_TRUE(model_
                            ->forward({{&st[0], p1.data(), 250, false},
                                       {&st[1], p2.data(), 40, true},
                                       {&st[2], p3.data(), 20, false}},
                                      o, &logits[full], nullptr, h)
                            .is_ok());
            // The prompt's rest (rows with 251..300 keys) beside two decode rows, then greedy ids.
            ASSERT_TRUE(model_
                            ->forward({{&st[1], &t1, 1, false},
                                       {&st[0], p1.data() + 250, 50, false},
                                       {&st[2], &t2, 1, false}},
                                      o, &logits[full], nullptr, h)
                            .is_ok());
            ASSERT_TRUE(model_
                            ->forward({{&st[0], &t1, 1, false}, {&st[2], p3.data(), 20, false}}, o,
                                      &logits[full], &ids[full], h)
                            .is_ok());
            // A decode step of all three reads every cache the steps above wrote.
            ASSERT_TRUE(
                model_
                    ->forward({{&st[0], &t2, 1, false}, {&st[1], &t2, 1, false}, {&st[2], &t1, 1, false}}, o,
                              &logits[full], nullptr, h)
                    .is_ok());
            if (full) {
                EXPECT_EQ(hidden.size(), size_t(310 + 52 + 21 + 3) * model_->config().hidden);
            }
        }
        ASSERT_EQ(logits[0].size(), size_t(1 + 40 + 1 + 3 + 3) * V);
        EXPECT_EQ(logits[0], logits[1]) << "bf16 " << bf16;
        ASSERT_EQ(ids[0].size(), 2u);
        EXPECT_EQ(ids[0], ids[1]) << "bf16 " << bf16;
    }
}

TEST_P(Presets, BadTokenIdIsAnErrorAndLeavesStateUntouched) {
    SequenceState s = model_->new_state();
    int32_t bad[2] = {1, model_->config().vocab};
    std::vector<float> logits;
    Status st = model_->forward({{&s, bad, 2, false}}, {}, &logits);
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("out of range"), std::string::npos) << st.message();
    EXPECT_EQ(s.n_past, 0);
    EXPECT_TRUE(logits.empty());
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, Presets,
                         ::testing::Values("qwen3_5-tiny", "qwen3_5_moe-tiny", "qwen3_next-tiny"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (auto& ch : s)
                                 if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return s;
                         });

TEST(MakeModel, DeterministicFromSeed) {
    auto a = make_preset("qwen3_next-tiny", 5), b = make_preset("qwen3_next-tiny", 5),
         c = make_preset("qwen3_next-tiny", 6);
    const std::string fa = read_bytes(a->path() + "/model.safetensors");
    EXPECT_FALSE(fa.empty());
    EXPECT_EQ(fa, read_bytes(b->path() + "/model.safetensors"));
    EXPECT_NE(fa, read_bytes(c->path() + "/model.safetensors"));
    EXPECT_EQ(read_bytes(a->path() + "/config.json"), read_bytes(b->path() + "/config.json"));
}

TEST(MakeModel, UnknownPresetIsAnError) {
    TempDir d;
    MakeModelOptions o;
    o.preset = "qwen9";
    o.out_dir = d.path();
    Status st = make_model(o);
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("unknown preset 'qwen9'"), std::string::npos) << st.message();
}

}  // namespace
