// The pieces of ggml's block definitions (ggml-common.h / ggml-quants.c) that both the reference
// dequantization (ggml_dequant.cpp) and the exact move into our formats (ggml_repack.cpp) read: the
// non-uniform 4-bit levels, the E8M0 scale, the k-quants' packed 6-bit scales, Q3_K's scale unpacking.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace gdn::ggml_blocks {

inline float f16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}

// IQ4_NL / IQ4_XS: the 16 non-uniform levels a nibble selects.
constexpr int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// MXFP4: the e2m1 values doubled (a block's E8M0 scale is halved to match, E8M0_TO_FP32_HALF).
constexpr int8_t kMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 127) / 2, exactly (e = 0 and 1 are subnormal).
inline float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// Q4_K / Q5_K: the 6-bit scale and minimum of sub-block j from the 12 packed bytes.
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q3_K: the 16 6-bit scales (less 32 when used) from its 12 packed bytes.
inline void q3_k_scales(const uint8_t* packed, int8_t (&scales)[16]) {
    constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t aux[4];
    std::memcpy(aux, packed, 12);
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    std::memcpy(scales, aux, 16);
}

}  // namespace gdn::ggml_blocks
