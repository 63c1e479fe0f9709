// The storage format of a packed linear weight: data that selects the kernels (ops/linear_quant.h's
// table), so model/ never branches on it.
//
//   F32, BF16  the float panels of ops/linear.h (f16 checkpoints are widened to F32 at load)
//   Q8         int8, symmetric, one f16 scale per 32 consecutive k of a column (8.5 bits per weight)
//   Q4         int4, symmetric [-8, 7], one f16 scale per 32 k, scale chosen by least squares
//              (4.5 bits per weight)
// Quantized formats multiply int8 activations (one scale per row and 32 k: the weight's groups) in
// integer arithmetic; per-group products are scaled and summed in f32 (ops/quant/quant_math.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gdn {

enum class WeightFormat : uint8_t { F32, BF16, Q8, Q4 };

// k values sharing one scale in the quantized formats (weights and activations alike).
constexpr int64_t kQuantGroup = 32;

inline bool is_quantized(WeightFormat f) { return f == WeightFormat::Q8 || f == WeightFormat::Q4; }

inline const char* weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::F32: return "f32";
        case WeightFormat::BF16: return "bf16";
        case WeightFormat::Q8: return "int8";
        case WeightFormat::Q4: return "int4";
    }
    return "?";
}

// Stored bits per weight, scales included (padding of odd shapes excluded).
inline double weight_format_bits(WeightFormat f) {
    switch (f) {
        case WeightFormat::F32: return 32.0;
        case WeightFormat::BF16: return 16.0;
        case WeightFormat::Q8: return 8.0 + 16.0 / kQuantGroup;
        case WeightFormat::Q4: return 4.0 + 16.0 / kQuantGroup;
    }
    return 0.0;
}

// --quantization values (vLLM's flag): "int8" | "int4"; "none" means keep the checkpoint's floats.
// Returns false for an unknown value.
inline bool parse_quantization(const std::string& s, std::optional<WeightFormat>* out) {
    if (s == "int8") *out = WeightFormat::Q8;
    else if (s == "int4") *out = WeightFormat::Q4;
    else if (s == "none" || s.empty()) out->reset();
    else return false;
    return true;
}

}  // namespace gdn
