// HugePageAllocator: a std::allocator for growing per-request arrays that a step appends to (a
// request's pending MTP rows): every allocation is whole 2 MiB huge pages (transparent huge pages,
// MADV_HUGEPAGE). Appending into fresh 4 KiB pages costs a page fault per page: at H = 1024 one per
// generated token per request (engine_speculative.cpp); on huge pages one per 512 rows (docs/perf.md,
// behind the constants).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

#include "core/buffer.h"

namespace gdn {

template <typename T>
struct HugePageAllocator {
    using value_type = T;
    // The elements one huge page holds: reserve this many, not fewer (smaller reservations still take
    // a whole huge page each).
    static constexpr size_t kPerPage = Buffer::kHugePage / sizeof(T);

    HugePageAllocator() = default;
    template <typename U>
    HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

    T* allocate(size_t n) {
        const size_t bytes = (n * sizeof(T) + Buffer::kHugePage - 1) / Buffer::kHugePage * Buffer::kHugePage;
        void* p = std::aligned_alloc(Buffer::kHugePage, bytes);
        if (!p) throw std::bad_alloc();
        ::madvise(p, bytes, MADV_HUGEPAGE);
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t) noexcept { std::free(p); }

    template <typename U>
    bool operator==(const HugePageAllocator<U>&) const noexcept {
        return true;
    }
};

}  // namespace gdn
