// Where an attention layer's keys and values live, as the op API hands them to the kernels: a plain
// struct of pointers and strides, no backend type (ops/layers.h's AttnSeq holds one; the CPU kernels read
// through it).
#pragma once

#include <cstdint>

namespace gdn {

// Where key j's K and V rows live: contiguous (block_table == nullptr: row j at base + j * stride) or paged
// (row j in block block_table[j / block_size], slot j % block_size). Elements are f32, or bf16 (uint16)
// when bf16 (--kv-cache-dtype bf16: half the bytes; the kernels widen them exactly while loading).
struct KvRows {
    const void* k_base;
    const void* v_base;
    int64_t stride;  // elements per row (Hkv * D)
    const int32_t* block_table;
    int64_t block_size;
    bool bf16 = false;
    int64_t row(int64_t j) const {
        return block_table
                   ? (static_cast<int64_t>(block_table[j / block_size]) * block_size + j % block_size) *
                         stride
                   : j * stride;
    }
    template <typename E>
    const E* k(int64_t j) const {
        return static_cast<const E*>(k_base) + row(j);
    }
    template <typename E>
    const E* v(int64_t j) const {
        return static_cast<const E*>(v_base) + row(j);
    }
};

}  // namespace gdn
