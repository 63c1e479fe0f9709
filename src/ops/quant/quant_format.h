// The quantized weight layouts (WeightFormat::Q8 / Q4 / Q4K / Q6K) and their scalar definition: how
// a column's values are chosen, where each byte lives, and what a product means. Every kernel is tested
// against ref::linear_quant, which is written from this file alone.
//
// A weight [N, K] is cut into panels of 32 columns (kPanelCols, as the float formats) and blocks of
// block_k k (32 for Q8 / Q4, a 256-k super-block for Q4K / Q6K); K is zero-padded to whole blocks.
// Panel p's blocks are consecutive: block(p, b) at byte (p * n_blocks + b) * block_bytes. Inside, the
// values of one group of 32 k sit in one of two nibble or byte layouts:
//   int8 quads [8 quads][32 cols][4]: q of column c, k = 4j + i at byte (j*32 + c)*4 + i (a column's
//              k-quad is one 32-bit lane, the operand of vpmaddubsw / vpdpbusd)
//   nibble pairs [4 quad pairs][32 cols][4]: low nibble of k = 8j + i, high nibble of k = 8j + 4 + i
//   Q8 block (1088 B):  int8 quads of q, then f16 scale[32]
//   Q4 block (576 B):   nibble pairs of q + 8, then f16 scale[32]
//   Q4K block (4608 B): 8 group records of 560 B: nibble pairs of q (0..15), then 48 B of 6-bit levels:
//                       byte c (< 32) = sc[c] | (m[c] >> 4) << 6, byte 32 + i (< 16) = (m[i] & 15) |
//                       (m[i + 16] & 15) << 4; then f16 d[32], f16 dmin[32]
//   Q6K16 block (6720 B): 8 group records of 832 B: a Q6K record whose int8 scales are sc[2][32] (the scale
//                       of k 0-15 of each column, then of 16-31); then f16 d[32]
//   Q8X block (1536 B): int8 quads of q, then f32 a[2][32] (the scale of k 0-15 of each column, then of
//                       16-31), then f32 b[2][32] (the offsets, as a)
//   Q6K block (6464 B): 8 group records of 800 B: nibble pairs of the low 4 bits of q + 32; then 256 B
//                       of high bit pairs, 64 B per quad pair j: byte i of half h (32 B) holds in its
//                       low nibble the pairs of byte i of vector 2h of the nibble row (bits 0-1 for the
//                       low nibble's value, 2-3 for the high one's) and in its high nibble those of
//                       vector 2h + 1 (a vector: 32 consecutive bytes of the row, 8 columns); then int8
//                       sc[32]; then f16 d[32]
// So a decode step streams every block once, in order, and the scales of a group sit next to its
// values (one stream, no second pointer).
//
// Values (g = k / 32):  w_nk ~= a_ng * q_nk - b_ng  with
//   Q8:  q in [-127, 127], a = scale = max|w| / 127, b = 0
//   Q4:  q in [-8, 7], a = the scale minimising the group's squared error (a search over candidate
//        divisors, then least squares on the chosen q; every scale rounded to f16 before q is chosen), b = 0
//   Q4K: q in [0, 15], a = d * sc, b = dmin * m (ops/quant/kquant.h: ggml's Q4_K fit)
//   Q6K: q in [-32, 31], a = d * sc, b = 0 (kquant.h: ggml's Q6_K fit on sub-blocks of 32)
//   Q6K16: as Q6K with a = d * sc per half group (16 k), b = 0 (llama.cpp's Q6_K values)
//   Q8X: q in [-127, 127], a and b per half group (16 k): D and S are then taken per half (S from the
//        row's xsum_lo), y_mn = sum_g xs_mg * sum_h (a_ngh * D_mngh - b_ngh * S_mgh)
//
// Activations: each row x_m is quantized per group of 32 k the same way as Q8 weights (xs_mg =
// max|x| / 127, xq in [-127, 127]; one function for every path: quantize_activations), and
//   y_mn = sum_g xs_mg * (a_ng * D_mng - b_ng * S_mg),  D_mng = sum_{k in g} q_nk xq_mk,  S_mg = sum_{k in g}
//   xq_mk
// (D and S exact in int32) summed over g in f32. Fast kernels may sum and scale in another order (f32
// rounding only).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/dtype.h"
#include "core/exec_context.h"
#include "ops/quant/kquant.h"
#include "ops/weight_format.h"

