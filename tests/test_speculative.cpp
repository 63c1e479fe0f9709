// Speculative decoding: the MTP draft layer against the float64 reference, per-token GDN state outputs
// against decode steps, and the engine's draft-verify loop (same greedy tokens, the target distribution
// under sampling, no leaked slots or blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "engine/engine.h"
#include "ops/dispatch.h"
#include "ops/ref/ref_ops.h"
#include "test_util.h"
#include "util/json_file.h"

using namespace gdn;
using namespace gdn::test;

namespace {

std::shared_ptr<const Model> load_mtp(const std::string& dir) {
    LoadOptions lo;
    lo.mtp = true;
    auto m = Model::load(dir, nullptr, lo);
    EXPECT_TRUE(m.is_ok()) << m.message();
    return m.is_ok() ? std::shared_ptr<const Model>(std::move(*m)) : nullptr;
}

// MTP logits of the reference prompt's last slot (T-2: h_{T-2} and the last prompt token).
std::vector<float> demo_mtp_last_slot(const Model& m, const std::vector<int32_t>& ids, bool bf16) {
    const int64_t n = static_cast<int64_t>(ids.size()), H = m.config().hidden, V = m.config().vocab;
    SequenceState st = m.new_state();
    ForwardOptions fo;
    fo.bf16_activations = bf16;
    std::vector<float> logits, hidden;
    EXPECT_TRUE(m.forward({{&st, ids.data(), n, false}}, fo, &logits, nullptr, &hidden).is_ok());
    EXPECT_EQ(static_cast<int64_t>(hidden.size()), n * H);
    // Slots 0 .. n-2: hidden h_t with token t+1.
    std::vector<float> mtp_logits;
    EXPECT_TRUE(m.mtp_forward(st, ids.data() + 1, hidden.data(), n - 1, fo, &mtp_logits).is_ok());
    EXPECT_EQ(static_cast<int64_t>(mtp_logits.size()), (n - 1) * V);
    return std::vector<float>(mtp_logits.end() - V, mtp_logits.end());
}

}  // namespace

TEST(Mtp, DemoModelMatchesReferenceTop5) {
    auto m = load_mtp(demo_model_dir());
    ASSERT_TRUE(m);
    ASSERT_TRUE(m->has_mtp());
    auto j = read_json_file(demo_model_dir() + "/reference_logits.json");
    ASSERT_TRUE(j.is_ok()) << j.message();
    std::vector<int32_t> ids;
    for (int id : (*j)["prompt_ids"]) ids.push_back(id);
    const auto top5 = (*j)["mtp_last_slot_top5"];
    for (bool reference : {true, false}) {
        force_reference_all(reference);
        const std::vector<float> row = demo_mtp_last_slot(*m, ids, false);
        force_reference_all(false);
        // The reference's top-5 ids in order, each logit within 1e-3 (f32 against float64).
        std::vector<int32_t> order(row.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
        std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                          [&](int32_t a, int32_t b) { return row[a] > row[b]; });
        for (int r = 0; r < 5; ++r) {
            const int32_t id = top5[r][0].get<int32_t>();
            const float want = top5[r][1].get<float>();
            EXPECT_EQ(order[r], id) << (reference ? "reference" : "fast") << " rank " << r;
            EXPECT_NEAR(row[id], want, 1e-3f) << (reference ? "reference" : "fast") << " id " << id;
        }
    }
    // bf16 activations: the same top-5 set within bf16 tolerance.
    const std::vector<float> b = demo_mtp_last_slot(*m, ids, true);
    for (int r = 0; r < 5; ++r) EXPECT_NEAR(b[top5[r][0].get<int32_t>()], top5[r][1].get<float>(), 0.1f);
}

TEST(Mtp, LoadingWithoutMtpTensorsIsAClearError) {
    LoadOptions lo;
    lo.mtp = true;
    auto m = Model::load(golden_dir("qwen3_5"), nullptr, lo);
    ASSERT_FALSE(m.is_ok());
    EXPECT_NE(m.message().find("no MTP layer"), std::string::npos) << m.message();
}
