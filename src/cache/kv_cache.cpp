#include "cache/kv_cache.h"

#include "core/log.h"

namespace gdn {

BlockPool::BlockPool(int32_t n_blocks) : n_blocks_(n_blocks), in_use_(n_blocks, 0) {
    free_.reserve(n_blocks);
    for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 handed out first
}

int32_t BlockPool::allocate() {
    if (free_.empty()) return -1;
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[b] = 1;
    return b;
}

void BlockPool::release(int32_t b) {
    GDN_CHECK(b >= 0 && b < n_blocks_ && in_use_[b], "releasing block %d that is not in use", b);
    in_use_[b] = 0;
    free_.push_back(b);
}

KvCache::KvCache(int n_layers, int64_t row_floats, int32_t n_blocks, int32_t block_size)
    : pool_(n_blocks), block_size_(block_size), row_(row_floats) {
    for (int l = 0; l < n_layers; ++l) {
        k_.emplace_back(static_cast<size_t>(n_blocks) * block_size * row_floats * sizeof(float), false);
        v_.emplace_back(static_cast<size_t>(n_blocks) * block_size * row_floats * sizeof(float), false);
    }
}

}  // namespace gdn
