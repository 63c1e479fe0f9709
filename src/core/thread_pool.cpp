#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "core/log.h"

namespace gdn {

namespace {
inline void cpu_relax() {
    __builtin_ia32_pause();
}

// Flush-to-zero and denormals-are-zero: values below 1e-38 carry no information for inference, and
// arithmetic on them costs ~100x (the GDN state decays geometrically into that range).
void set_flush_denormals() {
    unsigned csr = __builtin_ia32_stmxcsr();
    __builtin_ia32_ldmxcsr(csr | 0x8040);  // FTZ (bit 15) | DAZ (bit 6)
}
// How long an idle worker spins for the next job before it sleeps. Inside a model forward (a StealScope),
// while the worker runs on another CPU than the caller, longer than the OS takes the caller away for:
// when another process gets the caller's core (slices of 2-5 ms on the Zen 5 machine's kernel), a worker
// that slept meanwhile left its own core idle, the neighbour took that too, and the sleeper needed a
// wake-up when the caller came back. Beside a `nice -n 10` busy loop the loop then got 0.30-0.37 of a
// core instead of the ~0.10 its weight gives it (docs/perf.md, thirty-fourth session: 0.5 and 2 ms spun
// too short, 5 and 20 ms did not). On the caller's own CPU (an oversubscribed machine) spinning would
// only keep the caller from running, and between forwards the caller is idle or busy with host work
// (HTTP, tokenizing, a client on the same machine): there the worker sleeps soon.
constexpr std::chrono::microseconds kSpinInForward{20000};
constexpr std::chrono::microseconds kSpinBetweenForwards{500};
// Pauses between clock reads while spinning (a pause is 25-40 ns): a job that follows within this many
// pauses, the common case inside a step, costs no clock read.
constexpr int kPausesPerClockRead = 1024;
// The pool whose worker the calling thread is, and its index (null: not a pool worker).
thread_local const ThreadPool* tl_worker_of = nullptr;
thread_local int tl_worker_index = 0;
}  // namespace

ThreadScratch& ThreadPool::scratch() {
    if (tl_worker_of == this) return shares_[tl_worker_index].scratch;
    // The dispatching thread's: its own for its lifetime, whichever pool it dispatches on (a pool made
    // afresh, as set_global_threads() does, finds the buffers it grew warm).
    thread_local ThreadScratch dispatcher;
    return dispatcher;
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads < 1 ? 1 : n_threads), shares_(std::make_unique<Share[]>(n_threads_)) {
    set_flush_denormals();  // the calling thread runs share 0 of every job
    for (int i = 1; i < n_threads_; ++i)
        workers_.emplace_back([this, i] {
            set_flush_denormals();
            tl_worker_of = this;
            tl_worker_index = i;
            worker_loop(i);
        });
}

ThreadPool::~ThreadPool() {
    wait_for_late_workers();
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
        std::chrono::steady_clock::time_point spin_start{};
        for (int i = 1; gen == seen; ++i) {
            cpu_relax();
            gen = generation_.load(std::memory_order_acquire);
            if (i % kPausesPerClockRead != 0) continue;
            const auto now = std::chrono::steady_clock::now();
            if (i == kPausesPerClockRead) spin_start = now;
            if (now - spin_start < kSpinBetweenForwards) continue;
            const bool keep_core = steal_scopes_.load(std::memory_order_relaxed) > 0 &&
                                   sched_getcpu() != caller_cpu_.load(std::memory_order_relaxed);
            if (!keep_core || now - spin_start >= kSpinInForward) break;
        }
        if (gen == seen) {
            if (steal_scopes_.load(std::memory_order_relaxed) > 0)
                sleeps_in_forward_.fetch_add(1, std::memory_order_relaxed);
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
        if (job_stealable_.load(std::memory_order_acquire)) {
            work_stealable(ith, gen);
            continue;
        }
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

void ThreadPool::run(FunctionRef<void(int, int)> fn) {
    dispatch(fn, false);
}

uint64_t ThreadPool::publish_job() {
    caller_cpu_.store(sched_getcpu(), std::memory_order_relaxed);  // a worker on this CPU sleeps soon
    uint64_t gen;
    {
        // Publishing under the mutex orders the generation bump with a sleeper's predicate check.
        std::lock_guard<std::mutex> lock(mu_);
        gen = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
    }
    if (sleepers_.load() > 0) cv_start_.notify_all();
    return gen;
}

void ThreadPool::dispatch(FunctionRef<void(int, int)> fn, bool skippable) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    job_.store(&fn, std::memory_order_release);
    job_stealable_.store(false, std::memory_order_relaxed);
    pending_.store(n_threads_ - 1, std::memory_order_release);
    const uint64_t gen = publish_job();
    fn(0, n_threads_);
    if (skippable)  // every item is claimed: a worker that has not joined has nothing left to do
        for (int i = 1; i < n_threads_; ++i)
            if (close(i, gen)) pending_.fetch_sub(1, std::memory_order_acq_rel);
    while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
}

namespace {

// The piece of an unclaimed range [front, back) that one claim takes: (back - front) / divisor items, at
// least min_chunk, from the front or the back.
void guided_piece(int64_t front, int64_t back, int64_t min_chunk, int64_t divisor, bool from_front,
                  int64_t* begin, int64_t* end) {
    const int64_t take = std::max(min_chunk, (back - front) / divisor);
    *begin = from_front ? front : std::max(front, back - take);
    *end = from_front ? std::min(back, front + take) : back;
}

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
        guided_piece(front, back, min_chunk, divisor, from_front, begin, end);
        const uint64_t next = from_front
                                  ? (static_cast<uint64_t>(back) << 32 | static_cast<uint64_t>(*end))
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
        shares_[i].range.store(static_cast<uint64_t>(e) << 32 | static_cast<uint64_t>(b),
                               std::memory_order_relaxed);
    }
    dispatch(
        [&](int ith, int nt) {
            int64_t b, e;
            for (int k = 0; k < nt; ++k)
                if (claim(shares_[(ith + k) % nt].range, n, 1, true, &b, &e)) fn(b, e);
        },
        true);
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
        shares_[i].range.store(static_cast<uint64_t>(e) << 32 | static_cast<uint64_t>(b),
                               std::memory_order_relaxed);
    }
    // dispatch() publishes the shares (release) before any worker starts the job.
    dispatch(
        [&](int ith, int) {
            int64_t b, e;
            while (claim(shares_[ith].range, min_chunk, 2 * nth, true, &b, &e)) fn(ith, b, e);
            for (int k = 1; k < nth; ++k) {
                std::atomic<uint64_t>& other = shares_[(ith + k) % nth].range;
                while (claim(other, min_chunk, 2 * nth, false, &b, &e)) fn(ith, b, e);
            }
        },
        true);
}

