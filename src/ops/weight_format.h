// The storage format of a packed linear weight: data that selects the kernels (ops/linear_quant.h's
// table), so model/ never branches on it.
//
//   F32, BF16  the float panels of ops/linear.h (f16 checkpoints are widened to F32 at load)
//   Q8         "int8": symmetric, one f16 scale per 32 consecutive k of a column (8.5 bits per weight)
//   Q4         "int4-sym": symmetric [-8, 7], one f16 scale per 32 k, chosen by least squares (4.5)
//   Q4K        "int4-k": [0, 15] with a scale and a minimum per 32 k, both 6-bit levels of two f16
//              per 256 k of the column (llama.cpp's Q4_K values; 4.5 bits per weight)
//   Q6K        "int6-k": symmetric [-32, 31], an int8 scale level per 32 k of one f16 per 256 k
//              (llama.cpp's Q6_K with sub-blocks of 32 instead of 16; 6.3125 bits per weight)
//   Q6K16      "int6-k16": int6-k with its int8 scale level per 16 k (llama.cpp's Q6_K exactly: 6.5625
//              bits per weight); what a GGUF Q6_K tensor moves into, not a --quantization choice
//   Q8X        "int8-x": int8 values with an f32 scale and an f32 offset per 16 k (12 bits per weight):
//              not chosen by --quantization; it holds every GGUF block type's values exactly (the
//              affine map of any ggml sub-block of 16 or 32 values), so a GGUF tensor or fused group
//              without a format of its own runs on int8 kernels instead of widening to f32
// Quantized formats multiply int8 activations (one scale per row and 32 k: the weight's groups) in
// integer arithmetic; per-group products are scaled and summed in f32 (ops/quant/quant_format.h).
//
// --quantization names a scheme, not one format (model/quant_scheme.h): "int8" is Q8 everywhere,
// "int4" Q4K with Q6K for the tensors a 4-bit error hurts most (as llama.cpp's Q4_K_M), "int4-sym" Q4
// with an int8 lm_head. A scheme is carried as its base format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gdn {

enum class WeightFormat : uint8_t { F32, BF16, Q8, Q4, Q4K, Q6K, Q8X, Q6K16 };

// k values sharing one activation scale, and one weight scale in Q8 / Q4 (a sub-block in Q4K / Q6K).
constexpr int64_t kQuantGroup = 32;
// k values of one Q4K / Q6K super-block (its f16 scales); Q8 and Q4 blocks are one group.
constexpr int64_t kSuperBlock = 256;

inline bool is_quantized(WeightFormat f) {
    return f == WeightFormat::Q8 || f == WeightFormat::Q4 || f == WeightFormat::Q4K ||
           f == WeightFormat::Q6K || f == WeightFormat::Q8X || f == WeightFormat::Q6K16;
}

// k per stored block of a quantized format (K is zero-padded to a multiple).
inline int64_t weight_block_k(WeightFormat f) {
    return f == WeightFormat::Q4K || f == WeightFormat::Q6K || f == WeightFormat::Q6K16 ? kSuperBlock
                                                                                        : kQuantGroup;
}

// Formats whose affine map is per half group (16 k): kernels take D and S per half.
inline bool has_half_groups(WeightFormat f) {
    return f == WeightFormat::Q8X || f == WeightFormat::Q6K16;
}

inline const char* weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::F32:
            return "f32";
        case WeightFormat::BF16:
            return "bf16";
        case WeightFormat::Q8:
            return "int8";
        case WeightFormat::Q4:
            return "int4-sym";
        case WeightFormat::Q4K:
            return "int4-k";
        case WeightFormat::Q6K:
            return "int6-k";
        case WeightFormat::Q8X:
            return "int8-x";
        case WeightFormat::Q6K16:
            return "int6-k16";
    }
    return "?";
}

// The format a stored name means (a pre-quantized checkpoint's entries); false for an unknown one.
inline bool parse_weight_format(const std::string& s, WeightFormat* out) {
    for (WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4, WeightFormat::Q4K, WeightFormat::Q6K,
                           WeightFormat::Q8X, WeightFormat::Q6K16})
        if (s == weight_format_name(f)) {
            *out = f;
            return true;
        }
    return false;
}

// Stored bits per weight, scales included (padding of odd shapes excluded).
inline double weight_format_bits(WeightFormat f) {
    switch (f) {
        case WeightFormat::F32:
            return 32.0;
        case WeightFormat::BF16:
            return 16.0;
        case WeightFormat::Q8:
            return 8.0 + 16.0 / kQuantGroup;
        case WeightFormat::Q4:
            return 4.0 + 16.0 / kQuantGroup;
        case WeightFormat::Q4K:
            return 4.0 + 12.0 / kQuantGroup + 32.0 / kSuperBlock;
        case WeightFormat::Q6K:
            return 6.0 + 8.0 / kQuantGroup + 16.0 / kSuperBlock;
        case WeightFormat::Q8X:
            return 8.0 + 2 * 32.0 / 16;
        case WeightFormat::Q6K16:
            return 6.0 + 8.0 / 16 + 16.0 / kSuperBlock;
    }
    return 0.0;
}

// The --quantization name of the scheme whose base format is f (see above).
inline const char* quantization_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::Q8:
            return "int8";
        case WeightFormat::Q4K:
            return "int4";
        case WeightFormat::Q4:
            return "int4-sym";
        default:
            return weight_format_name(f);
    }
}

// --quantization values (vLLM's flag): "int8" | "int4" | "int4-sym"; "none" means keep the
// checkpoint's floats. Returns false for an unknown value.
inline bool parse_quantization(const std::string& s, std::optional<WeightFormat>* out) {
    if (s == "none" || s.empty()) {
        out->reset();
        return true;
    }
    for (WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4K, WeightFormat::Q4})
        if (s == quantization_name(f)) {
            *out = f;
            return true;
        }
    return false;
}

}  // namespace gdn