namespace gdn {

struct PackedWeight;

namespace quant {

constexpr int64_t kCols = 32;  // columns per panel (== kPanelCols)
constexpr int64_t kQ8BlockBytes = kQuantGroup * kCols + kCols * 2;
constexpr int64_t kQ4BlockBytes = kQuantGroup * kCols / 2 + kCols * 2;
constexpr int64_t kNibbleRowBytes = kQuantGroup * kCols / 2;  // one group's nibble pairs (512 B)
// Offsets inside a group record (quant_format.h's layout above), one definition for packer, reference
// and kernels: int4-k's 48 B of levels; int6-k's high bit pairs, then its int8 scale levels.
constexpr int64_t kQ4KLevelsOffset = kNibbleRowBytes;
constexpr int64_t kQ6KHighOffset = kNibbleRowBytes;
constexpr int64_t kQ6KScalesOffset = kQ6KHighOffset + kNibbleRowBytes / 2;
constexpr int64_t kQ4KRecordBytes = kQ4KLevelsOffset + 48;
constexpr int64_t kQ4KBlockBytes = 8 * kQ4KRecordBytes + 2 * kCols * 2;
constexpr int64_t kQ6KRecordBytes = kQ6KScalesOffset + kCols;
constexpr int64_t kQ6KBlockBytes = 8 * kQ6KRecordBytes + kCols * 2;
constexpr int64_t kQ6K16RecordBytes = kQ6KScalesOffset + 2 * kCols;
constexpr int64_t kQ6K16BlockBytes = 8 * kQ6K16RecordBytes + kCols * 2;
constexpr int64_t kQ8XScalesOffset = kQuantGroup * kCols;  // f32 a[2][32], then f32 b[2][32]
constexpr int64_t kQ8XBlockBytes = kQ8XScalesOffset + 2 * 2 * kCols * 4;
constexpr int64_t block_bytes(WeightFormat f) {
    return f == WeightFormat::Q8      ? kQ8BlockBytes
           : f == WeightFormat::Q4    ? kQ4BlockBytes
           : f == WeightFormat::Q4K   ? kQ4KBlockBytes
           : f == WeightFormat::Q8X   ? kQ8XBlockBytes
           : f == WeightFormat::Q6K16 ? kQ6K16BlockBytes
                                      : kQ6KBlockBytes;
}
// Where a format's f16 fields start in a block: the group scale (Q8, Q4), d then dmin (Q4K), d (Q6K).
constexpr int64_t f16_offset(WeightFormat f) {
    return f == WeightFormat::Q8      ? kQ8BlockBytes - kCols * 2
           : f == WeightFormat::Q4    ? kQ4BlockBytes - kCols * 2
           : f == WeightFormat::Q4K   ? 8 * kQ4KRecordBytes
           : f == WeightFormat::Q8X   ? kQ8XScalesOffset  // (f32 fields: f16_fields is 0)
           : f == WeightFormat::Q6K16 ? 8 * kQ6K16RecordBytes
                                      : 8 * kQ6KRecordBytes;
}
// f16 fields per block and column (1, or 2 for Q4K's d and dmin; Q8X has f32 ones).
constexpr int64_t f16_fields(WeightFormat f) {
    return f == WeightFormat::Q4K ? 2 : f == WeightFormat::Q8X ? 0 : 1;
}
inline int64_t n_groups(int64_t K) {
    return (K + kQuantGroup - 1) / kQuantGroup;
}
inline int64_t n_blocks(WeightFormat f, int64_t K) {
    return (K + weight_block_k(f) - 1) / weight_block_k(f);
}

// Q8 / Q4: chooses one group's scale and values (n <= 32 real values; the rest of the group is zero padding).
// Returns the f16 bits of the scale; q gets n values. A group holding a NaN or an infinity becomes
// zeros and sets *nonfinite (pack_quantized counts them in PackedWeight::nonfinite_blocks).
uint16_t quantize_group(WeightFormat f, const float* w, int n, int8_t* q, bool* nonfinite = nullptr);

// The first non-finite f16 field (scale, d, dmin) of a packed weight, as its block index and the
// field's bits; false if all are finite (a pre-quantized checkpoint's check).
bool find_nonfinite_scale(const PackedWeight& w, int64_t* block, uint16_t* bits);

// Sets w's format and the geometry of a quantized [N, K] weight (panels, groups; data untouched): the
// one definition pack_quantized and the pre-quantized checkpoint reader share.
void set_quantized_shape(WeightFormat f, int64_t N, int64_t K, PackedWeight* w);

// Packs rows of a logical [N, K] matrix into `w` (format, shape and data set). row(n, out) writes the
// K f32 values of row n (the caller's source: a checkpoint tensor of any dtype, or several stacked).
// rows_done(n0, n1), if set, is called once rows [n0, n1) have been read (in chunks of 256 rows, from
// the worker threads), so a caller can drop the source rows while the rest is still being packed.
void pack_quantized(const ExecContext& ctx, WeightFormat f, int64_t N, int64_t K,
                    const std::function<void(int64_t n, float* out)>& row, PackedWeight* w,
                    const std::function<void(int64_t n0, int64_t n1)>& rows_done = nullptr);

// The stored numbers of one column's block, before the panel layout: what the packers (quantizing, or
// moving a GGUF file's blocks across: ops/quant/ggml_repack.h) hand to write_block_column.
struct ColumnBlock {
    uint16_t scale_bits = 0;     // Q8 / Q4: the group's f16 scale
    int8_t q[kQuantGroup] = {};  // Q8: [-127, 127]; Q4: [-8, 7]; Q8X: [-127, 127]
    float a[2] = {}, b[2] = {};  // Q8X: value = a[h] * q - b[h] for k in half h
    kquant::Q4KBlock q4k;        // Q4K
    kquant::Q6KBlock q6k;        // Q6K; Q6K16 its q and d_bits
    int8_t sc16[16] = {};        // Q6K16: the scale level of each 16 k
};
// Writes v as column c (< 32) of the block at blk (one format block of a panel).
void write_block_column(WeightFormat f, const ColumnBlock& v, int64_t c, uint8_t* blk);
// Packs a logical [N, K] weight from numbers already in the format: block(n, b, out) gives column n's
// block b (K % block_k == 0 is not required: the last block carries zeros past K). No value is chosen
// here, so the packed weight holds exactly what block() gave. rows_done as pack_quantized.
void pack_column_blocks(const ExecContext& ctx, WeightFormat f, int64_t N, int64_t K,
                        const std::function<void(int64_t n, int64_t b, ColumnBlock* out)>& block,
                        PackedWeight* w,
                        const std::function<void(int64_t n0, int64_t n1)>& rows_done = nullptr);

// Element access for the reference and for gathering rows (embedding) out of the packed layout.
int q_value(const PackedWeight& w, int64_t n, int64_t k);  // 0 for padding
// The affine map of group g of column n: value = *a * q - *b (Q8X: of its first half; half_affine).
void group_affine(const PackedWeight& w, int64_t n, int64_t g, float* a, float* b);
// The affine map of half h (k 16h .. 16h + 15) of group g of column n: for Q8X its own, else the group's.
void half_affine(const PackedWeight& w, int64_t n, int64_t g, int h, float* a, float* b);
// out[K] = row n dequantized: a * q - b.
void dequantize_row(const PackedWeight& w, int64_t n, float* out);
// Asks for the cache lines dequantize_row(w, n) will read (its scales and q bytes; a hint, no effect on
// results): a gather of rows spread over panels requests the next rows' lines ahead.
void prefetch_row(const PackedWeight& w, int64_t n);

// Activations of a quantized linear as the kernels read them: rows [M, K] as int8 groups. xq [M, Kp]
// (padding 0), xs [M, G], xsum [M, G] = sum of the group's xq (the Q4 kernels' +8 offset correction).
// A view into a QuantizedRows' buffers, trivially copyable: a stealable decode product
// (ThreadPool::parallel_for_stealable) carries its own copy, so a worker whose claim was stolen runs on
// with its job's shape, not the next op's (the buffers it points into only grow, waiting out such
// workers first: QuantizedRows::resize).
struct QuantRowsView {
    int64_t M = 0, K = 0, Kp = 0, G = 0;
    const int8_t* xq = nullptr;
    const float* xs = nullptr;
    const int32_t* xsum = nullptr;
    const int32_t* xsum_lo = nullptr;  // [M, G]: the sum of each group's first 16 xq (int8-x's halves)
    const int8_t* row(int64_t m) const { return xq + m * Kp; }
};

// The storage of quantized activation rows (the layout above), written by the quantizers.
struct QuantizedRows {
    int64_t M = 0, K = 0, Kp = 0, G = 0;
    std::vector<int8_t> xq;
    std::vector<float> xs;
    std::vector<int32_t> xsum, xsum_lo;
    // Sets the shape. Buffers only grow, through grow_read_buffer (core/thread_pool.h): a late worker of a
    // stealable product of late_readers may still read them (null: no pool's job reads them).
    void resize(int64_t M, int64_t K, ThreadPool* late_readers);
    QuantRowsView view() const { return {M, K, Kp, G, xq.data(), xs.data(), xsum.data(), xsum_lo.data()}; }
};
// The one activation quantizer (every ISA): xs = max|x| / 127 of the group, xq = round-to-nearest-even
// of x / xs (0 for an all-zero group). Buffers only grow (no allocation once warm).
// Kernels may vectorise it; they must give exactly these bytes (test_quant.cpp checks).
void quantize_activations(const float* x, int64_t M, int64_t K, QuantizedRows* out);
// Row m of a QuantizedRows already resized to [M, K].
void quantize_activation_row(const float* x_row, QuantizedRows* out, int64_t m);
// xsum_lo of row m from its xq (every quantizer's last step: the same sums whatever the ISA).
void sum_low_halves(QuantizedRows* out, int64_t m);

}  // namespace quant
}  // namespace gdn
