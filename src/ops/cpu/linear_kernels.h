// Per-ISA linear kernels (implemented in cpu/avx512 and cpu/avx2). Each computes the output columns of
// panels [p0, p1) for all M rows; threading is done by the caller.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ops/int8_screen.h"
#include "ops/packed_weight.h"

namespace gdn::cpu {

// The greedy argmax's int8 screen (ops/argmax_screen.h) over panels [p0, p1) for M <= kScreenRows rows
// at once (each weight vector loaded once for all of them): avx512::screen_i8 (VNNI) and
// avx2::screen_i8, the same results. Row m: xq + m * K4, its k-quads as 4 bytes xq_k + 128, and r[m].
// Writes panel p's largest A_n - B_n and largest A_n + B_n over its columns (those below N) to
// bounds[2 m * ld + p] and bounds[(2 m + 1) * ld + p]: the threshold and the panels that can reach it
// follow from these alone, whichever thread screened which panel (a stealable job's units).
constexpr int kScreenRows = 8;
// From this many rows on the screen's integer sums run on AMX-INT8 tiles where dispatch.h has_amx_int8().
constexpr int kScreenAmxRows = 4;

// f(std::integral_constant<int, M>{}) for a run-time M in [1, N]: a kernel templated on its row count,
// called with the rows a step has.
template <int N, typename F>
auto with_rows(int M, const F& f) {
    if constexpr (N > 1)
        if (M < N) return with_rows<N - 1>(M, f);
    return f(std::integral_constant<int, N>{});
}

// round_out: round the outputs to bf16 as they are stored (bf16 activation mode).
namespace avx512 {
// x f32 [M, ldx]; y [M, ldy]
void linear_f32(const float* x, int64_t M, int64_t ldx, const PackedWeight& w, float* y, int64_t ldy,
                int64_t p0, int64_t p1, bool round_out);
// xp: x as bf16 pairs (uint32 per k-pair) [M, ldp]; BF16 weights only
void linear_bf16dot(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, float* y, int64_t ldy,
                    int64_t p0, int64_t p1, bool round_out);
// Row-wise argmax of the products without storing them: for each row m, the largest output over panels
// [p0, p1) and its column (the first on ties) go to best_val[m] / best_idx[m].
void linear_bf16dot_argmax(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, int64_t p0,
                           int64_t p1, float* best_val, int64_t* best_idx);
// Fused SwiGLU epilogue: panels hold 16 gate then 16 up columns; y [M, ldy] gets silu(gate) * up, 16
// columns per panel. Whole K in one pass (K2 <= the kernel's k block).
void linear_bf16dot_swiglu(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, float* y,
                           int64_t ldy, int64_t p0, int64_t p1);
// The same three on AMX tiles (any K; only where the CPU has AMX-BF16 and the OS granted the tiles).
void linear_bf16dot_amx(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, float* y,
                        int64_t ldy, int64_t p0, int64_t p1, bool round_out);
void linear_bf16dot_argmax_amx(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, int64_t p0,
                               int64_t p1, float* best_val, int64_t* best_idx);
void linear_bf16dot_swiglu_amx(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, float* y,
                               int64_t ldy, int64_t p0, int64_t p1);
// AMX tiles (linear_amx.cpp; only where dispatch.h has_amx_bf16()). amx_panel_block computes
// c [rows x 32 columns] (row stride 32; rows <= 32) = rows [0, rows) of xp [., ldp] times the panel B over
// k-pairs [0, kk_end), kk_end a multiple of 16, configuring the thread's tiles for that many rows;
// amx_end releases them (once a call is done). prefetch: the panel streams from DRAM (its first row block).
void amx_panel_block(const uint32_t* xp, int64_t ldp, int rows, const uint16_t* B, int64_t kk_end, float* c,
                     bool prefetch);
void amx_end();
// The int8 screen's integer sums on AMX-INT8 tiles (screen_amx.cpp; only where dispatch.h has_amx_int8(),
// for kScreenAmxRows rows or more):
// c [rows x 32] (row stride 32) = sum over k-quads [0, kq_end) of rows [0, rows) of xq [., K4] (unsigned
// quads) times the panel (Int8Screen layout); kq_end a multiple of 16, rows <= 16. amx_end releases the
// tiles once a call is done.
void amx_screen_block(const uint32_t* xq, int64_t K4, int rows, const int8_t* panel, int64_t kq_end,
                      int32_t* c);
// x [M, K] f32 -> bf16 pairs [M, K2] (RNE; odd K padded with 0)
void pack_bf16_pairs(const float* x, int64_t M, int64_t K, uint32_t* xp, int64_t K2);
void round_bf16_inplace(float* x, int64_t n);
void screen_i8(const uint32_t* xq, int M, const Int8Screen& s, const ScreenRow* r, int64_t p0, int64_t p1,
               float* bounds, int64_t ld);
// The same bounds with the integer sums on AMX-INT8 tiles (kScreenAmxRows to kScreenRows rows; where
// dispatch.h has_amx_int8()): below kScreenAmxRows the screen is bound by the stream on vpdpbusd already
// (screen_avx512.cpp keeps the measurement).
void screen_i8_amx(const uint32_t* xq, int M, const Int8Screen& s, const ScreenRow* r, int64_t p0, int64_t p1,
                   float* bounds, int64_t ld);
}  // namespace avx512

namespace avx2 {
void linear_f32(const float* x, int64_t M, int64_t ldx, const PackedWeight& w, float* y, int64_t ldy,
                int64_t p0, int64_t p1, bool round_out);
void round_bf16_inplace(float* x, int64_t n);
void screen_i8(const uint32_t* xq, int M, const Int8Screen& s, const ScreenRow* r, int64_t p0, int64_t p1,
               float* bounds, int64_t ld);
}  // namespace avx2

// The bf16 (vdpbf16ps-class) linear kernels of one unit, a row per unit: the products of bf16 pairs
// against BF16 panels, plain, with the SwiGLU epilogue and as a row-wise argmax. The op layer picks the
// row once (dispatch.h bf16_linear_kernels(): AMX tiles where has_amx_bf16(), else vdpbf16ps); every bf16
// product of a process takes the same row, so a row's sums never depend on the batch.
struct Bf16LinearKernels {
    const char* unit;  // "amx" | "vdpbf16ps"
    decltype(&avx512::linear_bf16dot) linear;
    decltype(&avx512::linear_bf16dot_swiglu) swiglu;
    decltype(&avx512::linear_bf16dot_argmax) argmax;
    bool swiglu_any_k;  // the SwiGLU epilogue takes any K (vdpbf16ps: K2 <= 2048, the whole K in one block)
};
const Bf16LinearKernels& bf16_linear_kernels_amx();
const Bf16LinearKernels& bf16_linear_kernels_vdp();

}  // namespace gdn::cpu
