#include "cache/kv_cache.h"

namespace gdn {

KvCache::KvCache(int n_layers, int64_t row_floats, int32_t n_blocks, int32_t block_size)
    : pool_(n_blocks), block_size_(block_size), row_(row_floats) {
    for (int l = 0; l < n_layers; ++l) {
        k_.emplace_back(static_cast<size_t>(n_blocks) * block_size * row_floats * sizeof(float), false);
        v_.emplace_back(static_cast<size_t>(n_blocks) * block_size * row_floats * sizeof(float), false);
    }
}

}  // namespace gdn
