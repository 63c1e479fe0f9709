// A fixed pool of worker threads. Every output is computed by exactly one call over a fixed range, so a
// kernel's result never depends on timing: run() and parallel_for() split by (thread index, thread
// count); parallel_for() and parallel_for_balanced() let timing decide only which thread computes a
// range, not its value. On a shared machine a worker may be descheduled for milliseconds: jobs whose
// ranges any thread can take do not wait for a worker that has not started them, and stealable jobs
// (parallel_for_stealable) not for one that has started a claim either.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/thread_scratch.h"

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

// Where the units of a stealable job write: y [rows, ld]; unit u fills columns
// [u * unit_cols, min(n_cols, (u + 1) * unit_cols)) of every row and nothing else.
struct UnitColumns {
    float* y = nullptr;
    int64_t rows = 0, ld = 0, unit_cols = 0, n_cols = 0;
};

class ThreadPool {
  public:
    // n_threads includes the calling thread (n_threads - 1 workers are started).
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // The calling thread's scratch (core/thread_scratch.h): inside a job a worker's own, owned by the
    // pool; on the dispatching thread (thread 0) that thread's, kept for its lifetime.
    ThreadScratch& scratch();
    // Runs fn(ith, nth) on every thread (the caller is thread 0) and waits for all.
    void run(FunctionRef<void(int ith, int nth)> fn);
    // Splits [0, n) into nth contiguous ranges and calls fn(begin, end) for each non-empty one, each
    // range by one thread: its own, or one that is done with its own while that thread has not started
    // (a worker the OS has descheduled, or one waking from sleep, is not waited for).
    // grain: the fewest items worth a thread (a dispatch has a fixed cost): at most ceil(n / grain)
    // threads take part, and n <= grain runs on the caller alone.
    void parallel_for(int64_t n, FunctionRef<void(int64_t begin, int64_t end)> fn, int64_t grain = 1);
    // For bandwidth-bound loops (decode GEMVs): [0, n) is cut into nth equal shares; thread i works
    // through share i from its front, then takes from the back of the shares still unfinished, so both
    // ends stay contiguous streams. Each claim takes 1/(2 nth) of what is left of a share, at least
    // min_chunk items (guided scheduling: long streams first, small pieces last). Calls fn(ith, begin,
    // end); each item is in exactly one call (one thread, or n <= min_chunk: a single call over [0, n)).
    // Why: the vCPUs of a shared machine do not stream at the same rate, and with fixed halves one thread
    // waited for the other (docs/perf.md, behind the constants: core/thread_pool.h).
    void parallel_for_balanced(int64_t n, int64_t min_chunk,
                               FunctionRef<void(int ith, int64_t begin, int64_t end)> fn);

    // parallel_for_balanced for jobs whose units are pure functions of memory that no unit writes, each
    // unit writing only its own columns of out.y (UnitColumns): the decode GEMVs. fn(u0, u1, dst) writes
    // units [u0, u1) into dst, a matrix of out.y's shape: out.y itself when the caller computes them, a
    // worker's private tile otherwise, which the worker then publishes into out.y unless the caller has
    // stolen the claim. Inside a StealScope the caller steals a worker's claim that has run for
    // kStealAfterUs (the OS has descheduled that worker: each slice a competing process gets on its core
    // stalled the whole step) and computes it itself; the job returns while the worker may still be
    // computing its copy, which it then drops. fn must be trivially copyable (it is copied into the pool,
    // so capture by value: pointers to memory that lives until the scope ends) and at most
    // kStealBlobBytes. Outside a scope no claim is stolen and the job returns when every unit is in out.y.
    template <class F>
    void parallel_for_stealable(int64_t n, int64_t min_chunk, const UnitColumns& out, const F& fn) {
        static_assert(std::is_trivially_copyable_v<F> && sizeof(F) <= kStealBlobBytes && alignof(F) <= 16,
                      "a stealable job is copied into the pool: capture pointers and sizes by value");
        StealJob job;
        job.call = [](const void* blob, int64_t u0, int64_t u1, float* dst) {
            (*std::launder(reinterpret_cast<const F*>(blob)))(u0, u1, dst);
        };
        job.out = out;
        job.n = n;
        job.min_chunk = min_chunk;
        std::memcpy(job.blob, &fn, sizeof(F));
        run_stealable_job(job);
    }
    static constexpr size_t kStealBlobBytes = 96;
    // Longer than any claim of a worker that runs, shorter than an OS descheduling (docs/perf.md, behind
    // the constants: core/thread_pool.h).
    static constexpr int kStealAfterUs = 150;

