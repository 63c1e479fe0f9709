// Which format each packed linear takes under a --quantization scheme (ops/weight_format.h): the one
// place that decides, by the linear's for_each_linear name (model/weights.h).
//
//   int8      int8 everywhere
//   int4-sym  int4-sym, the lm_head (and a tied embedding) int8
//   int4      int4-k, with int6-k for the lm_head (and a tied embedding), and, at the layers of
//             llama.cpp's use_more_bits (the first and last eighth, every third between), the GDN
//             in_proj and every ffn down projection (dense, routed and shared experts)
//
// int4 follows llama.cpp's Q4_K_M where our fused projections allow: Q4_K_M gives Q6_K to output,
// ffn_down at use_more_bits layers, and the "attention-v-like" attn_qkv / attn_v at use_more_bits of
// their own count. Our GDN in_proj fuses q|k|v|z|b|a, so it takes int6-k whole; the full-attention
// q|k|v (v a sixth of it) stays int4-k. Measured on the demo model (docs/perf.md) with llama.cpp's own
// Q4_K / Q6_K values in this mixture: mean KLD 0.00650 at 5.09 bits per weight against Q4_K_M's
// 0.00682 at 5.07; with int6-k's cheaper scales (sub-blocks of 32) the bits fall below Q4_K_M's.
#pragma once

#include <string>

#include "ops/weight_format.h"

namespace gdn {

WeightFormat scheme_format(WeightFormat scheme, const std::string& linear, int n_layers);

// llama-quant.cpp's use_more_bits: layer i of n is in the first or last eighth, or every third between.
bool use_more_bits(int i, int n);

}  // namespace gdn
