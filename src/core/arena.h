// HugePageArena: many small, long-lived arrays packed into 2 MiB huge-page chunks (bump allocation,
// freed all at once with the arena).
//
// Why: a decode step streams the whole weights, which evicts the address translations of everything
// else. Each small array a step reads once (norm weights, conv taps, gate parameters: hundreds of 4-100
// KB arrays) then costs a page walk per 4 KiB page touched, far more than on 2 MiB pages (docs/perf.md,
// behind the constants: core/arena.h).
#pragma once

#include <cstddef>
#include <vector>

#include "core/buffer.h"

namespace gdn {

class HugePageArena {
  public:
    static constexpr size_t kChunk = Buffer::kHugePage;

    // n zeroed floats, 64-byte aligned, valid for the arena's lifetime. Arrays larger than a chunk get
    // a Buffer of their own (huge-page backed: Buffer's rule for >= 2 MiB).
    float* alloc_f32(size_t n) { return static_cast<float*>(alloc_bytes(n * sizeof(float))); }

    void* alloc_bytes(size_t bytes) {
        const size_t rounded = (bytes + Buffer::kAlign - 1) / Buffer::kAlign * Buffer::kAlign;
        if (rounded > kChunk) {
            large_.emplace_back(rounded);
            return large_.back().data();
        }
        if (chunks_.empty() || used_ + rounded > kChunk) {
            chunks_.emplace_back(kChunk);  // zeroed: the arrays come zeroed
            used_ = 0;
        }
        void* p = chunks_.back().as<char>() + used_;
        used_ += rounded;
        return p;
    }

  private:
    std::vector<Buffer> chunks_, large_;
    size_t used_ = 0;
};

}  // namespace gdn
