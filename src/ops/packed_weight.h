// A weight matrix in the panel layout the linear kernels stream: 32 output columns per panel, bf16 pairs,
// f32, or quantized blocks (ops/quant/quant_format.h). The format definition below the op API: the
// kernels (ops/cpu/linear_kernels.h, linear_quant_kernels.h) and the quantized formats include this,
// not ops/linear.h.
#pragma once

#include <cstdint>

#include "core/buffer.h"
#include "ops/quant/quant_format.h"
#include "ops/weight_format.h"

namespace gdn {

constexpr int64_t kPanelCols = 32;

struct PackedWeight {
    int64_t N = 0, K = 0;  // logical [N, K]
    int64_t K2 = 0;        // k-pairs (BF16) = ceil(K / 2)
    int64_t n_panels = 0;  // ceil(N / 32)
    int64_t n_blocks =
        0;  // quantized formats: blocks along k, of 32 k (Q8, Q4) or 256 (Q4K, Q6K): quant_format.h
    WeightFormat format = WeightFormat::BF16;
    int64_t nonfinite_blocks = 0;  // quantized from a source holding NaN / infinity (the loader refuses it)
    Buffer data;
    // Bytes of one panel: [K2, 32 columns, 2] bf16, [K, 32 columns] f32, or n_blocks quantized blocks.
    int64_t panel_bytes() const {
        switch (format) {
            case WeightFormat::BF16:
                return K2 * 2 * kPanelCols * int64_t{2};
            case WeightFormat::F32:
                return K * kPanelCols * int64_t{4};
            default:
                return n_blocks * quant::block_bytes(format);
        }
    }
    int64_t bytes() const { return n_panels * panel_bytes(); }
    const uint16_t* bf16_panel(int64_t p) const { return data.as<uint16_t>() + p * K2 * 2 * kPanelCols; }
    const float* f32_panel(int64_t p) const { return data.as<float>() + p * K * kPanelCols; }
    const uint8_t* quant_block(int64_t p, int64_t b) const {
        return data.as<uint8_t>() + (p * n_blocks + b) * quant::block_bytes(format);
    }
};

}  // namespace gdn
