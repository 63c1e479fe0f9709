// ThreadPool: every way of splitting work covers each item exactly once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
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
                    ASSERT_EQ(hits[i].load(), 1)
                        << threads << " threads, n=" << n << ", chunk=" << chunk << ", item " << i;
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

TEST(ThreadPool, ParallelForCoversEachItemExactlyOnceBackToBack) {
    // Ranges claimed whole by their thread or by one done with its own; tiny jobs back to back, some
    // after a pause long enough for the workers to fall asleep (so the caller often closes them out),
    // interleaved with run() (which always waits for every thread).
    for (int threads : {2, 3}) {
        ThreadPool pool(threads);
        for (int rep = 0; rep < 3000; ++rep) {
            if (rep % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
            const int64_t n = 1 + rep % 13;
            std::vector<std::atomic<int>> hits(n);
            pool.parallel_for(n, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) ++hits[i];
            });
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "rep " << rep << " item " << i;
            if (rep % 7 == 0) {
                std::atomic<int> ran{0};
                pool.run([&](int, int) { ++ran; });
                ASSERT_EQ(ran.load(), threads) << "rep " << rep;
            }
        }
    }
}

TEST(ThreadPool, ParallelForGrainKeepsSmallJobsOnTheCaller) {
    // n <= grain: one call over [0, n) on the calling thread; above it at most ceil(n / grain) ranges,
    // each item once.
    ThreadPool pool(3);
    const std::thread::id me = std::this_thread::get_id();
    for (int64_t n : {1, 4, 8}) {
        int calls = 0;
        bool on_caller = true;
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
                ++calls;  // one call only: no race
                on_caller &= std::this_thread::get_id() == me && b == 0 && e == n;
            },
            8);
        EXPECT_EQ(calls, 1) << n;
        EXPECT_TRUE(on_caller) << n;
    }
    for (int64_t n : {9, 17, 100}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> calls{0};
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
                ++calls;
                for (int64_t i = b; i < e; ++i) ++hits[i];
            },
            8);
        EXPECT_LE(calls.load(), std::min<int64_t>(3, (n + 7) / 8)) << n;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " item " << i;
    }
    EXPECT_EQ(row_grain(1024), kMinFloatsPerThread / 1024);
    EXPECT_EQ(row_grain(1 << 20), 1);
}

TEST(ThreadPool, AClaimedJobDoesNotWaitForAWorkerThatHasNotStarted) {
    // A worker the OS has descheduled (the test hook holds it 300 ms before it joins): parallel_for and
    // parallel_for_balanced return once the caller has done every range, long before the worker runs;
    // run() must wait for it. The held worker then skips the jobs it missed and serves the next one.
    using Clock = std::chrono::steady_clock;
    ThreadPool pool(2);
    const auto me = std::this_thread::get_id();
    for (int kind = 0; kind < 2; ++kind) {
        pool.run([](int, int) {});  // both threads idle and spinning
        pool.delay_next_join_for_test(1, 300);
        std::atomic<int> items{0}, others{0};
        const auto t0 = Clock::now();
        for (int rep = 0; rep < 10; ++rep) {
            auto body = [&](int64_t b, int64_t e) {
                if (std::this_thread::get_id() != me) ++others;
                items += static_cast<int>(e - b);
            };
            if (kind == 0)
                pool.parallel_for(100, body);
            else
                pool.parallel_for_balanced(100, 1, [&](int, int64_t b, int64_t e) { body(b, e); });
        }
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        EXPECT_EQ(items.load(), 1000);
        EXPECT_EQ(others.load(), 0);
        EXPECT_LT(ms, 150.0) << (kind ? "parallel_for_balanced" : "parallel_for")
                             << " waited for the held worker";
        std::this_thread::sleep_for(std::chrono::milliseconds(350));
        std::atomic<int> ran{0};
        pool.run([&](int, int) { ++ran; });
        EXPECT_EQ(ran.load(), 2);
    }
    pool.delay_next_join_for_test(1, 100);
    const auto t0 = Clock::now();
    std::atomic<int> ran{0};
    pool.run([&](int, int) { ++ran; });
    EXPECT_EQ(ran.load(), 2);
    const double run_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    EXPECT_GE(run_ms, 90.0);
}

// A stealable job's unit u writes value(m, c) = 1000 m + c + 1 into columns [3u, 3u + 3) of every row of
// dst (the last unit's columns end at n_cols); it counts the calls that computed into a worker's tile.
struct ColumnsJob {
    float* y;
    int64_t rows, ld, n_cols;
    std::atomic<int>* tile_calls;
    int spin_us;  // per unit, so the worker surely joins and claims
    void operator()(int64_t u0, int64_t u1, float* dst) const {
        if (dst != y) tile_calls->fetch_add(1);
        for (int64_t u = u0; u < u1; ++u) {
            const auto t0 = std::chrono::steady_clock::now();
            while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(spin_us)) {
            }
            for (int64_t m = 0; m < rows; ++m)
                for (int64_t c = 3 * u; c < std::min(n_cols, 3 * u + 3); ++c)
                    dst[m * ld + c] = 1000.0f * m + c + 1;
        }
    }
};

