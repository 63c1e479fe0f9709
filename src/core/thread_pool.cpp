#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "core/log.h"

namespace gdn {

namespace {
inline void cpu_relax() { __builtin_ia32_pause(); }

// Flush-to-zero and denormals-are-zero: values below 1e-38 carry no information for inference, and
// arithmetic on them costs ~100x (the GDN state decays geometrically into that range).
void set_flush_denormals() {
    unsigned csr = __builtin_ia32_stmxcsr();
    __builtin_ia32_ldmxcsr(csr | 0x8040);  // FTZ (bit 15) | DAZ (bit 6)
}
constexpr int kSpinIters = 20000;  // ~50-100 us of spinning before a worker sleeps
}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads < 1 ? 1 : n_threads), shares_(std::make_unique<Share[]>(n_threads_)) {
    set_flush_denormals();  // the calling thread runs share 0 of every job
    for (int i = 1; i < n_threads_; ++i)
        workers_.emplace_back([this, i] {
            set_flush_denormals();
            worker_loop(i);
        });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
        generation_.fetch_add(1);
    }
    cv_start_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int ith) {
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = generation_.load(std::memory_order_acquire);
        for (int i = 0; gen == seen && i < kSpinIters; ++i) {
            cpu_relax();
            gen = generation_.load(std::memory_order_acquire);
        }
        if (gen == seen) {
            std::unique_lock<std::mutex> lock(mu_);
            sleepers_.fetch_add(1);
            cv_start_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
            sleepers_.fetch_sub(1);
            gen = generation_.load(std::memory_order_acquire);
        }
        if (stop_.load()) return;
        seen = gen;
        if (shares_[ith].delay_ms.load(std::memory_order_relaxed) > 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(shares_[ith].delay_ms.exchange(0)));
        if (!join(ith, gen)) continue;  // closed out: the caller did (or took) this thread's part
        (*job_.load(std::memory_order_acquire))(ith, n_threads_);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

bool ThreadPool::join(int ith, uint64_t gen) {
    std::atomic<uint64_t>& seat = shares_[ith].seat;
    uint64_t v = seat.load(std::memory_order_acquire);
    // Seats only grow: one behind `gen` means undecided; at or past it, closed (or a later job's: this
    // worker read a generation the caller has finished since).
    return (v >> 1) < gen && seat.compare_exchange_strong(v, gen << 1, std::memory_order_acq_rel);
}

bool ThreadPool::close(int ith, uint64_t gen) {
    std::atomic<uint64_t>& seat = shares_[ith].seat;
    uint64_t v = seat.load(std::memory_order_acquire);
    return (v >> 1) < gen && seat.compare_exchange_strong(v, gen << 1 | 1, std::memory_order_acq_rel);
}

void ThreadPool::run(FunctionRef<void(int, int)> fn) { dispatch(fn, false); }

void ThreadPool::dispatch(FunctionRef<void(int, int)> fn, bool skippable) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    job_.store(&fn, std::memory_order_release);
    pending_.store(n_threads_ - 1, std::memory_order_release);
    uint64_t gen;
    {
        // Publishing under the mutex orders the generation bump with a sleeper's predicate check.
        std::lock_guard<std::mutex> lock(mu_);
        gen = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
    }
    if (sleepers_.load() > 0) cv_start_.notify_all();
    fn(0, n_threads_);
    if (skippable)  // every item is claimed: a worker that has not joined has nothing left to do
        for (int i = 1; i < n_threads_; ++i)
            if (close(i, gen)) pending_.fetch_sub(1, std::memory_order_acq_rel);
    while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
}

