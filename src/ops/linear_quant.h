// The kernel table of the quantized weight formats: one row per (ISA, format), naming the kernel that
// runs. A new format is one file of kernels (ops/cpu/<isa>/) plus one row here; linear() in
// ops/linear.cpp dispatches to it whenever the packed weight's format is quantized.
//
// Rows without a fused SwiGLU epilogue or argmax run those ops as "products, then the activation /
// the scan" (ops/linear.cpp), which the table reports.
#pragma once

#include <cstdint>
#include <string>

#include "ops/dispatch.h"
#include "ops/linear.h"

namespace gdn {

class LinearInput;  // ops/linear_input.h

// y [M, ldy] columns of panels [p0, p1) from quantized activation rows.
using QuantGemmFn = void (*)(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy,
                             int64_t p0, int64_t p1);

// Row m of x quantized into rows (already sized): the activation work of a quantized linear.
using QuantizeRowFn = void (*)(const float* x_row, quant::QuantizedRows* rows, int64_t m);

// What a kernel row needs beyond its ISA.
enum class CpuNeed { NOTHING, AVX512_VNNI, AVX_VNNI /* and has_avx_vnni() on */ };

struct QuantKernelRow {
    Isa isa;
    WeightFormat format;
    const char* name;  // what runs, e.g. "avx2 vpmaddubsw"
    CpuNeed need;      // the row applies only where this holds
    QuantizeRowFn quantize;
    QuantGemmFn gemm;
    QuantGemmFn swiglu;  // the gemm with the SwiGLU epilogue (y: the activation, ldy = I); null: products,
                         // then ops::swiglu
    bool fused_argmax;   // false: products, then a scan
    // The same products on AMX-INT8 tiles, for batches of amx_min_rows(format) rows or more where the
    // process uses AMX (dispatch.h has_amx_int8()); null: none.
    QuantGemmFn tiles_gemm = nullptr;
    QuantGemmFn tiles_swiglu = nullptr;
};

// The row the kernels of `format` use on `isa` (every pair has one; REF is the scalar reference).
const QuantKernelRow& quant_kernel(Isa isa, WeightFormat format);

// y [M, N] = x [M, K] @ W^T for a quantized W: x quantized per row and group (quant_format.h), then
// the table's gemm for op_isa(LINEAR), threaded over panels. round_out rounds y to bf16. in: x as a
// shared input (ops/linear_input.h) whose kept quantized form is read instead of quantizing x again.
void linear_quantized(const ExecContext& ctx, const float* x, int64_t M, const PackedWeight& w, float* y,
                      bool round_out, LinearInput* in = nullptr);
// out [M, I] = silu(gate) x up for a gate|up weight packed for the fused SwiGLU (ops/linear.h), in the
// table's epilogue, unrounded; false (nothing written) where the active row has none.
bool linear_quantized_swiglu(const ExecContext& ctx, const float* x, int64_t M, const PackedWeight& w,
                             float* out, LinearInput* in = nullptr);

// x [M, K] quantized per row and group into xq by a table row's quantizer: over the pool, or row by row
// on the calling thread for the reference ISA.
void quantize_rows(const ExecContext& ctx, const float* x, int64_t M, int64_t K, Isa isa,
                   QuantizeRowFn quantize, quant::QuantizedRows* xq);

// The table's panel kernel for a quantized weight when it runs over the pool on the active ISA for M rows:
// the products, or (swiglu) the SwiGLU epilogue, on AMX tiles where the row has them for M rows; *quantize
// gets its activation quantizer. Null where the
// weight takes another path (the reference ISA; no epilogue on this row). The one statement of that
// choice for linear_quantized_swiglu and ops/linear_group.h.
QuantGemmFn pooled_quant_kernel(const PackedWeight& w, int64_t M, bool swiglu, QuantizeRowFn* quantize);

// "linear int8: avx2 vpmaddubsw (swiglu: products then activation; argmax: products then scan)" for
// every quantized format on the active ISA.
std::string quant_kernel_report();

}  // namespace gdn