    // While one is alive (on the thread that dispatches: a model forward), stealable jobs steal from
    // descheduled workers, and idle workers on another CPU than the caller spin longer before they
    // sleep (the next job comes within microseconds unless the OS has taken the caller's core); the
    // scope's end, and wait_for_late_workers(), wait until no worker still computes a stolen claim (it
    // reads the job's inputs: memory they read must not be freed before). Nests.
    class StealScope {
      public:
        explicit StealScope(ThreadPool& pool) : pool_(pool) { ++pool_.steal_scopes_; }
        ~StealScope() {
            if (--pool_.steal_scopes_ == 0) pool_.wait_for_late_workers();
        }
        StealScope(const StealScope&) = delete;
        StealScope& operator=(const StealScope&) = delete;

      private:
        ThreadPool& pool_;
    };
    // Waits until no worker is inside a stealable job (cheap when none is): before freeing memory that a
    // stolen claim may still read. Called on the dispatching thread, between jobs.
    void wait_for_late_workers();
    // Claims stolen from descheduled workers so far (tests, profiles).
    int64_t steals() const { return steals_.load(std::memory_order_relaxed); }
    // Times a worker went to sleep inside a StealScope (profiles): ~0 on a machine with a core for every
    // thread; more when a worker shared the caller's CPU or the caller was away longer than the spin.
    int64_t sleeps_in_forward() const { return sleeps_in_forward_.load(std::memory_order_relaxed); }

    // Test hook: worker ith sleeps this long before it joins its next job (an OS descheduling it).
    void delay_next_join_for_test(int ith, int milliseconds) { shares_[ith].delay_ms.store(milliseconds); }
    // Test hook: worker ith sleeps this long after it claims its next units of a stealable job.
    void delay_next_claim_for_test(int ith, int milliseconds) {
        shares_[ith].claim_delay_ms.store(milliseconds);
    }

  private:
    // A stealable job as copied into the pool: trivially copyable, published as words (steal_words_).
    struct StealJob {
        void (*call)(const void* blob, int64_t u0, int64_t u1, float* dst) = nullptr;
        UnitColumns out;
        int64_t n = 0, min_chunk = 1;
        alignas(16) unsigned char blob[kStealBlobBytes];
    };
    static constexpr int kStealWords = (sizeof(StealJob) + 7) / 8;
    void run_stealable_job(const StealJob& job);
    void work_stealable(int ith, uint64_t gen);  // a worker's side of a stealable job
    // Units [u0, u1) of the job's columns from a tile of out.y's shape into out.y.
    static void publish_units(const StealJob& job, const float* tile, int64_t u0, int64_t u1);
    void worker_loop(int ith);
    // run(), or with `skippable` a job whose items the threads claim (parallel_for, _balanced): once
    // the caller's fn returns every item is claimed, so a worker that has not joined yet is closed out
    // of the job (it skips it when it wakes) instead of waited for. One CAS on the worker's seat decides
    // between its join and the close.
    void dispatch(FunctionRef<void(int, int)> fn, bool skippable);
    // The job's words are stored: notes the caller's CPU, bumps the generation (under the mutex) and
    // wakes sleeping workers. Returns the job's generation.
    uint64_t publish_job();
    bool join(int ith, uint64_t gen);   // the worker: false when the caller closed it out of job `gen`
    bool close(int ith, uint64_t gen);  // the caller: false when the worker has joined job `gen`

