// An activation matrix x [M, K] read by several linears, with the operand forms their kernels take made
// once and kept: int8 groups (quantized weights, ops/linear_quant.h) and bf16 pairs (the AVX-512 bf16
// dot). The MoE block reads its input through one: the router, the shared expert's gate|up, its gate and
// every routed expert's gate|up (k copies of each token's row) multiply the same h, which linear() alone
// would convert once per call and linear_group() once per routed row. Results are bitwise those of the
// plain calls (the same conversion, made once). Buffers only grow: a workspace keeps one and resets it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/log.h"
#include "ops/dispatch.h"
#include "ops/linear_quant.h"

namespace gdn {

class LinearInput {
  public:
    // Fails unless the rows fit a weight of K columns (op: the caller's name, for the message).
    void check_fits(int64_t K, const char* op) const {
        GDN_CHECK(K_ == K, "%s: input rows of %lld for a weight of K = %lld", op, (long long)K_,
                  (long long)K);
    }
    // A new matrix: the forms made for the previous one are dropped (their memory is kept).
    void reset(const float* x, int64_t M, int64_t K) {
        x_ = x;
        M_ = M;
        K_ = K;
        quantized_by_ = nullptr;
        have_pairs_ = false;
    }
    const float* x() const { return x_; }
    int64_t M() const { return M_; }
    int64_t K() const { return K_; }

    // Every row quantized by `quantize` (the kernel table row's quantizer; over the pool unless isa is
    // the reference), made on first use.
    const quant::QuantizedRows& quantized(const ExecContext& ctx, QuantizeRowFn quantize, Isa isa);
    // Every row as bf16 pairs [M, K2], K2 = ceil(K / 2) (cpu::avx512::pack_bf16_pairs), made on first use.
    const uint32_t* bf16_pairs(const ExecContext& ctx);
    int64_t K2() const { return (K_ + 1) / 2; }

  private:
    const float* x_ = nullptr;
    int64_t M_ = 0, K_ = 0;
    QuantizeRowFn quantized_by_ = nullptr;  // null: no quantized form for this matrix yet
    quant::QuantizedRows q_;
    bool have_pairs_ = false;
    std::vector<uint32_t> pairs_;
};

// y [M, N] = x @ W^T as linear(in.x(), in.M(), w, y, bf16_act, round_out), from in's kept forms
// (defined with it in ops/linear.cpp).
void linear(const ExecContext& ctx, LinearInput& in, const LinearWeight& w, float* y, bool bf16_act,
            bool round_out = false);
// out [M, I] as linear_swiglu(in.x(), in.M(), w, out, bf16_act), from in's kept forms.
void linear_swiglu(const ExecContext& ctx, LinearInput& in, const LinearWeight& w, float* out, bool bf16_act);

}  // namespace gdn
