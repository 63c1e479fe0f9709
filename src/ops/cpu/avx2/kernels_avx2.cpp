#define GDN_SIMD_AVX2
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace gdn::cpu::avx2 {
#include "ops/cpu/kernels.inc"

// The chunked delta rule uses kernels.inc's helpers: it comes after them.
#include "ops/cpu/gdn_chunked.inc"
}  // namespace gdn::cpu::avx2
