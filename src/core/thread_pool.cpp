#include "core/thread_pool.h"

#include <memory>

#include "core/log.h"

namespace gdn {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_start_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int ith) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int, int)>* job;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            job = job_;
        }
        (*job)(ith, n_threads_);
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (--pending_ == 0) cv_done_.notify_one();
        }
    }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mu_);
        job_ = &fn;
        pending_ = n_threads_ - 1;
        ++generation_;
    }
    cv_start_.notify_all();
    fn(0, n_threads_);
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    int nth = n_threads_;
    if (n < nth) nth = static_cast<int>(n);
    if (nth == 1) {
        fn(0, n);
        return;
    }
    run([&](int ith, int) {
        if (ith >= nth) return;
        int64_t b, e;
        split_range(n, ith, nth, &b, &e);
        if (b < e) fn(b, e);
    });
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
