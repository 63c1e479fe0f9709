// TensorView: a non-owning, strided view. Ownership lives in Buffer or the mmapped checkpoint; `space` says
// where the memory is (core/memory_space.h: host only for now).
//
// Dimension order is row-major as written: shape[0] is the outermost dimension, shape[rank-1] the
// innermost (contiguous when stride[rank-1] == 1). Strides are in ELEMENTS, not bytes.
// Linear weights follow PyTorch: W is [out, in] and y = x @ W^T.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/log.h"
#include "core/memory_space.h"

namespace gdn {

struct TensorView {
    DType dtype = DType::F32;
    int rank = 0;
    int64_t shape[4] = {1, 1, 1, 1};
    int64_t stride[4] = {0, 0, 0, 0};
    void* data = nullptr;
    MemorySpace space = MemorySpace::HOST;  // where `data` lives
    // DType::GGML: the ggml block type of the rows (ops/quant/ggml_types.h's GgmlType number); shape is the
    // logical element shape, strides count bytes (a row of K values is stride[rank-2] bytes of blocks).
    uint32_t ggml_type = 0;

    static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> dims) {
        TensorView t;
        t.dtype = dtype;
        t.data = data;
        t.rank = static_cast<int>(dims.size());
        GDN_CHECK(t.rank >= 1 && t.rank <= 4);
        int i = 0;
        for (int64_t d : dims) t.shape[i++] = d;
        int64_t s = 1;
        for (int d = t.rank - 1; d >= 0; --d) {
            t.stride[d] = s;
            s *= t.shape[d];
        }
        return t;
    }

    int64_t numel() const {
        int64_t n = 1;
        for (int i = 0; i < rank; ++i) n *= shape[i];
        return n;
    }
    bool is_contiguous() const {
        int64_t s = 1;
        for (int d = rank - 1; d >= 0; --d) {
            if (shape[d] != 1 && stride[d] != s) return false;
            s *= shape[d];
        }
        return true;
    }
    size_t nbytes() const {
        if (dtype == DType::GGML) return static_cast<size_t>(shape[0] * stride[0]);  // rows of blocks
        return static_cast<size_t>(numel()) * dtype_size(dtype);
    }
    template <typename T>
    T* ptr() const {
        return static_cast<T*>(data);
    }
    // Pointer to row `r` of a 2-D view (or the r-th outermost slice).
    void* row(int64_t r) const {
        return static_cast<char*>(data) + r * stride[0] * static_cast<int64_t>(dtype_size(dtype));
    }
    std::string shape_str() const;
};

}  // namespace gdn
