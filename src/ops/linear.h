// Linear layers y = x @ W^T with weights prepared once at load.
//
// Packed layout (the CPU kernels' preferred form), panels of 32 output columns:
//   BF16 weights: [panel][K/2 pairs][32 cols][2]  (a k-pair of a column is one 32-bit lane: the
//                  operand layout of vdpbf16ps, and two exact f32 values by shift / mask)
//   F32 weights:  [panel][K][32 cols]
//   quantized:    [panel][blocks along K] of int8 / int4 / int6 values and scales (ops/quant/quant_format.h)
// F16 weights are widened to F32 at load (exact). The last panel and an odd K are zero-padded.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/buffer.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "ops/packed_weight.h"

namespace gdn {

struct Int8Screen;

// A linear layer: the weight as stored (for the reference kernel) and packed (for the fast kernels).
struct LinearWeight {
    TensorView view;  // [N, K]; may be empty when only the packed form exists (fused weights)
    PackedWeight packed;
    // The lm_head's int8 copy for the exact greedy argmax (ops/argmax_screen.h); null elsewhere.
    std::shared_ptr<const Int8Screen> screen;
    int64_t N() const { return packed.N ? packed.N : view.shape[0]; }
    int64_t K() const { return packed.K ? packed.K : view.shape[1]; }
};

// Packs one or more [N_i, K] matrices (same K, same dtype class) stacked along N into one layer, so
// several projections of the same input run as one GEMM (e.g. GDN q|k|v|z|b|a, attention q|k|v).
// With `quantize`, the packed form is that format (read from the parts' stored values) and `view` is
// left empty: the layer is the quantized weight everywhere, reference path included.
// rows_done: see quant::pack_quantized (quantized packing only; rows of the stack).
LinearWeight make_linear(const ExecContext& ctx, const std::vector<TensorView>& parts,
                         std::optional<WeightFormat> quantize = std::nullopt,
                         const std::function<void(int64_t n0, int64_t n1)>& rows_done = nullptr);

// The smallest parallel_for_balanced claim of a streaming pass over panels of `panel_bytes`, for a
// product of M rows. Claims start at a quarter of a share (guided), so streams stay long; the floor
// keeps the tail claims from costing more in the pool than they stream. Decode-sized products
// (M <= 16): ~128 KiB of weights. Larger M computes more per panel, so prefill keeps ~32 KiB and splits
// small matrices finely (the A/Bs behind both: docs/perf.md, behind the constants: ops/linear.h).
inline int64_t min_stream_panels(int64_t panel_bytes, int64_t M) {
    const int64_t floor_bytes = M <= 16 ? int64_t{128} << 10 : int64_t{32} << 10;
    return std::max<int64_t>(1, floor_bytes / std::max<int64_t>(panel_bytes, 1));
}

// Products of at most this many rows (decode steps, speculative verification) run as stealable jobs
// (ThreadPool::parallel_for_stealable): a worker the OS deschedules mid-claim costs the step the claim,
// not the time until it runs again. Each worker then computes into a private [M, N] tile.
constexpr int64_t kStealableRows = 16;

// Argmax over pieces computed in any order: (v, i) beats (bv, bi) if larger, or equal at a lower column
// (the reference's first maximum), so the id does not depend on which thread took which piece. i < 0:
// nothing yet.
inline bool argmax_better(float v, int64_t i, float bv, int64_t bi) {
    return i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi));
}

// y [M, N] = x [M, K] @ W^T, accumulated in f32. With bf16_act, x is rounded to bf16 (and bf16 dot
// products are used where the CPU has them). With round_out, y is rounded to bf16 as it is stored.
void linear(const ExecContext& ctx, const float* x, int64_t M, const LinearWeight& w, float* y, bool bf16_act,
            bool round_out = false);

// out [K] = row n of the logical [N, K] matrix, exactly as stored (packing keeps bf16 and f32 values
// exactly; quantized rows are dequantized: scale * q). Float formats: reads 4 bytes (a bf16 k-pair or
// an f32) of every 128 bytes of the row's panel.
void unpack_row(const PackedWeight& w, int64_t n, float* out);

// A gate|up projection packed for the fused SwiGLU: rows interleaved in blocks of 16 (gate 0..15, up 0..15,
// gate 16..31, ...), so one 32-column panel holds matching gate and up columns. Needs I % 16 == 0.
LinearWeight make_swiglu_linear(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                                std::optional<WeightFormat> quantize = std::nullopt);
// out [M, I] = silu(x @ gate^T) * (x @ up^T) for a make_swiglu_linear weight. The AVX-512 bf16 kernel
// applies it in the GEMM epilogue (the [M, 2I] products are never stored); other paths compute the
// products, then the activation.
void linear_swiglu(const ExecContext& ctx, const float* x, int64_t M, const LinearWeight& w, float* out,
                   bool bf16_act);

// True if linear() (swiglu: linear_swiglu() of a make_swiglu_linear weight) runs this weight on the
// AVX-512 bf16 dot kernels over the pool: linear_bf16dot (_swiglu) on x packed as bf16 pairs. The one
// statement of that choice (ops/linear_group.h schedules the same kernels).
bool uses_bf16_dot(const PackedWeight& w, bool swiglu, bool bf16_act);

// x [M, K] as bf16 pairs [M, K2] (RNE; odd K padded with 0): the operand of the AVX-512 bf16 dot
// kernels, rows over the pool (on one core it was a visible share of a prefill: docs/perf.md, twentieth
// session).
void pack_bf16_pairs_pooled(const ExecContext& ctx, const float* x, int64_t M, int64_t K, uint32_t* xp,
                            int64_t K2);

// ids[m] = argmax_n (x @ W^T)[m, n] (the first on ties), without materialising the [M, N] products where
// the kernel allows (greedy decoding over a large vocabulary). Equal to argmax over linear()'s output.
// With w.screen (bf16 mode, one row, AVX-512 VNNI) it streams the int8 copy and rechecks the few
// panels that can hold the maximum in bf16: the same id, half the bytes (ops/argmax_screen.h).
void linear_argmax(const ExecContext& ctx, const float* x, int64_t M, const LinearWeight& w, int32_t* ids,
                   bool bf16_act);

}  // namespace gdn
