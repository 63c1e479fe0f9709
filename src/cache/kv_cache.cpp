#include "cache/kv_cache.h"

#include "core/log.h"

namespace gdn {

KvCache::KvCache(int n_layers, int64_t row_elems, int32_t n_blocks, int32_t block_size, DType dtype)
    : pool_(n_blocks, block_size), block_size_(block_size), row_(row_elems), dtype_(dtype) {
    GDN_CHECK(dtype == DType::F32 || dtype == DType::BF16, "KV cache dtype must be f32 or bf16");
    const size_t bytes = static_cast<size_t>(n_blocks) * block_size * row_elems * dtype_size(dtype);
    for (int l = 0; l < n_layers; ++l) {
        k_.emplace_back(bytes, false);
        v_.emplace_back(bytes, false);
    }
}

void KvCache::write_row(int layer, int64_t r, const float* k, const float* v) {
    const size_t off = static_cast<size_t>(r) * row_ * dtype_size(dtype_);
    convert_from_f32(k, dtype_, static_cast<char*>(k_[layer].data()) + off, row_);
    convert_from_f32(v, dtype_, static_cast<char*>(v_[layer].data()) + off, row_);
}

}  // namespace gdn
