// Per-ISA kernels of the quantized formats (ops/quant/quant_format.h). Each computes the columns of
// panels [p0, p1) for all x.M rows into y [M, ldy]; threading is done by the caller (ops/linear_quant.cpp).
// The *_swiglu kernels take a gate|up weight packed for the fused SwiGLU (ops/linear.h: each panel 16 gate
// columns then the 16 matching up columns) and store silu(gate) x up: panel p's 16 activations at
// column p * 16 of y.
#pragma once

#include <cstdint>

#include "ops/packed_weight.h"

namespace gdn::cpu {

using QuantGemmKernel = void(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                             int64_t p0, int64_t p1);

}  // namespace gdn::cpu

namespace gdn::cpu::avx2 {
// int8 x int8 with vpmaddubsw: the activation's |x| is the unsigned operand and its sign moves onto
// the weight (vpsignb), so no pair sum can saturate (2 * 127 * 127 < 2^15).
QuantGemmKernel linear_q8, linear_q8_swiglu;
// int4 (stored q + 8 in [0, 15]) x int8 with vpmaddubsw, the weight unsigned; int16 sums over a whole
// group of 32 (8 * 2 * 15 * 127 < 2^15), the +8 offset removed once per group with the row's sum.
QuantGemmKernel linear_q4, linear_q4_swiglu;
// int4-k (q in [0, 15], a 6-bit scale and minimum per group of two f16 per 256 k) with vpmaddubsw as
// linear_q4, the minimum applied with the row's group sum.
QuantGemmKernel linear_q4k, linear_q4k_swiglu;
// int6-k (q in [-32, 31], an int8 scale per group of one f16 per 256 k) with vpmaddubsw on q + 32,
// the offset removed with the row's group sum.
QuantGemmKernel linear_q6k, linear_q6k_swiglu;
// quant::quantize_activation_row, vectorised: the same bytes (max, one division, RNE conversion).
void quantize_activation_row(const float* x_row, quant::QuantizedRows* out, int64_t m);
}  // namespace gdn::cpu::avx2

// The same kernels built for AVX-VNNI (256-bit vpdpbusd; quant_tiles_avx2.h): bitwise the AVX2 results.
namespace gdn::cpu::avxvnni {
QuantGemmKernel linear_q8, linear_q8_swiglu, linear_q4, linear_q4_swiglu, linear_q4k, linear_q4k_swiglu,
    linear_q6k, linear_q6k_swiglu;
}  // namespace gdn::cpu::avxvnni

namespace gdn::cpu::avx512 {
// int8 x int8 with vpdpbusd (AVX-512 VNNI): the weight made unsigned (q ^ 0x80 = q + 128), the offset
// removed through the row's group sum.
QuantGemmKernel linear_q8, linear_q8_swiglu;
// int4 (stored q + 8 in [0, 15], unsigned as it is) x int8 with vpdpbusd, offset removed the same way.
QuantGemmKernel linear_q4, linear_q4_swiglu;
// int4-k (q in [0, 15], unsigned as stored) x int8 with vpdpbusd; the group's scale and minimum in f32.
QuantGemmKernel linear_q4k, linear_q4k_swiglu;
// int6-k on q + 32 in [0, 63] with vpdpbusd, the offset removed through the row's group sum.
QuantGemmKernel linear_q6k, linear_q6k_swiglu;
// int8-x as int8, each half group (16 k) in its own accumulators with its own f32 scale and offset, the
// +128 offset removed through the half's sum (xsum_lo, and xsum - xsum_lo).
QuantGemmKernel linear_q8x, linear_q8x_swiglu;
// int6-k16 (llama.cpp's Q6_K) as int6-k with each half group's own accumulators and scale level.
QuantGemmKernel linear_q6k16, linear_q6k16_swiglu;
// quant::quantize_activation_row with 512-bit lanes (AVX-512 F/BW/DQ/VL): the same bytes.
void quantize_activation_row(const float* x_row, quant::QuantizedRows* out, int64_t m);
// The products of every format on AMX-INT8 tiles (linear_quant_amx.cpp): bitwise the VNNI kernels' outputs.
// The op layer runs them from amx_min_rows(format) rows on, where dispatch.h has_amx_int8() (the kernel
// table's tiles_gemm / tiles_swiglu); the VNNI kernels take the smaller batches.
// Measured on the 0.8B shape's decode steps (`gdn bench --concurrency`, docs/perf.md): int8 2 rows
// faster on vpdpbusd, 3 the same; int4-k / int6-k faster on tiles from 2 rows (their VNNI tiles unpack
// and widen per tile); int4 faster on vpdpbusd up to 6 rows, the same at 8, slower from 12.
constexpr int64_t amx_min_rows(WeightFormat f) {
    return f == WeightFormat::Q8 ? 4 : f == WeightFormat::Q4 ? 8 : 2;
}
template <WeightFormat F, bool kSwiglu>
void amx_quant_panels(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                      int64_t p1);
}  // namespace gdn::cpu::avx512
