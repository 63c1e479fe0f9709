#include "core/dtype.h"

#include <algorithm>
#include <cmath>

#include "core/log.h"

namespace gdn {

const char* dtype_name(DType t) {
    switch (t) {
        case DType::F32:
            return "f32";
        case DType::BF16:
            return "bf16";
        case DType::F16:
            return "f16";
        case DType::U8:
            return "u8";
        case DType::GGML:
            return "ggml";
    }
    return "?";
}

bool parse_dtype(std::string_view s, DType* out) {
    if (s == "f32" || s == "F32" || s == "float32") {
        *out = DType::F32;
        return true;
    }
    if (s == "bf16" || s == "BF16" || s == "bfloat16") {
        *out = DType::BF16;
        return true;
    }
    if (s == "f16" || s == "F16" || s == "float16") {
        *out = DType::F16;
        return true;
    }
    return false;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal: renormalise
            int e = -1;
            do {
                man <<= 1;
                ++e;
            } while ((man & 0x400u) == 0);
            u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
        }
    } else if (exp == 0x1f) {
        u = sign | 0x7f800000u | man << 13;
    } else {
        u = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u;       // NaN
    if (abs >= 0x477ff000u) return sign | 0x7c00u;      // rounds to >= 65520: inf
    if (abs < 0x38800000u) {                            // below the smallest normal: subnormal or 0
        if (abs < 0x33000000u) return sign;             // < 2^-25 rounds to 0
        uint32_t man = (abs & 0x7fffffu) | 0x800000u;   // 24-bit significand
        int shift = 126 - static_cast<int>(abs >> 23);  // value / 2^-24 = man >> shift, shift in 14..24
        uint32_t q = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) ++q;  // RNE; q == 0x400 becomes the smallest normal
        return sign | static_cast<uint16_t>(q);
    }
    uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // RNE on the 13 dropped bits
    return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

void convert_to_f32(DType src_type, const void* src, float* dst, size_t n) {
    switch (src_type) {
        case DType::F32:
            std::memcpy(dst, src, n * 4);
            return;
        case DType::BF16: {
            auto* s = static_cast<const uint16_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
            return;
        }
        case DType::F16: {
            auto* s = static_cast<const uint16_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
            return;
        }
        case DType::U8: {
            auto* s = static_cast<const uint8_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = s[i];
            return;
        }
        case DType::GGML:  // needs the block type: ops/quant/ggml_types.h row_to_f32
            GDN_CHECK(false, "convert_to_f32: ggml blocks are read with row_to_f32");
    }
}

void convert_from_f32(const float* src, DType dst_type, void* dst, size_t n) {
    switch (dst_type) {
        case DType::F32:
            std::memcpy(dst, src, n * 4);
            return;
        case DType::BF16: {
            auto* d = static_cast<uint16_t*>(dst);
            for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
            return;
        }
        case DType::F16: {
            auto* d = static_cast<uint16_t*>(dst);
            for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
            return;
        }
        case DType::U8: {
            auto* d = static_cast<uint8_t*>(dst);
            for (size_t i = 0; i < n; ++i)
                d[i] = static_cast<uint8_t>(std::nearbyint(std::clamp(src[i], 0.0f, 255.0f)));
            return;
        }
        case DType::GGML:
            GDN_CHECK(false, "convert_from_f32: nothing is written as ggml blocks");
    }
}

}  // namespace gdn
