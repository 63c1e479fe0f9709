// Buffer: an owning, 64-byte aligned block of memory (RAII, move-only).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/log.h"
#include "core/memory_space.h"

namespace gdn {

class Buffer {
  public:
    static constexpr size_t kAlign = 64;
    static constexpr size_t kHugePage = 2u << 20;

    Buffer() = default;
    explicit Buffer(size_t bytes, bool zero = true) { allocate(bytes, zero); }
    ~Buffer() { std::free(data_); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    Buffer(Buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    Buffer& operator=(Buffer&& o) noexcept {
        if (this != &o) {
            std::free(data_);
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }

    // Where the bytes live (core/memory_space.h): a Buffer is host memory; a device backend's buffers
    // say theirs.
    MemorySpace space() const { return MemorySpace::HOST; }

    void allocate(size_t bytes, bool zero = true) {
        std::free(data_);
        size_ = bytes;
        // Large buffers (weights, caches) are 2 MiB aligned and their whole 2 MiB pages backed by
        // transparent huge pages: fewer TLB misses, and the hardware prefetchers are not stopped at every
        // 4 KiB page while streaming. The tail past the last whole huge page stays on 4 KiB pages and
        // only its bytes are touched: a huge page there is mostly padding (an int8 MoE expert's gate|up
        // of 2.1 MB was 4 MB resident, a Qwen3-Next layer's experts 1.6x their bytes).
        const bool huge = bytes >= kHugePage;
        const size_t align = huge ? kHugePage : kAlign;
        const size_t rounded = (bytes + align - 1) / align * align;
        data_ = rounded ? std::aligned_alloc(align, rounded) : nullptr;
        GDN_CHECK(rounded == 0 || data_ != nullptr, "out of memory allocating %zu bytes", bytes);
        if (huge) {
            const size_t head = bytes / kHugePage * kHugePage;
            ::madvise(data_, head, MADV_HUGEPAGE);
            if (rounded > head) ::madvise(static_cast<char*>(data_) + head, rounded - head, MADV_NOHUGEPAGE);
        }
        if (zero && data_) std::memset(data_, 0, huge ? bytes : rounded);
    }
    // Touches every page of a buffer just allocated without zeroing (its contents become zeros), so
    // the kernel's page faults and zeroing happen now instead of inside the first requests that use it.
    // Pages [page0, page1) of 4 KiB: callers split a large buffer over threads.
    void prefault(size_t page0, size_t page1) {
        volatile char* p = static_cast<char*>(data_);
        for (size_t i = page0; i < page1 && i * 4096 < size_; ++i) p[i * 4096] = 0;
    }
    size_t pages() const { return (size_ + 4095) / 4096; }
    void* data() const { return data_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(data_);
    }
    size_t size() const { return size_; }

  private:
    void* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace gdn
