// Kernels that measure the machine's own limits (bench/ and `gdn bench --limits`).
#pragma once

#include <cstdint>

namespace gdn::cpu {

namespace avx512 {
// Sums n floats with 512-bit loads (a pure streaming read); returns the sum so it cannot be elided.
float stream_read(const float* p, int64_t n);
// Runs `iters` rounds of independent FMA chains; returns FLOPs executed.
double fma_chains(int64_t iters, float* sink);
// Same with vdpbf16ps (2 MACs per 32-bit lane per instruction); returns FLOPs executed.
double bf16_dot_chains(int64_t iters, float* sink);
// `iters` rounds of tdpbf16ps on four independent tile accumulators (operands stay in the tiles: TMUL's
// own rate, linear_amx.cpp); returns FLOPs executed. Only where dispatch.h cpu_has_amx_bf16().
double amx_dot_chains(int64_t iters, float* sink);
}  // namespace avx512

namespace avx2 {
float stream_read(const float* p, int64_t n);
double fma_chains(int64_t iters, float* sink);
}  // namespace avx2

}  // namespace gdn::cpu
