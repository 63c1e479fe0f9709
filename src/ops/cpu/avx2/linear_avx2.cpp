// AVX2 linear kernel: the generic f32 kernel (no bf16 dot products on AVX2 machines).
#define GDN_SIMD_AVX2
#include <algorithm>

#include "ops/cpu/linear_kernels.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/stream_ahead.h"

namespace gdn::cpu::avx2 {

#include "ops/cpu/linear_f32.inc"

}  // namespace gdn::cpu::avx2
