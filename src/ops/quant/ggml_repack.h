// A GGUF tensor's blocks moved into our packed formats without changing one value, for the ggml types one
// of ours holds exactly (ops/weight_format.h):
//   Q8_0 -> Q8   the int8 values and the f16 scale of each 32
//   Q4_0 -> Q4   the nibbles less 8 and the f16 scale of each 32
//   Q4_K -> Q4K  the same 6-bit sub-block scales and minimums, f16 d and dmin per 256 and 4-bit values
// What differs is only where the bytes sit (quant_format.h's panels), so the kernels multiply exactly the
// values llama.cpp's dequantize_row_* gives. Other types are widened at load (ops/linear.cpp).
#pragma once

#include <cstdint>
#include <optional>

#include "ops/quant/ggml_types.h"
#include "ops/quant/quant_format.h"

namespace gdn {

struct TensorView;

// The format a ggml type moves into unchanged; none when no format of ours holds its values.
std::optional<WeightFormat> ggml_native_format(GgmlType t);

// Column block b (of the native format's block_k values) of one row of a GGUF tensor (the row's bytes).
void ggml_column_block(GgmlType t, const uint8_t* row, int64_t b, quant::ColumnBlock* out);

// True when every value of the ggml rows t (a DType::GGML view [N, K]) can move into its native format:
// Q8_0 values of -128 cannot (ggml's quantizer never writes one, but a file may hold one; the AVX2 kernel
// moves the activation's sign onto the weight, and -(-128) does not fit an int8).
bool ggml_rows_movable(const TensorView& t);

// Row r of any view as f32: the float dtypes converted, ggml rows dequantized (dequantize_ggml_row).
void row_to_f32(const TensorView& t, int64_t r, float* out);

}  // namespace gdn