namespace {

// A stealable job's claim states (the low byte of Share::claim).
enum ClaimState : uint64_t { kClaimed = 1, kPublishing = 2, kPublished = 3, kStolen = 4 };
uint64_t claim_word(uint64_t gen, uint64_t seq, ClaimState state) {
    return (gen & 0xFFFFFFFF) << 32 | (seq & 0xFFFFFF) << 8 | state;
}
// A stealable job's share range, tagged with its generation (only the low 32 bits of it: a worker would
// have to be descheduled across 2^32 jobs to mistake one for another).
uint64_t tagged_range(uint64_t gen, int64_t front, int64_t back) {
    return (gen & 0xFFFFFFFF) << 32 | static_cast<uint64_t>(back) << 16 | static_cast<uint64_t>(front);
}
// claim() for tagged ranges: false when nothing is left or the range is another job's.
bool claim_tagged(std::atomic<uint64_t>& range, uint64_t gen, int64_t min_chunk, int64_t divisor,
                  bool from_front, int64_t* begin, int64_t* end) {
    uint64_t r = range.load(std::memory_order_acquire);
    for (;;) {
        if ((r >> 32) != (gen & 0xFFFFFFFF)) return false;
        const int64_t front = static_cast<int64_t>(r & 0xFFFF);
        const int64_t back = static_cast<int64_t>((r >> 16) & 0xFFFF);
        if (front >= back) return false;
        guided_piece(front, back, min_chunk, divisor, from_front, begin, end);
        const uint64_t next = from_front ? tagged_range(gen, *end, back) : tagged_range(gen, front, *begin);
        if (range.compare_exchange_weak(r, next, std::memory_order_acq_rel)) return true;
    }
}
// Units [u0, u1) as output columns [c0, c1) of a UnitColumns.
void unit_cols(const UnitColumns& out, int64_t u0, int64_t u1, int64_t* c0, int64_t* c1) {
    *c0 = u0 * out.unit_cols;
    *c1 = std::min(out.n_cols, u1 * out.unit_cols);
}

}  // namespace

