// ThreadPool: every way of splitting work covers each item exactly once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace gdn {
namespace {

TEST(ThreadPool, BalancedRangesCoverEachItemExactlyOnce) {
    for (int threads : {1, 2, 3, 5}) {
        ThreadPool pool(threads);
        for (int64_t n : {0, 1, 2, 7, 64, 1000, 4097, 100000})
            for (int64_t chunk : {0, 1, 3, 64, 5000}) {
                std::vector<std::atomic<int>> hits(n);
                std::atomic<int> bad{0};
                // Guided claims: at most 1/(2 nth) of a share, or the smallest claim.
                const int64_t share = (n + threads - 1) / threads;
                const int64_t most = std::max<int64_t>(std::max<int64_t>(chunk, 1), share / (2 * threads));
                pool.parallel_for_balanced(n, chunk, [&](int ith, int64_t b, int64_t e) {
                    if (ith < 0 || ith >= threads || b < 0 || e > n || b >= e) ++bad;
                    if (threads > 1 && n > chunk && e - b > most) ++bad;
                    for (int64_t i = std::max<int64_t>(b, 0); i < std::min(e, n); ++i) ++hits[i];
                });
                EXPECT_EQ(bad.load(), 0) << threads << " threads, n=" << n << ", chunk=" << chunk;
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_EQ(hits[i].load(), 1) << threads << " threads, n=" << n << ", chunk=" << chunk << ", item " << i;
            }
    }
}

TEST(ThreadPool, BalancedRangesMoveWorkToTheFasterThread) {
    // Thread 1 sleeps in every call: thread 0 finishes its share and takes most of thread 1's.
    ThreadPool pool(2);
    const int64_t n = 1000;
    std::atomic<int64_t> done0{0}, done1{0};
    pool.parallel_for_balanced(n, 1, [&](int ith, int64_t b, int64_t e) {
        if (ith == 1) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            done1 += e - b;
        } else {
            done0 += e - b;
        }
    });
    EXPECT_EQ(done0 + done1, n);
    EXPECT_GT(done0.load(), n / 2 + n / 8) << "thread 1 did " << done1.load();
}

TEST(ThreadPool, BalancedRangesAreReusableBackToBack) {
    // The shares are pool state: consecutive jobs (hundreds per decode step) must not see stale ranges.
    ThreadPool pool(2);
    for (int rep = 0; rep < 2000; ++rep) {
        const int64_t n = 1 + rep % 97;
        std::atomic<int64_t> sum{0};
        pool.parallel_for_balanced(n, 1 + rep % 5, [&](int, int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) sum += i;
        });
        ASSERT_EQ(sum.load(), n * (n - 1) / 2) << "rep " << rep;
    }
}

}  // namespace
}  // namespace gdn
