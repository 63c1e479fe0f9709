// The execution context every op runs in: where its work is split (the thread pool) and who times it
// (the profiler). Ops take it as their first argument and reach nothing process-wide for these, so two
// models, an engine and a draft, or two ranks' worth of work in one process each run on their own.
//
// What joins it as the backends grow (one place to add them, no op signature changes):
//   - a communicator (tensor parallelism: the all-reduce after a row-split linear);
//   - a device and a stream (an accelerator backend: where TensorView / Buffer memory lives, and the
//     queue its kernels go to), with the count of device -> host reads its tests assert to be zero.
#pragma once

#include <cstddef>

namespace gdn {

class ThreadPool;
class Profiler;

class ExecContext {
  public:
    // pool: the threads ops split work over (the caller is thread 0). profiler: null, or the profiler
    // that records every op while it is enabled.
    explicit ExecContext(ThreadPool& pool, Profiler* profiler = nullptr)
        : pool_(&pool), profiler_(profiler) {}

    ThreadPool& pool() const { return pool_ ? *pool_ : process_pool(); }
    Profiler* profiler() const { return profiler_; }

    // The process's context: the process's pool (global_pool(), sized by --threads; looked up at each
    // use, so a context made before set_global_threads() resizes the pool follows it) and the process
    // profiler (`gdn profile` enables it). What the tools and tests hand to models and ops.
    static ExecContext process();

  private:
    ExecContext(std::nullptr_t, Profiler* profiler) : pool_(nullptr), profiler_(profiler) {}
    static ThreadPool& process_pool();

    ThreadPool* pool_;  // null: the process's pool
    Profiler* profiler_;
};

}  // namespace gdn