namespace {

// Claims items from the front (the share's owner) or the back (a thread whose own share is done) of a
// share's unclaimed range: a quarter of what is left with two threads (guided scheduling), never fewer
// than min_chunk. Early claims are long streams; the last ones are small, so the threads finish within
// a small chunk of each other. False when nothing is left.
bool claim(std::atomic<uint64_t>& range, int64_t min_chunk, int64_t divisor, bool from_front, int64_t* begin,
           int64_t* end) {
    uint64_t r = range.load(std::memory_order_relaxed);
    for (;;) {
        const int64_t front = static_cast<uint32_t>(r), back = static_cast<int64_t>(r >> 32);
        if (front >= back) return false;
        const int64_t take = std::max(min_chunk, (back - front) / divisor);
        *begin = from_front ? front : std::max(front, back - take);
        *end = from_front ? std::min(back, front + take) : back;
        const uint64_t next = from_front ? (static_cast<uint64_t>(back) << 32 | static_cast<uint64_t>(*end))
                                         : (static_cast<uint64_t>(*begin) << 32 | static_cast<uint64_t>(front));
        if (range.compare_exchange_weak(r, next, std::memory_order_relaxed)) return true;
    }
}

}  // namespace

void ThreadPool::parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    const int nth = static_cast<int>(std::min<int64_t>(n_threads_, (n + grain - 1) / grain));
    if (nth == 1) {
        fn(0, n);
        return;
    }
    if (n >= (int64_t{1} << 32)) {  // beyond the packed 32-bit ends: every thread its own range
        run([&](int ith, int nt) {
            int64_t b, e;
            split_range(n, ith, nt, &b, &e);
            if (b < e) fn(b, e);
        });
        return;
    }
    // The ranges of split_range(n, i, nth), each claimed whole: by its thread, or by one done with its own.
    for (int i = 0; i < n_threads_; ++i) {
        int64_t b = 0, e = 0;
        if (i < nth) split_range(n, i, nth, &b, &e);
        shares_[i].range.store(static_cast<uint64_t>(e) << 32 | static_cast<uint64_t>(b), std::memory_order_relaxed);
    }
    dispatch([&](int ith, int nt) {
        int64_t b, e;
        for (int k = 0; k < nt; ++k)
            if (claim(shares_[(ith + k) % nt].range, n, 1, true, &b, &e)) fn(b, e);
    }, true);
}

void ThreadPool::parallel_for_balanced(int64_t n, int64_t min_chunk,
                                       FunctionRef<void(int ith, int64_t begin, int64_t end)> fn) {
    if (n <= 0) return;
    min_chunk = std::max<int64_t>(min_chunk, 1);
    const int nth = n_threads_;
    if (nth == 1 || n <= min_chunk) {
        fn(0, 0, n);
        return;
    }
    if (n >= (int64_t{1} << 32)) {  // beyond the packed 32-bit ends (never a weight's panels): fixed shares
        run([&](int ith, int) {
            int64_t b, e;
            split_range(n, ith, nth, &b, &e);
            if (b < e) fn(ith, b, e);
        });
        return;
    }
    for (int i = 0; i < nth; ++i) {
        int64_t b, e;
        split_range(n, i, nth, &b, &e);
        shares_[i].range.store(static_cast<uint64_t>(e) << 32 | static_cast<uint64_t>(b), std::memory_order_relaxed);
    }
    // dispatch() publishes the shares (release) before any worker starts the job.
    dispatch([&](int ith, int) {
        int64_t b, e;
        while (claim(shares_[ith].range, min_chunk, 2 * nth, true, &b, &e)) fn(ith, b, e);
        for (int k = 1; k < nth; ++k) {
            std::atomic<uint64_t>& other = shares_[(ith + k) % nth].range;
            while (claim(other, min_chunk, 2 * nth, false, &b, &e)) fn(ith, b, e);
        }
    }, true);
}

namespace {
std::unique_ptr<ThreadPool> g_pool;
std::mutex g_pool_mu;
}  // namespace

int default_thread_count() {
    unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool& global_pool() {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (!g_pool) g_pool = std::make_unique<ThreadPool>(default_thread_count());
    return *g_pool;
}

void set_global_threads(int n_threads) {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (g_pool && g_pool->size() == n_threads) return;
    g_pool = std::make_unique<ThreadPool>(n_threads < 1 ? 1 : n_threads);
}

}  // namespace gdn
