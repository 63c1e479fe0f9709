// Memory a thread uses while it runs an op's work: one object per type per thread, made at first use and
// kept (grow-only buffers: no allocation per call once warm). ThreadPool::scratch() hands out the calling
// thread's: a worker's is owned by its pool, a dispatching thread's lives as long as that thread. So ops
// keep no thread_local buffers of their own, and two pools (two engines, a draft and a target) never
// share a worker's scratch.
//
// The key is the type: an op declares a struct of the buffers it needs (in its own file, so no two ops'
// buffers alias) and asks for it, scratch.get<GdnChunkBuffers>(). Only the thread that owns a scratch uses
// it; a pointer into it may be handed to a job's other threads for the job's duration.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

namespace gdn {

class ThreadScratch {
  public:
    template <class T>
    T& get() {
        const size_t id = type_id<T>();
        while (slots_.size() <= id) slots_.emplace_back(nullptr, [](void*) {});
        if (!slots_[id]) slots_[id] = Slot(new T(), [](void* p) { delete static_cast<T*>(p); });
        return *static_cast<T*>(slots_[id].get());
    }

  private:
    using Slot = std::unique_ptr<void, void (*)(void*)>;
    // A small dense number per type (the slot index): fixed the first time the type is asked for.
    template <class T>
    static size_t type_id() {
        static const size_t id = next_type_id().fetch_add(1);
        return id;
    }
    static std::atomic<size_t>& next_type_id() {
        static std::atomic<size_t> n{0};
        return n;
    }
    std::vector<Slot> slots_;
};

}  // namespace gdn
