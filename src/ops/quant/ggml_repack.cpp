#include "ops/quant/ggml_repack.h"

#include <cstring>

#include "core/log.h"
#include "core/tensor.h"
#include "ops/quant/ggml_blocks.h"

namespace gdn {

std::optional<WeightFormat> ggml_native_format(GgmlType t) {
    switch (t) {
        case GgmlType::Q8_0:
            return WeightFormat::Q8;
        case GgmlType::Q4_0:
            return WeightFormat::Q4;
        case GgmlType::Q4_K:
            return WeightFormat::Q4K;
        case GgmlType::Q6_K:
            return WeightFormat::Q6K16;
        default:
            return ggml_moves_to_q8x(t) ? std::optional<WeightFormat>(WeightFormat::Q8X) : std::nullopt;
    }
}

bool ggml_moves_to_q8x(GgmlType t) {
    // Every block type dequantize_ggml_row reads (the float types are not blocks).
    return ggml_type_dequantizable(t) && ggml_type_info(static_cast<uint32_t>(t))->block_elems > 1;
}

namespace {

using namespace ggml_blocks;

// Q6_K: the level (q, in [-32, 31]) of value v (< 256) of a super-block.
inline int q6_k_level(const uint8_t* blk, int v) {
    const int n = v / 128, qq = (v % 128) / 32, l = v % 32;
    const uint8_t lq = blk[64 * n + l + (qq % 2 ? 32 : 0)];
    const int low = qq < 2 ? lq & 0xF : lq >> 4;
    const int high = (blk[128 + 32 * n + l] >> (2 * qq)) & 3;
    return (low | high << 4) - 32;
}

// Sets one half's (16 values') affine map.
inline void half(quant::ColumnBlock* o, int h, float a, float b) {
    o->a[h] = a;
    o->b[h] = b;
}

// The 32-value types: q and the map of block b (both halves share it). value = a * q - b, which is ggml's
// d * q (or q * d, the same product) and, for the types with a minimum m, q * d + m = a * q - (-m) exactly.
void q8x_small(GgmlType t, const uint8_t* row, int64_t b, quant::ColumnBlock* o) {
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
    const uint8_t* blk = row + b * info->block_bytes;
    float a = 0.0f, off = 0.0f;
    switch (t) {
        case GgmlType::Q8_0:
            a = f16_at(blk);
            std::memcpy(o->q, blk + 2, 32);
            break;
        case GgmlType::Q4_0:
        case GgmlType::IQ4_NL:
            a = f16_at(blk);
            for (int j = 0; j < 16; ++j) {
                const int lo = blk[2 + j] & 0xF, hi = blk[2 + j] >> 4;
                o->q[j] = static_cast<int8_t>(t == GgmlType::Q4_0 ? lo - 8 : kIq4nl[lo]);
                o->q[j + 16] = static_cast<int8_t>(t == GgmlType::Q4_0 ? hi - 8 : kIq4nl[hi]);
            }
            break;
        case GgmlType::Q4_1:
            a = f16_at(blk), off = -f16_at(blk + 2);
            for (int j = 0; j < 16; ++j) {
                o->q[j] = static_cast<int8_t>(blk[4 + j] & 0xF);
                o->q[j + 16] = static_cast<int8_t>(blk[4 + j] >> 4);
            }
            break;
        case GgmlType::Q5_0:
        case GgmlType::Q5_1: {
            const bool q51 = t == GgmlType::Q5_1;
            a = f16_at(blk);
            if (q51) off = -f16_at(blk + 2);
            const uint8_t* qhp = blk + (q51 ? 4 : 2);
            const uint8_t* qs = qhp + 4;
            uint32_t qh;
            std::memcpy(&qh, qhp, 4);
            for (int j = 0; j < 16; ++j) {
                const int lo = (qs[j] & 0xF) | (((qh >> j) << 4) & 0x10);
                const int hi = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
                o->q[j] = static_cast<int8_t>(q51 ? lo : lo - 16);
                o->q[j + 16] = static_cast<int8_t>(q51 ? hi : hi - 16);
            }
            break;
        }
        case GgmlType::MXFP4:
            a = e8m0_half(blk[0]);
            for (int j = 0; j < 16; ++j) {
                o->q[j] = kMxfp4[blk[1 + j] & 0xF];
                o->q[j + 16] = kMxfp4[blk[1 + j] >> 4];
            }
            break;
        default:
            GDN_CHECK(false, "q8x_small: %s", info->name);
    }
    half(o, 0, a, off);
    half(o, 1, a, off);
}

// The 256-value super-blocks: group j (32 values) of super-block sb.
void q8x_k(GgmlType t, const uint8_t* row, int64_t b, quant::ColumnBlock* o) {
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
    const uint8_t* blk = row + (b / 8) * info->block_bytes;
    const int j = static_cast<int>(b % 8);
    switch (t) {
        case GgmlType::Q2_K: {  // {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}: sub-blocks of 16
            const float d = f16_at(blk + 80), dmin = f16_at(blk + 82);
            for (int i = 0; i < 32; ++i) {
                const int v = 32 * j + i, n = v / 128, s = (v % 128) / 32, h = (v % 32) / 16, l = v % 16;
                o->q[i] = static_cast<int8_t>((blk[16 + 32 * n + l + 16 * h] >> (2 * s)) & 3);
            }
            for (int h = 0; h < 2; ++h) {
                const uint8_t sc = blk[2 * j + h];
                half(o, h, d * static_cast<float>(sc & 0xF), dmin * static_cast<float>(sc >> 4));
            }
            return;
        }
        case GgmlType::Q3_K: {  // {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: sub-blocks of 16
            int8_t scales[16];
            q3_k_scales(blk + 96, scales);
            const float d = f16_at(blk + 108);
            for (int i = 0; i < 32; ++i) {
                const int v = 32 * j + i, n = v / 128, s = (v % 128) / 32, k = v % 32;
                const int hbit = (blk[k] >> (4 * n + s)) & 1;
                o->q[i] = static_cast<int8_t>(((blk[32 + 32 * n + k] >> (2 * s)) & 3) - (hbit ? 0 : 4));
            }
            for (int h = 0; h < 2; ++h) half(o, h, d * static_cast<float>(scales[2 * j + h] - 32), 0.0f);
            return;
        }
        case GgmlType::Q4_K:
        case GgmlType::Q5_K: {  // {f16 d; f16 dmin; u8 scales[12]; (Q5_K: u8 qh[32];) u8 qs[128]}
            const bool q5 = t == GgmlType::Q5_K;
            uint8_t sc, m;
            scale_min_k4(j, blk + 4, &sc, &m);
            const float a = f16_at(blk) * static_cast<float>(sc),
                        off = f16_at(blk + 2) * static_cast<float>(m);
            const uint8_t* qs = blk + (q5 ? 48 : 16) + 32 * (j / 2);
            for (int l = 0; l < 32; ++l) {
                int q = j % 2 ? qs[l] >> 4 : qs[l] & 0xF;
                if (q5 && (blk[16 + l] >> j & 1)) q += 16;
                o->q[l] = static_cast<int8_t>(q);
            }
            half(o, 0, a, off);
            half(o, 1, a, off);
            return;
        }
        case GgmlType::Q6_K: {  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: sub-blocks of 16
            const float d = f16_at(blk + 208);
            const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
            for (int i = 0; i < 32; ++i) o->q[i] = static_cast<int8_t>(q6_k_level(blk, 32 * j + i));
            for (int h = 0; h < 2; ++h) half(o, h, d * static_cast<float>(sc[2 * j + h]), 0.0f);
            return;
        }
        case GgmlType::IQ4_XS: {  // {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}
            uint16_t scales_h;
            std::memcpy(&scales_h, blk + 2, 2);
            const int ls = ((blk[4 + j / 2] >> 4 * (j % 2)) & 0xF) | (((scales_h >> 2 * j) & 3) << 4);
            const float a = f16_at(blk) * static_cast<float>(ls - 32);
            const uint8_t* qs = blk + 8 + 16 * j;
            for (int l = 0; l < 16; ++l) {
                o->q[l] = kIq4nl[qs[l] & 0xF];
                o->q[l + 16] = kIq4nl[qs[l] >> 4];
            }
            half(o, 0, a, 0.0f);
            half(o, 1, a, 0.0f);
            return;
        }
        default:
            GDN_CHECK(false, "q8x_k: %s", info->name);
    }
}

}  // namespace

void ggml_column_block(GgmlType t, const uint8_t* row, int64_t b, WeightFormat target,
                       quant::ColumnBlock* out) {
    if (target == WeightFormat::Q8X) {
        if (ggml_type_info(static_cast<uint32_t>(t))->block_elems == 256)
            q8x_k(t, row, b, out);
        else
            q8x_small(t, row, b, out);
        return;
    }
    switch (t) {
        case GgmlType::Q8_0:
        case GgmlType::Q4_0:  // the int8-x levels, with the block's f16 d itself as the scale
            q8x_small(t, row, b, out);
            std::memcpy(&out->scale_bits, row + b * ggml_type_info(static_cast<uint32_t>(t))->block_bytes, 2);
            return;
        case GgmlType::Q4_K: {  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}
            const uint8_t* blk = row + b * 144;
            kquant::Q4KBlock& q = out->q4k;
            std::memcpy(&q.d_bits, blk, 2);
            std::memcpy(&q.dmin_bits, blk + 2, 2);
            q.d = f16_to_f32(q.d_bits);
            q.dmin = f16_to_f32(q.dmin_bits);
            for (int j = 0; j < 8; ++j) scale_min_k4(j, blk + 4, &q.sc[j], &q.m[j]);
            // 64 values per 32 bytes: sub-block 2i the low nibbles, 2i + 1 the high ones.
            const uint8_t* qs = blk + 16;
            for (int i = 0; i < 4; ++i)
                for (int l = 0; l < 32; ++l) {
                    q.q[64 * i + l] = qs[32 * i + l] & 0xF;
                    q.q[64 * i + 32 + l] = qs[32 * i + l] >> 4;
                }
            return;
        }
        case GgmlType::Q6_K: {  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: the levels and scales as
                                // they are
            const uint8_t* blk = row + b * 210;
            std::memcpy(&out->q6k.d_bits, blk + 208, 2);
            std::memcpy(out->sc16, blk + 192, 16);
            for (int v = 0; v < 256; ++v) out->q6k.q[v] = static_cast<int8_t>(q6_k_level(blk, v));
            return;
        }
        default:
            GDN_CHECK(false, "ggml_column_block: %s has no native format",
                      ggml_type_info(static_cast<uint32_t>(t))->name);
    }
}

bool ggml_rows_movable(const TensorView& t) {
    if (static_cast<GgmlType>(t.ggml_type) != GgmlType::Q8_0)
        return ggml_moves_to_q8x(static_cast<GgmlType>(t.ggml_type));
    const int64_t rows = t.numel() / t.shape[t.rank - 1], blocks = t.shape[t.rank - 1] / 32;
    const int64_t row_bytes = t.stride[t.rank - 2];
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(t.data) + r * row_bytes;
        for (int64_t b = 0; b < blocks; ++b)
            for (int j = 0; j < 32; ++j)
                if (row[b * 34 + 2 + j] == 0x80) return false;
    }
    return true;
}

void row_to_f32(const TensorView& t, int64_t r, float* out) {
    const int64_t K = t.shape[t.rank - 1];
    if (t.dtype == DType::GGML)
        dequantize_ggml_row(static_cast<GgmlType>(t.ggml_type), static_cast<const uint8_t*>(t.row(r)), K,
                            out);
    else
        convert_to_f32(t.dtype, t.row(r), out, K);
}

}  // namespace gdn
