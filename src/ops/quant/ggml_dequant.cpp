// The reference dequantization of ggml's block types, from their definitions (ggml-common.h's block
// structs, ggml-quants.c's dequantize_row_*): the values a GGUF tensor holds. Every product is one f32
// multiplication of exactly widened operands, in ggml's order, so the values are bitwise llama.cpp's.
#include <cstring>

#include "core/dtype.h"
#include "core/log.h"
#include "ops/quant/ggml_blocks.h"
#include "ops/quant/ggml_types.h"

namespace gdn {

namespace {

using namespace ggml_blocks;

// The 32-value blocks: 16 bytes of nibbles (value j low, j + 16 high), optional 5th bits.
void q4_0(const uint8_t* b, float* y) {  // {f16 d; u8 qs[16]}
    const float d = f16_at(b);
    for (int j = 0; j < 16; ++j) {
        y[j] = ((b[2 + j] & 0xF) - 8) * d;
        y[j + 16] = ((b[2 + j] >> 4) - 8) * d;
    }
}
void q4_1(const uint8_t* b, float* y) {  // {f16 d; f16 m; u8 qs[16]}
    const float d = f16_at(b), m = f16_at(b + 2);
    for (int j = 0; j < 16; ++j) {
        y[j] = (b[4 + j] & 0xF) * d + m;
        y[j + 16] = (b[4 + j] >> 4) * d + m;
    }
}
void q5_0(const uint8_t* b, float* y) {  // {f16 d; u8 qh[4]; u8 qs[16]}
    const float d = f16_at(b);
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    for (int j = 0; j < 16; ++j) {
        const int lo = (b[6 + j] & 0xF) | (((qh >> j) << 4) & 0x10);
        const int hi = (b[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10);
        y[j] = (lo - 16) * d;
        y[j + 16] = (hi - 16) * d;
    }
}
void q5_1(const uint8_t* b, float* y) {  // {f16 d; f16 m; u8 qh[4]; u8 qs[16]}
    const float d = f16_at(b), m = f16_at(b + 2);
    uint32_t qh;
    std::memcpy(&qh, b + 4, 4);
    for (int j = 0; j < 16; ++j) {
        const int lo = (b[8 + j] & 0xF) | (((qh >> j) << 4) & 0x10);
        const int hi = (b[8 + j] >> 4) | ((qh >> (j + 12)) & 0x10);
        y[j] = lo * d + m;
        y[j + 16] = hi * d + m;
    }
}
void q8_0(const uint8_t* b, float* y) {  // {f16 d; i8 qs[32]}
    const float d = f16_at(b);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<int8_t>(b[2 + j]) * d;
}
void iq4_nl(const uint8_t* b, float* y) {  // {f16 d; u8 qs[16]}
    const float d = f16_at(b);
    for (int j = 0; j < 16; ++j) {
        y[j] = d * kIq4nl[b[2 + j] & 0xF];
        y[j + 16] = d * kIq4nl[b[2 + j] >> 4];
    }
}
void mxfp4(const uint8_t* b, float* y) {  // {u8 e; u8 qs[16]}
    const float d = e8m0_half(b[0]);
    for (int j = 0; j < 16; ++j) {
        y[j] = kMxfp4[b[1 + j] & 0xF] * d;
        y[j + 16] = kMxfp4[b[1 + j] >> 4] * d;
    }
}

// The 256-value super-blocks.
void q2_k(const uint8_t* b, float* y) {  // {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}
    const uint8_t* sc = b;
    const uint8_t* q = b + 16;
    const float d = f16_at(b + 80), min = f16_at(b + 82);
    int is = 0;
    for (int n = 0; n < 256; n += 128, q += 32)
        for (int shift = 0; shift < 8; shift += 2)
            for (int half = 0; half < 2; ++half) {
                const uint8_t s = sc[is++];
                const float dl = d * (s & 0xF), ml = min * (s >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
            }
}
void q3_k(const uint8_t* b, float* y) {  // {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}
    const uint8_t* hm = b;
    const uint8_t* q = b + 32;
    const float d_all = f16_at(b + 108);
    int8_t scales[16];
    q3_k_scales(b + 96, scales);
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < 256; n += 128, q += 32)
        for (int shift = 0; shift < 8; shift += 2, m <<= 1)
            for (int half = 0; half < 2; ++half) {
                const float dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l) {
                    const int k = l + 16 * half;
                    *y++ = dl * (static_cast<int8_t>((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
                }
            }
}
void q4_k(const uint8_t* b, float* y) {  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}
    const float d = f16_at(b), min = f16_at(b + 2);
    const uint8_t* sc = b + 4;
    const uint8_t* q = b + 16;
    for (int j = 0, is = 0; j < 256; j += 64, q += 32, is += 2) {
        uint8_t s, mm;
        scale_min_k4(is, sc, &s, &mm);
        const float d1 = d * s, m1 = min * mm;
        scale_min_k4(is + 1, sc, &s, &mm);
        const float d2 = d * s, m2 = min * mm;
        for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
}
void q5_k(const uint8_t* b, float* y) {  // {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
    const float d = f16_at(b), min = f16_at(b + 2);
    const uint8_t* sc = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < 256; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
        uint8_t s, mm;
        scale_min_k4(is, sc, &s, &mm);
        const float d1 = d * s, m1 = min * mm;
        scale_min_k4(is + 1, sc, &s, &mm);
        const float d2 = d * s, m2 = min * mm;
        for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
}
void q6_k(const uint8_t* b, float* y) {  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
    const float d = f16_at(b + 208);
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
}
void iq4_xs(const uint8_t* b, float* y) {  // {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}
    const float d = f16_at(b);
    uint16_t scales_h;
    std::memcpy(&scales_h, b + 2, 2);
    const uint8_t* scales_l = b + 4;
    const uint8_t* qs = b + 8;
    for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
        const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4);
        const float dl = d * (ls - 32);
        for (int j = 0; j < 16; ++j) {
            y[j] = dl * kIq4nl[qs[j] & 0xF];
            y[j + 16] = dl * kIq4nl[qs[j] >> 4];
        }
    }
}

using BlockFn = void (*)(const uint8_t*, float*);
BlockFn block_fn(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_0:
            return q4_0;
        case GgmlType::Q4_1:
            return q4_1;
        case GgmlType::Q5_0:
            return q5_0;
        case GgmlType::Q5_1:
            return q5_1;
        case GgmlType::Q8_0:
            return q8_0;
        case GgmlType::Q2_K:
            return q2_k;
        case GgmlType::Q3_K:
            return q3_k;
        case GgmlType::Q4_K:
            return q4_k;
        case GgmlType::Q5_K:
            return q5_k;
        case GgmlType::Q6_K:
            return q6_k;
        case GgmlType::IQ4_NL:
            return iq4_nl;
        case GgmlType::IQ4_XS:
            return iq4_xs;
        case GgmlType::MXFP4:
            return mxfp4;
        default:
            return nullptr;
    }
}

}  // namespace

bool ggml_type_dequantizable(GgmlType t) {
    return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || block_fn(t) != nullptr;
}

void dequantize_ggml_row(GgmlType t, const uint8_t* src, int64_t n, float* dst) {
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
    GDN_CHECK(info && ggml_type_dequantizable(t) && n % info->block_elems == 0,
              "dequantize_ggml_row: %lld values of type %u", static_cast<long long>(n),
              static_cast<uint32_t>(t));
    if (t == GgmlType::F32) {
        std::memcpy(dst, src, n * 4);
        return;
    }
    if (t == GgmlType::F16 || t == GgmlType::BF16) {
        for (int64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, src + 2 * i, 2);
            dst[i] = t == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
        return;
    }
    const BlockFn f = block_fn(t);
    for (int64_t b = 0; b < n / info->block_elems; ++b)
        f(src + b * info->block_bytes, dst + b * info->block_elems);
}

}  // namespace gdn