void ThreadPool::publish_units(const StealJob& job, const float* tile, int64_t u0, int64_t u1) {
    int64_t c0, c1;
    unit_cols(job.out, u0, u1, &c0, &c1);
    if (c1 <= c0) return;
    for (int64_t m = 0; m < job.out.rows; ++m)
        std::memcpy(job.out.y + m * job.out.ld + c0, tile + m * job.out.ld + c0, (c1 - c0) * sizeof(float));
}

void ThreadPool::run_stealable_job(const StealJob& job) {
    const int64_t n = job.n, min_chunk = std::max<int64_t>(job.min_chunk, 1);
    if (n <= 0) return;
    if (n_threads_ == 1 || n <= min_chunk) {
        job.call(job.blob, 0, n, job.out.y);
        return;
    }
    if (n > 0xFFFF) {  // beyond the tagged 16-bit ends (never a decode GEMV's panels): no stealing
        parallel_for_balanced(n, min_chunk,
                              [&](int, int64_t b, int64_t e) { job.call(job.blob, b, e, job.out.y); });
        return;
    }
    const int nth = n_threads_;
    // The workers' tiles grow here, on the caller, once no worker is in a stealable job: in the warm-up
    // steps that first run each shape, not in whichever step timing first hands a worker a claim.
    const size_t tile_floats = static_cast<size_t>(job.out.rows * job.out.ld);
    if (tile_floats_ < tile_floats) {
        wait_for_late_workers();
        for (int i = 1; i < nth; ++i) shares_[i].tile.resize(tile_floats);
        tile_floats_ = tile_floats;
    }
    const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;  // only this thread bumps it
    for (int i = 0; i < nth; ++i) {
        int64_t b, e;
        split_range(n, i, nth, &b, &e);
        shares_[i].steal_range.store(tagged_range(gen, b, e), std::memory_order_relaxed);
    }
    units_done_.store(0, std::memory_order_relaxed);
    uint64_t words[kStealWords] = {};
    std::memcpy(words, &job, sizeof(StealJob));
    for (int i = 0; i < kStealWords; ++i) steal_words_[i].store(words[i], std::memory_order_relaxed);
    job_stealable_.store(true, std::memory_order_relaxed);
    publish_job();
    // The caller's claims, as parallel_for_balanced's, straight into out.y.
    int64_t b, e, mine = 0;
    for (int k = 0; k < nth; ++k)
        while (claim_tagged(shares_[k].steal_range, gen, min_chunk, 2 * nth, k == 0, &b, &e)) {
            job.call(job.blob, b, e, job.out.y);
            mine += e - b;
        }
    units_done_.fetch_add(mine, std::memory_order_relaxed);
    for (int i = 1; i < nth; ++i) close(i, gen);  // a worker that has not joined has nothing left to do
    // Every unit is claimed: wait for the workers' claims to be published, or steal one that has run
    // kStealAfterUs (its worker is descheduled) and compute it here.
    using Clock = std::chrono::steady_clock;
    for (int spin = 0; units_done_.load(std::memory_order_acquire) < n; ++spin) {
        cpu_relax();
        if (steal_scopes_.load(std::memory_order_relaxed) == 0 || (spin & 63) != 63) continue;
        const Clock::time_point now = Clock::now();
        for (int i = 1; i < nth; ++i) {
            uint64_t c = shares_[i].claim.load(std::memory_order_acquire);
            if ((c >> 32) != (gen & 0xFFFFFFFF) || (c & 0xFF) != kClaimed) continue;
            if (c != shares_[i].watched_claim) {
                shares_[i].watched_claim = c;
                shares_[i].watched_since = now;
                continue;
            }
            if (now - shares_[i].watched_since < std::chrono::microseconds(kStealAfterUs)) continue;
            if (!shares_[i].claim.compare_exchange_strong(c, (c & ~uint64_t{0xFF}) | kStolen,
                                                          std::memory_order_acq_rel))
                continue;
            const uint64_t span = shares_[i].claim_span.load(std::memory_order_relaxed);
            const int64_t u0 = static_cast<int64_t>(span >> 32), u1 = static_cast<int64_t>(span & 0xFFFFFFFF);
            job.call(job.blob, u0, u1, job.out.y);
            units_done_.fetch_add(u1 - u0, std::memory_order_relaxed);
            steals_.fetch_add(1, std::memory_order_relaxed);
        }
    }
}

