// The int8 screen's layout (ops/argmax_screen.h): the lm_head's int8 copy with its per-column bound terms,
// and the per-call constants of a row. A format definition below the op API: the kernels that read it
// (ops/cpu/linear_kernels.h) include this, not the op.
#pragma once

#include <cstdint>

#include "core/buffer.h"

namespace gdn {

struct Int8Screen {
    int64_t N = 0, K = 0;
    int64_t K4 = 0;        // k-quads: ceil(K / 4)
    int64_t n_panels = 0;  // panels of 32 columns, as the bf16 packing
    Buffer q;              // [panel][K4][32 columns][4] int8 (a column's k-quad is one 32-bit lane: vpdpbusd)
    Buffer meta;           // per column (padded to whole panels), 5 arrays of n_panels * 32:
                           // s_n, |ew_n|, |W_n|, wmax_n (f32) and sum_k q_nk (int32)
    const float* scale() const { return meta.as<float>(); }
    const float* err_norm() const { return meta.as<float>() + cols(); }
    const float* wq_norm() const { return meta.as<float>() + 2 * cols(); }
    const float* wmax() const { return meta.as<float>() + 3 * cols(); }
    const int32_t* qsum() const { return meta.as<int32_t>() + 4 * cols(); }
    int64_t cols() const { return n_panels * 32; }
    const int8_t* panel(int64_t p) const { return q.as<int8_t>() + p * K4 * 128; }
};

// Per-call constants of the screen (from the row x), shared by every panel.
struct ScreenRow {
    float sx;      // x scale
    float c_err;   // multiplies |ew_n|:  |X| + |ex|
    float c_wq;    // multiplies |W_n|:   |ex|
    float c_wmax;  // multiplies wmax_n:  gamma_K Xabs (+ inputs below 2^-126, flushed by the exact kernel)
    float c_abs;  // absolute: weights below 2^-126 (flushed), denormal partial sums (flushed), bound rounding
};

}  // namespace gdn
