// Paged KV cache for the full-attention layers: a pool of fixed-size blocks with a free list, and one K
// and one V arena per attention layer, allocated once, contiguous, in the layout the attention kernel
// reads ([block][slot][Hkv * D] f32). Requests own lists of block ids (block tables); nothing is
// copied or made contiguous per step.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/id_pool.h"
#include "core/buffer.h"

namespace gdn {

// Block bookkeeping only (no tensors): unit-testable without a model.
class BlockPool : public IdPool {
public:
    explicit BlockPool(int32_t n_blocks) : IdPool(n_blocks, "block") {}
    int32_t n_blocks() const { return size(); }
};

class KvCache {
public:
    KvCache(int n_layers, int64_t row_floats, int32_t n_blocks, int32_t block_size);
    BlockPool& pool() { return pool_; }
    const BlockPool& pool() const { return pool_; }
    int32_t block_size() const { return block_size_; }
    int64_t row_floats() const { return row_; }
    float* k(int layer) { return k_[layer].as<float>(); }
    float* v(int layer) { return v_[layer].as<float>(); }
    // Arena offset (in rows) of position pos of a sequence with this block table.
    int64_t slot_of(const int32_t* block_table, int64_t pos) const {
        return static_cast<int64_t>(block_table[pos / block_size_]) * block_size_ + pos % block_size_;
    }
    static size_t bytes_per_block(int n_layers, int64_t row_floats, int32_t block_size) {
        return 2ull * n_layers * row_floats * block_size * sizeof(float);
    }

private:
    BlockPool pool_;
    int32_t block_size_;
    int64_t row_;
    std::vector<Buffer> k_, v_;
};

}  // namespace gdn
