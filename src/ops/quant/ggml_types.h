// ggml's tensor types as GGUF files number them, their block geometry, and the reference dequantization of
// a row (ggml_dequant.cpp): the values a GGUF tensor holds, exactly as llama.cpp's dequantize_row_* computes
// them (f16 scales widened exactly; each value one f32 product, or a product and a subtraction, in
// ggml's order). The format definitions the GGUF loader and its kernels are checked against.
#pragma once

#include <cstdint>

namespace gdn {

// ggml's tensor types (the numbers are the file's).
enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
};

// A type's block: `block_elems` consecutive values of a row take `block_bytes` bytes.
struct GgmlTypeInfo {
    GgmlType type;
    const char* name;  // as llama.cpp prints it ("Q4_K")
    int64_t block_elems, block_bytes;
};
// Null for a number that is no ggml type (or one ggml removed).
const GgmlTypeInfo* ggml_type_info(uint32_t type);

// True for the types dequantize_ggml_row reads: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4.
bool ggml_type_dequantizable(GgmlType t);
// dst[0, n) = the values of n consecutive elements stored at src (n a multiple of the type's block).
void dequantize_ggml_row(GgmlType t, const uint8_t* src, int64_t n, float* dst);

}  // namespace gdn
