// A GGUF tensor's blocks moved into our packed formats without changing one value (ops/weight_format.h):
//   Q8_0 -> Q8   the int8 values and the f16 scale of each 32
//   Q4_0 -> Q4   the nibbles less 8 and the f16 scale of each 32
//   Q4_K -> Q4K  the same 6-bit sub-block scales and minimums, f16 d and dmin per 256 and 4-bit values
//   every block type -> Q8X (int8-x): each value's level as an int8 and its sub-block's affine map in f32
//                (ggml's d * sc and dmin * m products, exact in f32): the other types, and a fused group
//                whose parts have different types
// What differs is only where the numbers sit (quant_format.h's panels), so the kernels multiply exactly
// the values llama.cpp's dequantize_row_* gives.
#pragma once

#include <cstdint>
#include <optional>

#include "ops/quant/ggml_types.h"
#include "ops/quant/quant_format.h"

namespace gdn {

struct TensorView;

// The format a ggml type moves into unchanged (its own where one exists, else int8-x); none for the
// float types.
std::optional<WeightFormat> ggml_native_format(GgmlType t);
// True for the block types int8-x holds exactly (every quantized type dequantize_ggml_row reads).
bool ggml_moves_to_q8x(GgmlType t);

// Column block b (of `target`'s block_k values) of one row of a GGUF tensor (the row's bytes); target is
// the type's native format or Q8X.
void ggml_column_block(GgmlType t, const uint8_t* row, int64_t b, WeightFormat target,
                       quant::ColumnBlock* out);

// True when every value of the ggml rows t (a DType::GGML view [N, K]) can move into its own format:
// Q8_0 values of -128 cannot go to int8 (ggml's quantizer never writes one, but a file may hold one; the
// AVX2 kernel moves the activation's sign onto the weight, and -(-128) does not fit an int8); int8-x
// takes them.
bool ggml_rows_movable(const TensorView& t);

// Row r of any view as f32: the float dtypes converted, ggml rows dequantized (dequantize_ggml_row).
void row_to_f32(const TensorView& t, int64_t r, float* out);

}  // namespace gdn
