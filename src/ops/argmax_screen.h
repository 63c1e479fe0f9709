// Exact greedy argmax over a large output (the lm_head: a third of a 0.8B model's decode bytes) that
// streams an int8 copy of the weight instead of the bf16 one, then recomputes exactly, with the bf16
// kernel, only the panels of columns that could still hold the maximum.
//
// For a row x (the bf16 values the exact kernel multiplies) and column n with bf16 weights w_n:
//   exact kernel  L_n = fl(sum_k x_k w_nk)            (f32 accumulation of exact bf16 products)
//   screen        A_n = s_x s_n I_n,  I_n = sum_k xq_k q_nk exactly in int32,
//                 xq = round(x / s_x) in [-127, 127],  q_n = round(w_n / s_n) in [-127, 127]
// With X = s_x xq, W_n = s_n q_n and the quantisation errors ex = x - X, ew_n = w_n - W_n,
// x.w_n - X.W_n = X.ew_n + ex.W_n + ex.ew_n, so by Cauchy-Schwarz |A_n - L_n| <= B_n with
//   B_n = (|X| + |ex|) |ew_n| + |ex| |W_n|     (2-norms; |ew_n| and |W_n| stored per column)
//       + gamma_K Xabs wmax_n                  (f32 rounding of the exact kernel: K roundings, Xabs =
//                                               sum |x_k|, wmax_n = max |w_nk|; gamma_K = K u / (1 - K u))
//       + 8 u |A_n|                            (the screen's own f32 scaling, and rounding A_n +- B_n)
// inflated by 0.1% (the bound's own f32 rounding) plus an absolute term for the denormals the exact
// kernel flushes (weights and partial sums below 2^-126: (Xabs + K) 2^-126). The
// true argmax n* satisfies A_n* + B_n* >= L_n* >= L_m >= A_m - B_m for every m, so every column with
// A_n + B_n >= max_m (A_m - B_m) is a candidate and n* is among them. The screen keeps, per panel and
// row, its columns' largest A - B and A + B (a panel's values do not depend on which thread screened
// it: a stealable job); the panels whose largest A + B reaches the row's threshold run through the
// exact kernel (the same code as the full pass, so bitwise the same values), ties to the lowest
// column. The greedy ids are therefore exactly those of the full bf16 pass.
#pragma once

#include <cstdint>
#include <memory>

#include "core/buffer.h"
#include "core/exec_context.h"
#include "ops/int8_screen.h"

namespace gdn {

struct PackedWeight;
struct LinearWeight;

// The screen of a BF16 packed weight (threaded over panels). Runs where argmax_screen_available().
std::shared_ptr<const Int8Screen> make_int8_screen(const ExecContext& ctx, const PackedWeight& w);

// The most rows screened_argmax takes (in chunks of cpu::kScreenRows, each one stream of the int8 copy):
// beyond it the full bf16 pass, whose cost grows with the rows only once it is compute bound, is the
// cheaper one (docs/perf.md).
constexpr int64_t kScreenMaxRows = 16;

// True and ids[m] = argmax_n (x_m @ W^T) for M <= kScreenMaxRows rows given as bf16 pairs [M, K2] (the
// exact kernel's input, bf16-rounded as linear() rounds it; a decode batch's or a speculative verify's
// rows, up to cpu::kScreenRows of them sharing one stream of the int8 copy), when w has a screen and
// argmax_screen_available(); false (nothing written) otherwise or when a row is not finite, so the
// caller runs the full pass. Counts a fallback when the candidates overflow (near-flat outputs: then
// the full pass is cheaper).
bool screened_argmax(const ExecContext& ctx, const uint32_t* xp, int64_t M, const LinearWeight& w,
                     int32_t* ids);

// Whether screened_argmax can run with the kernels selected now: AVX-512 with VNNI and bf16 dot products
// (vpdpbusd), or the AVX2 kernel where the linear op runs the f32-FMA kernels (AVX2, or AVX-512 without
// bf16 dot products); not where the linear or argmax op is forced to the reference.
bool argmax_screen_available();
// The screen's kernels as the start-up kernel table names them; null where !argmax_screen_available().
const char* argmax_screen_kernel();
// Whether this CPU can run a screen at all (AVX2 or better), whatever ISA is selected now: a loaded
// weight gets its screen then, so that switching ISAs (tests, A/B runs) finds it.
bool argmax_screen_supported_by_cpu();

}  // namespace gdn
