// Element types and exact scalar conversions (round-to-nearest-even, NaN kept quiet).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace gdn {

// U8: raw bytes, for the packed weights of a pre-quantized checkpoint (model/packed_checkpoint.h); never a
// float tensor's type (the loader refuses it there) and not a --dtype / --kv-cache-dtype choice.
// GGML: rows of a GGUF file's quantized blocks (TensorView::ggml_type names the block type; strides count
// bytes). Only the loader's matrices and ops/quant read them; never an activation or a --dtype.
enum class DType : uint8_t { F32, BF16, F16, U8, GGML };

inline size_t dtype_size(DType t) {
    switch (t) {
        case DType::F32:
            return 4;
        case DType::BF16:
            return 2;
        case DType::F16:
            return 2;
        case DType::U8:
        case DType::GGML:  // strides of ggml block rows count bytes
            return 1;
    }
    return 0;
}
const char* dtype_name(DType t);
// Parses "f32"/"bf16"/"f16" (and the safetensors spellings "F32"/"BF16"/"F16"); the float types only.
bool parse_dtype(std::string_view s, DType* out);

inline float bf16_to_f32(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return static_cast<uint16_t>(u >> 16);
}

// Rounds a float to the nearest bf16 value, kept in f32 storage (the "bf16 activation" semantics).
inline float round_bf16(float f) {
    return bf16_to_f32(f32_to_bf16(f));
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of type `src_type` at `src` to f32 (U8: the byte values).
void convert_to_f32(DType src_type, const void* src, float* dst, size_t n);
// Converts n f32 values to `dst_type` at `dst` (U8: rounded and clamped to [0, 255]).
void convert_from_f32(const float* src, DType dst_type, void* dst, size_t n);

}  // namespace gdn
