// Nothing in a decode step allocates on the heap once warm: global operator new is counted while a
// window is open.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <new>
#include <vector>

#include "core/buffer.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "model/model.h"
#include "ops/dispatch.h"
#include "test_util.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocs{0};
}  // namespace

// GCC 12 reports free() on memory from the replaced operator new as mismatched; here both are malloc/free.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
    if (g_counting.load(std::memory_order_relaxed)) {
        g_allocs.fetch_add(1);
        if (std::getenv("GDN_ALLOC_ABORT")) std::abort();
    }
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t n) {
    return operator new(n);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
    std::free(p);
}
// The nothrow forms too (std::stable_sort's buffer uses them): left to the runtime, they would come
// from its allocator (ASan's) and be freed by ours above, which ASan rightly reports as a mismatch.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
    try {
        return operator new(n);
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept {
    return operator new(n, t);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}

using namespace gdn;
using namespace gdn::test;

namespace {

// Which threads of the pool take part in a job depends on timing: a worker the OS keeps descheduled
// through the warm-up (ctest -j2 on two cores) first runs some jobs inside the counted window. The
// warm-up therefore runs on one pool and the counting on a fresh one of the same size, whose workers
// have run nothing: scratch a worker would grow on its first job shows up every time, not once in a
// hundred CI runs. At least two threads, so there is a worker.
class FreshWorkersForCounting {
  public:
    FreshWorkersForCounting() : n_(std::max(2, default_thread_count())) { set_global_threads(n_); }
    ~FreshWorkersForCounting() { set_global_threads(default_thread_count()); }
    void replace_pool() const {
        set_global_threads(1);
        set_global_threads(n_);
    }

  private:
    int n_;
};

class NoAlloc : public ::testing::TestWithParam<std::string> {};

TEST_P(NoAlloc, DecodeStepsDoNotAllocateAfterWarmUp) {
    auto dir = make_preset(GetParam(), 9);
    auto m = Model::load(ExecContext::process(), dir->path());
    ASSERT_TRUE(m.is_ok()) << m.message();
    FreshWorkersForCounting workers;
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
        std::vector<SequenceInput> batch = {
            {&st[0], &t[0], 1, false}, {&st[1], &t[1], 1, false}, {&st[2], &t[2], 1, false}};
        for (int warm = 0; warm < 2; ++warm) {
            logits.clear();
            ASSERT_TRUE((*m)->forward(batch, fo, &logits).is_ok());
        }
        workers.replace_pool();
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

// The whole engine step (schedule, plan, forward, sample, outputs) does not allocate while decoding.
TEST(NoAllocEngine, EngineDecodeStepsDoNotAllocate) {
    auto dir = make_preset("qwen3_5-tiny", 3);
    auto m = Model::load(ExecContext::process(), dir->path());
    ASSERT_TRUE(m.is_ok()) << m.message();
    EngineConfig cfg;
    cfg.cache_memory = 16ull << 20;
    cfg.max_model_len = 256;
    FreshWorkersForCounting workers;
    auto e = Engine::create(std::shared_ptr<const Model>(std::move(*m)), nullptr, cfg);
    ASSERT_TRUE(e.is_ok()) << e.message();
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = 100;
    sp.ignore_eos = true;
    for (int i = 0; i < 4; ++i)
        ASSERT_TRUE((*e)->add_request(Prompt::from_ids({1, 2, 3, 4, 5 + i}), sp).is_ok());
    for (int i = 0; i < 5; ++i) (*e)->step();  // prefills, first decodes: buffers grow here
    workers.replace_pool();
    g_allocs = 0;
    g_counting = true;
    int64_t tokens = 0;
    for (int i = 0; i < 20; ++i)
        for (const auto& o : (*e)->step()) tokens += static_cast<int64_t>(o.new_tokens.size());
    g_counting = false;
    EXPECT_EQ(tokens, 80);
    EXPECT_EQ(g_allocs.load(), 0) << "heap allocations in 20 engine decode steps";
}

INSTANTIATE_TEST_SUITE_P(Families, NoAlloc,
                         ::testing::Values("qwen3_5-tiny", "qwen3_5_moe-tiny", "qwen3_next-tiny"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (auto& ch : s)
                                 if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return s;
                         });

}  // namespace

namespace {
size_t resident_bytes() {
    std::ifstream f("/proc/self/statm");
    size_t pages = 0, resident = 0;
    f >> pages >> resident;
    return resident * 4096;
}
}  // namespace

// A large buffer's tail past its last whole 2 MiB page is not backed by a huge page: an int8 MoE
// expert of 2.1 MB must not take 4 MB of memory (where the kernel gives no huge pages, both are ~2.1 MB).
TEST(Buffer, LargeBufferTakesAboutItsBytes) {
    constexpr size_t kBytes = (size_t{2} << 20) + (size_t{128} << 10);
    std::vector<gdn::Buffer> bufs;
    const size_t before = resident_bytes();
    for (int i = 0; i < 8; ++i) bufs.emplace_back(kBytes);  // zeroed: every byte touched
    const double per_buffer = static_cast<double>(resident_bytes() - before) / bufs.size();
    // 3 MB: below the 4 MB of a huge page for the tail, above the sanitizer build's shadow pages.
    EXPECT_LT(per_buffer, 3.0 * (1 << 20)) << "resident bytes per buffer of " << kBytes;
    for (const gdn::Buffer& b : bufs) {
        const char* p = b.as<char>();
        EXPECT_EQ(p[0], 0);
        EXPECT_EQ(p[kBytes - 1], 0);
    }
}
