#define GDN_SIMD_AVX2
#include "ops/cpu/limits_kernels.h"
#include "ops/cpu/simd.h"

namespace gdn::cpu::avx2 {
#include "ops/cpu/limits.inc"
}  // namespace gdn::cpu::avx2