    int n_threads_;
    std::vector<std::thread> workers_;
    // Dispatch is lock-free on the hot path: workers spin on `generation_` before sleeping on the
    // condition variable (inside a StealScope and on another CPU than the caller for the long spin, so a
    // worker keeps its core while the OS has the caller off its own; otherwise the short one:
    // thread_pool.cpp), so back-to-back small ops (a decode step has hundreds) cost a few atomics each
    // instead of a futex wake-up.
    std::mutex mu_;
    std::condition_variable cv_start_;
    std::atomic<const FunctionRef<void(int, int)>*> job_{nullptr};
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
    std::atomic<bool> job_stealable_{false};  // the published job's kind (read after its generation)
    std::atomic<uint64_t> steal_words_[kStealWords];
    std::atomic<int64_t> units_done_{0};  // a stealable job's units in out.y
    std::atomic<int64_t> steals_{0};
    std::atomic<int64_t> sleeps_in_forward_{0};
    std::atomic<int> steal_scopes_{0};  // changed by the dispatching thread; workers read it to spin
    std::atomic<int> caller_cpu_{-1};   // the CPU the dispatching thread last published a job from
    size_t tile_floats_ = 0;            // every worker's tile holds this many floats
    // parallel_for_balanced's shares: the unclaimed range [front, back) packed as back << 32 | front.
    // seat: the last job the thread joined (gen << 1) or was closed out of (gen << 1 | 1).
    // Stealable jobs: steal_range is the share's unclaimed range tagged with the job's generation
    // (gen << 32 | back << 16 | front), so a worker late from an earlier job claims nothing of a later
    // one; claim is the worker's current claim, gen << 32 | seq << 8 | state (ClaimState), its units
    // in claim_span (u0 << 32 | u1, written before the claim); inside: the generation of the stealable
    // job the worker is in, 0 when none (wait_for_late_workers).
    struct alignas(64) Share {
        std::atomic<uint64_t> range{0};
        std::atomic<uint64_t> seat{0};
        std::atomic<int> delay_ms{0};        // delay_next_join_for_test
        std::atomic<int> claim_delay_ms{0};  // delay_next_claim_for_test
        std::atomic<uint64_t> steal_range{0};
        std::atomic<uint64_t> claim{0};
        std::atomic<uint64_t> claim_span{0};
        std::atomic<uint64_t> inside{0};
        std::vector<float> tile;  // the worker's private output tile (grown by the caller between jobs)
        ThreadScratch scratch;    // the worker's op scratch (scratch(); share 0's is unused)
        // The caller's watch on this worker's claim: the claim word last seen and since when.
        uint64_t watched_claim = 0;
        std::chrono::steady_clock::time_point watched_since;
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
// dispatch costs more than it saves (docs/perf.md, behind the constants: core/thread_pool.h).
constexpr int64_t kMinFloatsPerThread = 8192;
inline int64_t row_grain(int64_t floats_per_row) {
    return floats_per_row >= kMinFloatsPerThread
               ? 1
               : kMinFloatsPerThread / (floats_per_row > 0 ? floats_per_row : 1);
}

// The process's pool (sized once at start-up from --threads): what ExecContext::process() hands to ops.
// Ops and the model never call it: they use the pool of the context they were given.
ThreadPool& global_pool();
// Grows v to at least n elements, first waiting out pool's late workers when the storage moves: a
// buffer that a stealable job reads (a linear's input) may still be read by a worker whose claim was
// stolen. Every grow-only buffer of the forward that feeds a linear grows through it.
template <class Vec>
void grow_read_buffer(ThreadPool& pool, Vec& v, size_t n) {
    if (v.size() >= n) return;
    if (v.capacity() < n) pool.wait_for_late_workers();
    v.resize(n);
}
void set_global_threads(int n_threads);
int default_thread_count();

}  // namespace gdn