void ThreadPool::work_stealable(int ith, uint64_t gen) {
    Share& me = shares_[ith];
    // Copied before the join: the join succeeds only while the caller is still in job `gen`, so a copy
    // that raced with the next job's words is dropped with the failed join.
    uint64_t words[kStealWords];
    for (int i = 0; i < kStealWords; ++i) words[i] = steal_words_[i].load(std::memory_order_relaxed);
    me.inside.store(gen, std::memory_order_seq_cst);
    if (!join(ith, gen)) {
        me.inside.store(0, std::memory_order_release);
        return;
    }
    StealJob job;
    std::memcpy(&job, words, sizeof(StealJob));
    const int nth = n_threads_;
    const int64_t min_chunk = std::max<int64_t>(job.min_chunk, 1);
    uint64_t seq = 0;  // the claim's number in this job: a claim word names (job, claim)
    int64_t b, e;
    for (int k = 0; k < nth; ++k) {
        const int s = (ith + k) % nth;
        while (claim_tagged(shares_[s].steal_range, gen, min_chunk, 2 * nth, k == 0, &b, &e)) {
            const uint64_t claimed = claim_word(gen, ++seq, kClaimed);
            me.claim_span.store(static_cast<uint64_t>(b) << 32 | static_cast<uint64_t>(e),
                                std::memory_order_relaxed);
            me.claim.store(claimed, std::memory_order_release);
            if (me.claim_delay_ms.load(std::memory_order_relaxed) > 0)
                std::this_thread::sleep_for(std::chrono::milliseconds(me.claim_delay_ms.exchange(0)));
            job.call(job.blob, b, e, me.tile.data());
            uint64_t expect = claimed;
            if (!me.claim.compare_exchange_strong(expect, claim_word(gen, seq, kPublishing),
                                                  std::memory_order_acq_rel)) {
                // Stolen: the caller computed these units and may have left the job; every unit is
                // claimed, so there is nothing else to do.
                me.inside.store(0, std::memory_order_release);
                return;
            }
            publish_units(job, me.tile.data(), b, e);
            units_done_.fetch_add(e - b, std::memory_order_release);
            me.claim.store(claim_word(gen, seq, kPublished), std::memory_order_release);
        }
    }
    me.inside.store(0, std::memory_order_release);
}

void ThreadPool::wait_for_late_workers() {
    for (int i = 1; i < n_threads_; ++i)
        while (shares_[i].inside.load(std::memory_order_acquire) != 0) cpu_relax();
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
