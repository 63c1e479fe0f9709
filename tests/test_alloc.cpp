// Nothing in a decode step allocates on the heap once warm: global operator new is counted while a
// window is open.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "model/model.h"
#include "ops/dispatch.h"
#include "test_util.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocs{0};
}  // namespace

void* operator new(size_t n) {
    if (g_counting.load(std::memory_order_relaxed)) { g_allocs.fetch_add(1); if (std::getenv("GDN_ALLOC_ABORT")) std::abort(); }
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

using namespace gdn;
using namespace gdn::test;

namespace {

class NoAlloc : public ::testing::TestWithParam<std::string> {};

TEST_P(NoAlloc, DecodeStepsDoNotAllocateAfterWarmUp) {
    auto dir = make_preset(GetParam(), 9);
    auto m = Model::load(dir->path());
    ASSERT_TRUE(m.is_ok()) << m.message();
    for (bool bf16 : {false, true}) {
        ForwardOptions fo;
        fo.bf16_activations = bf16;
        std::vector<SequenceState> st;
        for (int i = 0; i < 3; ++i) {
            st.push_back((*m)->new_state());
            st.back().reserve(64);
        }
        std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
        std::vector<float> logits;
        logits.reserve(3 * (*m)->config().vocab);
        for (auto& s : st) ASSERT_TRUE((*m)->forward({{&s, prompt.data(), 5, false}}, fo, &logits).is_ok());
        int32_t t[3] = {7, 8, 9};
        std::vector<SequenceInput> batch = {{&st[0], &t[0], 1, false}, {&st[1], &t[1], 1, false}, {&st[2], &t[2], 1, false}};
        for (int warm = 0; warm < 2; ++warm) {
            logits.clear();
            ASSERT_TRUE((*m)->forward(batch, fo, &logits).is_ok());
        }
        g_allocs = 0;
        g_counting = true;
        for (int step = 0; step < 20; ++step) {
            logits.clear();
            Status s = (*m)->forward(batch, fo, &logits);
            if (!s) break;
        }
        g_counting = false;
        EXPECT_EQ(g_allocs.load(), 0) << "heap allocations in 20 decode steps (bf16=" << bf16 << ")";
    }
}

INSTANTIATE_TEST_SUITE_P(Families, NoAlloc, ::testing::Values("qwen3_5-tiny", "qwen3_5_moe-tiny", "qwen3_next-tiny"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (auto& ch : s)
                                 if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return s;
                         });

}  // namespace
