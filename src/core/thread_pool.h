// A fixed pool of worker threads. Every output is computed by exactly one call over a fixed range, so a
// kernel's result never depends on timing: run() and parallel_for() split by (thread index, thread
// count); parallel_for() and parallel_for_balanced() let timing decide only which thread computes a
// range, not its value. On a shared machine a worker may be descheduled for milliseconds: jobs whose
// ranges any thread can take do not wait for a worker that has not started them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gdn {

// A non-owning reference to a callable (no heap allocation, unlike std::function for large captures):
// the pool runs hundreds of small jobs per decode step and must not allocate.
template <typename Sig>
class FunctionRef;
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
public:
    template <typename F>
    FunctionRef(const F& f)  // NOLINT: implicit, like std::function
        : obj_(&f), call_([](const void* o, Args... a) -> R { return (*static_cast<const F*>(o))(a...); }) {}
    R operator()(Args... a) const { return call_(obj_, a...); }

private:
    const void* obj_;
    R (*call_)(const void*, Args...);
};

class ThreadPool {
public:
    // n_threads includes the calling thread (n_threads - 1 workers are started).
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // Runs fn(ith, nth) on every thread (the caller is thread 0) and waits for all.
    void run(FunctionRef<void(int ith, int nth)> fn);
    // Splits [0, n) into nth contiguous ranges and calls fn(begin, end) for each non-empty one, each
    // range by one thread: its own, or one that is done with its own while that thread has not started
    // (a worker the OS has descheduled, or one waking from sleep, is not waited for).
    // grain: the fewest items worth a thread (a dispatch costs about 1 us): at most ceil(n / grain)
    // threads take part, and n <= grain runs on the caller alone.
    void parallel_for(int64_t n, FunctionRef<void(int64_t begin, int64_t end)> fn, int64_t grain = 1);
    // For bandwidth-bound loops (decode GEMVs): [0, n) is cut into nth equal shares; thread i works
    // through share i from its front, then takes from the back of the shares still unfinished, so both
    // ends stay contiguous streams. Each claim takes 1/(2 nth) of what is left of a share, at least
    // min_chunk items (guided scheduling: long streams first, small pieces last). Calls fn(ith, begin,
    // end); each item is in exactly one call (one thread, or n <= min_chunk: a single call over [0, n)).
    // Why: the two vCPUs of the CI machine do not stream at the same rate; with fixed halves one thread
    // waited for the other during 15-20% of every decode GEMV (measured). Paired A/Bs of decode steps in
    // docs/perf.md.
    void parallel_for_balanced(int64_t n, int64_t min_chunk, FunctionRef<void(int ith, int64_t begin, int64_t end)> fn);

    // Test hook: worker ith sleeps this long before it joins its next job (an OS descheduling it).
    void delay_next_join_for_test(int ith, int milliseconds) { shares_[ith].delay_ms.store(milliseconds); }

private:
    void worker_loop(int ith);
    // run(), or with `skippable` a job whose items the threads claim (parallel_for, _balanced): once
    // the caller's fn returns every item is claimed, so a worker that has not joined yet is closed out
    // of the job (it skips it when it wakes) instead of waited for. One CAS on the worker's seat decides
    // between its join and the close.
    void dispatch(FunctionRef<void(int, int)> fn, bool skippable);
    bool join(int ith, uint64_t gen);   // the worker: false when the caller closed it out of job `gen`
    bool close(int ith, uint64_t gen);  // the caller: false when the worker has joined job `gen`

    int n_threads_;
    std::vector<std::thread> workers_;
    // Dispatch is lock-free on the hot path: workers spin briefly on `generation_` before sleeping on
    // the condition variable, so back-to-back small ops (a decode step has hundreds) cost ~1 us each
    // instead of a futex wake-up.
    std::mutex mu_;
    std::condition_variable cv_start_;
    std::atomic<const FunctionRef<void(int, int)>*> job_{nullptr};
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
    // parallel_for_balanced's shares: the unclaimed range [front, back) packed as back << 32 | front.
    // seat: the last job the thread joined (gen << 1) or was closed out of (gen << 1 | 1).
    struct alignas(64) Share {
        std::atomic<uint64_t> range{0};
        std::atomic<uint64_t> seat{0};
        std::atomic<int> delay_ms{0};  // delay_next_join_for_test
    };
    std::unique_ptr<Share[]> shares_;
};

// Range [begin, end) of thread ith out of nth for n items.
inline void split_range(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
    int64_t per = n / nth, extra = n % nth;
    *begin = ith * per + (ith < extra ? ith : extra);
    *end = *begin + per + (ith < extra ? 1 : 0);
}

// Items per thread for row loops of ops: the rows a thread must get to have at least kMinFloatsPerThread
// floats of work, given each row's (an op weighs any costlier per-row work in floats). Below it a
// dispatch costs more than it saves: a verify step's 4 rows of add_rms_norm at H = 256 took 1.3 us
// through the pool against 0.2 us for one row on the caller (the demo model's profile).
constexpr int64_t kMinFloatsPerThread = 8192;
inline int64_t row_grain(int64_t floats_per_row) {
    return floats_per_row >= kMinFloatsPerThread ? 1 : kMinFloatsPerThread / (floats_per_row > 0 ? floats_per_row : 1);
}

// The process-wide pool used by ops (set once at start-up from --threads).
ThreadPool& global_pool();
void set_global_threads(int n_threads);
int default_thread_count();

}  // namespace gdn
