// The quantized weight layouts (WeightFormat::Q8 / Q4) and their scalar definition: how a column's
// values are chosen, where each byte lives, and what a product means. Every kernel is tested against
// ref::linear_quant, which is written from this file alone.
//
// A weight [N, K] is cut into panels of 32 columns (kPanelCols, as the float formats) and groups of
// 32 k (kQuantGroup); K is zero-padded to Kp = 32 * n_groups. Panel p's groups are consecutive blocks:
//   block(p, g) at byte (p * n_groups + g) * block_bytes
//   Q8 block (1088 B): int8 q[8 quads][32 cols][4]  (q of column c, k = 4j + i at byte (j*32 + c)*4 + i:
//                      a column's k-quad is one 32-bit lane, the operand of vpmaddubsw / vpdpbusd),
//                      then f16 scale[32]
//   Q4 block (576 B):  uint8 b[4 quad pairs][32 cols][4]: low nibble q(k = 8j + i) + 8, high nibble
//                      q(k = 8j + 4 + i) + 8, then f16 scale[32]
// So a decode step streams every block once, in order, and the scales of a group sit next to its
// values (one stream, no second pointer).
//
// Values: w_nk ~= scale_ng * q_nk with g = k / 32. Q8: q in [-127, 127], scale = max|w| / 127. Q4: q in
// [-8, 7] with the scale that minimises the group's squared error (a search over candidate divisors,
// then least squares on the chosen q; every scale is rounded to f16 before q is chosen).
//
// Activations: each row x_m is quantized per group of 32 k the same way as Q8 weights (xs_mg =
// max|x| / 127, xq in [-127, 127]; one function for every path: quantize_activations), and
//   y_mn = sum_g (scale_ng * xs_mg) * D_mng,   D_mng = sum_{k in g} q_nk xq_mk   (exact, int32)
// summed over g in f32. Fast kernels may sum the groups in another order (f32 rounding only).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/dtype.h"
#include "ops/weight_format.h"

namespace gdn {

struct PackedWeight;

namespace quant {

constexpr int64_t kCols = 32;  // columns per panel (== kPanelCols)
constexpr int64_t kQ8BlockBytes = kQuantGroup * kCols + kCols * 2;
constexpr int64_t kQ4BlockBytes = kQuantGroup * kCols / 2 + kCols * 2;
constexpr int64_t block_bytes(WeightFormat f) { return f == WeightFormat::Q8 ? kQ8BlockBytes : kQ4BlockBytes; }
constexpr int64_t scales_offset(WeightFormat f) { return block_bytes(f) - kCols * 2; }
inline int64_t n_groups(int64_t K) { return (K + kQuantGroup - 1) / kQuantGroup; }

// Chooses one group's scale and values (n <= 32 real values; the rest of the group is zero padding).
// Returns the f16 bits of the scale; q gets n values. A group holding a NaN or an infinity becomes
// zeros and sets *nonfinite (pack_quantized counts them in PackedWeight::nonfinite_groups).
uint16_t quantize_group(WeightFormat f, const float* w, int n, int8_t* q, bool* nonfinite = nullptr);

// Sets w's format and the geometry of a quantized [N, K] weight (panels, groups; data untouched): the
// one definition pack_quantized and the pre-quantized checkpoint reader share.
void set_quantized_shape(WeightFormat f, int64_t N, int64_t K, PackedWeight* w);

// Packs rows of a logical [N, K] matrix into `w` (format, shape and data set). row(n, out) writes the
// K f32 values of row n (the caller's source: a checkpoint tensor of any dtype, or several stacked).
// rows_done(n0, n1), if set, is called once rows [n0, n1) have been read (in chunks of 256 rows, from
// the worker threads), so a caller can drop the source rows while the rest is still being packed.
void pack_quantized(WeightFormat f, int64_t N, int64_t K, const std::function<void(int64_t n, float* out)>& row,
                    PackedWeight* w, const std::function<void(int64_t n0, int64_t n1)>& rows_done = nullptr);

// Element access for the reference and for gathering rows (embedding) out of the packed layout.
int q_value(const PackedWeight& w, int64_t n, int64_t k);  // 0 for padding
float q_scale(const PackedWeight& w, int64_t n, int64_t g);
// out[K] = row n dequantized: scale * q.
void dequantize_row(const PackedWeight& w, int64_t n, float* out);

// Activations of a quantized linear: rows [M, K] as int8 groups. xq [M, Kp] (padding 0), xs [M, G],
// xsum [M, G] = sum of the group's xq (the Q4 kernels' +8 offset correction).
struct QuantizedRows {
    int64_t M = 0, K = 0, Kp = 0, G = 0;
    std::vector<int8_t> xq;
    std::vector<float> xs;
    std::vector<int32_t> xsum;
    const int8_t* row(int64_t m) const { return xq.data() + m * Kp; }
    void resize(int64_t M, int64_t K);  // sets the shape; buffers only grow
};
// The one activation quantizer (every ISA): xs = max|x| / 127 of the group, xq = round-to-nearest-even
// of x / xs (0 for an all-zero group). Buffers only grow (no allocation once warm).
// Kernels may vectorise it; they must give exactly these bytes (test_quant.cpp checks).
void quantize_activations(const float* x, int64_t M, int64_t K, QuantizedRows* out);
// Row m of a QuantizedRows already resized to [M, K].
void quantize_activation_row(const float* x_row, QuantizedRows* out, int64_t m);

}  // namespace quant
}  // namespace gdn