void expect_columns(const std::vector<float>& y, int64_t rows, int64_t ld, int64_t n_cols, const char* what) {
    int bad = 0;
    for (int64_t m = 0; m < rows; ++m)
        for (int64_t c = 0; c < ld; ++c)
            bad += y[m * ld + c] != (c < n_cols ? 1000.0f * m + c + 1 : -1.0f);  // padding untouched
    EXPECT_EQ(bad, 0) << what;
}

TEST(ThreadPool, StealableJobsWriteEveryUnitOnceIntoItsColumns) {
    for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        for (bool scope : {false, true}) {
            std::optional<ThreadPool::StealScope> steal;
            if (scope) steal.emplace(pool);
            for (int64_t n : {1, 2, 7, 64, 1000, 70000})  // 70000 > the 16-bit tagged ranges: plain claims
                for (int64_t chunk : {1, 5, 64}) {
                    const int64_t rows = 3, n_cols = 3 * n - 1, ld = n_cols + 5;
                    std::vector<float> y(rows * ld, -1.0f);
                    std::atomic<int> tile_calls{0};
                    pool.parallel_for_stealable(n, chunk, UnitColumns{y.data(), rows, ld, 3, n_cols},
                                                ColumnsJob{y.data(), rows, ld, n_cols, &tile_calls, 0});
                    expect_columns(y, rows, ld, n_cols, "");
                    if (HasFailure()) FAIL() << threads << " threads, n=" << n << ", chunk=" << chunk;
                }
        }
    }
}

TEST(ThreadPool, AStealableJobTakesOverTheClaimOfADescheduledWorker) {
    // The worker sleeps 300 ms after its first claim (the OS descheduling it). Inside a StealScope the
    // caller computes that claim itself and returns without it; the worker's copy, computed when it wakes,
    // is dropped (out.y, refilled after the job, stays as it is). Outside a scope the job waits for it.
    ThreadPool pool(2);
    const int64_t n = 64, rows = 2, n_cols = 3 * n, ld = n_cols;
    std::vector<float> y(rows * ld);
    std::atomic<int> tile_calls{0};
    const ColumnsJob job{y.data(), rows, ld, n_cols, &tile_calls, 200};  // >= 6 ms of the caller's share
    {
        ThreadPool::StealScope scope(pool);
        for (int attempt = 0; attempt < 5 && pool.steals() == 0; ++attempt) {
            pool.run([](int, int) {});  // the worker awake and spinning
            pool.delay_next_claim_for_test(1, 300);
            std::fill(y.begin(), y.end(), -1.0f);
            tile_calls = 0;
            pool.parallel_for_stealable(n, 1, UnitColumns{y.data(), rows, ld, 3, n_cols}, job);
            expect_columns(y, rows, ld, n_cols, "the job with a stolen claim");
        }
        ASSERT_GE(pool.steals(), 1) << "the worker never claimed units in five tries";
        EXPECT_EQ(tile_calls.load(), 0) << "the job waited for the descheduled worker";
        // More jobs while the worker still sleeps: the caller does them alone.
        for (int rep = 0; rep < 3; ++rep) {
            std::fill(y.begin(), y.end(), -1.0f);
            pool.parallel_for_stealable(n, 1, UnitColumns{y.data(), rows, ld, 3, n_cols},
                                        ColumnsJob{y.data(), rows, ld, n_cols, &tile_calls, 0});
            expect_columns(y, rows, ld, n_cols, "a job beside the late worker");
        }
        std::fill(y.begin(), y.end(), 7.0f);
        pool.wait_for_late_workers();
        EXPECT_EQ(tile_calls.load(), 1) << "the late worker computes its stolen claim once, into its tile";
        for (float v : y) ASSERT_EQ(v, 7.0f) << "the late worker wrote a stolen claim into the output";
    }
    // Outside a scope nothing is stolen: the job returns once the worker has published its claims.
    const int64_t steals = pool.steals();
    pool.run([](int, int) {});
    pool.delay_next_claim_for_test(1, 50);
    std::fill(y.begin(), y.end(), -1.0f);
    tile_calls = 0;
    pool.parallel_for_stealable(n, 1, UnitColumns{y.data(), rows, ld, 3, n_cols}, job);
    expect_columns(y, rows, ld, n_cols, "outside a scope");
    EXPECT_EQ(pool.steals(), steals);
}

}  // namespace
}  // namespace gdn
