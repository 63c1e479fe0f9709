// Paged KV cache for the full-attention layers: a pool of fixed-size blocks with a free list, and one K
// and one V arena per attention layer, allocated once, contiguous, in the layout the attention kernel
// reads ([block][slot][Hkv * D], f32 or bf16). Requests own lists of block ids (block tables); nothing
// is copied or made contiguous per step. The block bookkeeping (refcounts, prefix-cache identities, LRU)
// is BlockPool's, pure logic. A bf16 cache (--kv-cache-dtype bf16) holds twice the tokens and
// is read at half the bandwidth; it rounds K and V unless they are bf16 values already (HF rounding).
#pragma once

#include <cstdint>
#include <vector>

#include "cache/block_pool.h"
#include "core/buffer.h"
#include "core/dtype.h"

namespace gdn {

class KvCache {
  public:
    // dtype: F32 or BF16 elements.
    KvCache(int n_layers, int64_t row_elems, int32_t n_blocks, int32_t block_size, DType dtype = DType::F32);
    BlockPool& pool() { return pool_; }
    const BlockPool& pool() const { return pool_; }
    int32_t block_size() const { return block_size_; }
    int n_layers() const { return static_cast<int>(k_.size()); }
    int64_t row_elems() const { return row_; }
    DType dtype() const { return dtype_; }
    void* k(int layer) { return k_[layer].data(); }
    void* v(int layer) { return v_[layer].data(); }
    // Stores one f32 row (row_elems values) at arena row r of a layer, converted to the cache's dtype.
    void write_row(int layer, int64_t r, const float* k, const float* v);
    // The K and V arenas (EngineConfig::prefault_memory touches them once at creation).
    std::vector<Buffer*> buffers() {
        std::vector<Buffer*> b;
        for (size_t l = 0; l < k_.size(); ++l) b.insert(b.end(), {&k_[l], &v_[l]});
        return b;
    }
    // Arena offset (in rows) of position pos of a sequence with this block table.
    int64_t slot_of(const int32_t* block_table, int64_t pos) const {
        return static_cast<int64_t>(block_table[pos / block_size_]) * block_size_ + pos % block_size_;
    }
    static size_t bytes_per_block(int n_layers, int64_t row_elems, int32_t block_size,
                                  DType dtype = DType::F32) {
        return 2ull * n_layers * row_elems * block_size * dtype_size(dtype);
    }

  private:
    BlockPool pool_;
    int32_t block_size_;
    int64_t row_;
    DType dtype_;
    std::vector<Buffer> k_, v_;
};

}  // namespace gdn
