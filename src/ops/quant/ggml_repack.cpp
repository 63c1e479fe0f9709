#include "ops/quant/ggml_repack.h"

#include <cstring>

#include "core/log.h"
#include "core/tensor.h"

namespace gdn {

std::optional<WeightFormat> ggml_native_format(GgmlType t) {
    switch (t) {
        case GgmlType::Q8_0:
            return WeightFormat::Q8;
        case GgmlType::Q4_0:
            return WeightFormat::Q4;
        case GgmlType::Q4_K:
            return WeightFormat::Q4K;
        default:
            return std::nullopt;
    }
}

void ggml_column_block(GgmlType t, const uint8_t* row, int64_t b, quant::ColumnBlock* out) {
    switch (t) {
        case GgmlType::Q8_0: {  // {f16 d; i8 qs[32]}
            const uint8_t* blk = row + b * 34;
            std::memcpy(&out->scale_bits, blk, 2);
            std::memcpy(out->q, blk + 2, 32);
            return;
        }
        case GgmlType::Q4_0: {  // {f16 d; u8 qs[16]}: value j in the low nibble of byte j, j + 16 high
            const uint8_t* blk = row + b * 18;
            std::memcpy(&out->scale_bits, blk, 2);
            for (int j = 0; j < 16; ++j) {
                out->q[j] = static_cast<int8_t>((blk[2 + j] & 0xF) - 8);
                out->q[j + 16] = static_cast<int8_t>((blk[2 + j] >> 4) - 8);
            }
            return;
        }
        case GgmlType::Q4_K: {  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}
            const uint8_t* blk = row + b * 144;
            kquant::Q4KBlock& q = out->q4k;
            std::memcpy(&q.d_bits, blk, 2);
            std::memcpy(&q.dmin_bits, blk + 2, 2);
            q.d = f16_to_f32(q.d_bits);
            q.dmin = f16_to_f32(q.dmin_bits);
            const uint8_t* sc = blk + 4;
            for (int j = 0; j < 8; ++j) {  // ggml's get_scale_min_k4
                if (j < 4) {
                    q.sc[j] = sc[j] & 63;
                    q.m[j] = sc[j + 4] & 63;
                } else {
                    q.sc[j] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4));
                    q.m[j] = static_cast<uint8_t>((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
                }
            }
            // 64 values per 32 bytes: sub-block 2i the low nibbles, 2i + 1 the high ones.
            const uint8_t* qs = blk + 16;
            for (int i = 0; i < 4; ++i)
                for (int l = 0; l < 32; ++l) {
                    q.q[64 * i + l] = qs[32 * i + l] & 0xF;
                    q.q[64 * i + 32 + l] = qs[32 * i + l] >> 4;
                }
            return;
        }
        default:
            GDN_CHECK(false, "ggml_column_block: %s has no native format",
                      ggml_type_info(static_cast<uint32_t>(t))->name);
    }
}

bool ggml_rows_movable(const TensorView& t) {
    if (static_cast<GgmlType>(t.ggml_type) != GgmlType::Q8_0) return true;
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
