#include "ops/linear_input.h"

#include "core/log.h"
#include "core/profiler.h"
#include "core/thread_pool.h"
#include "ops/cpu/linear_kernels.h"

namespace gdn {

const quant::QuantizedRows& LinearInput::quantized(QuantizeRowFn quantize, Isa isa) {
    // Every table row's quantizer gives the same bytes (quant_format.h); one that differs from the
    // maker of the kept form still remakes it, so a form is always its own quantizer's.
    if (quantized_by_ != quantize) {
        quantize_rows(x_, M_, K_, isa, quantize, &q_);
        quantized_by_ = quantize;
    }
    return q_;
}

const uint32_t* LinearInput::bf16_pairs() {
    if (!have_pairs_) {
        GDN_PROFILE("bf16 pairs");
        const int64_t K2 = this->K2();
        if (pairs_.size() < static_cast<size_t>(M_ * K2)) pairs_.resize(M_ * K2);
        pack_bf16_pairs_pooled(x_, M_, K_, pairs_.data(), K2);
        have_pairs_ = true;
    }
    return pairs_.data();
}

void linear(LinearInput& in, const LinearWeight& w, float* y, bool bf16_act) {
    const PackedWeight& p = w.packed;
    const int64_t M = in.M();
    GDN_CHECK(in.K() == w.K(), "linear: input rows of %lld for a weight of K = %lld", (long long)in.K(), (long long)w.K());
    if (M <= 0) return;
    const Isa isa = op_isa(OpId::LINEAR);
    if (is_quantized(p.format)) {
        GDN_PROFILE(M == 1 ? "linear (gemv)" : "linear");
        const QuantKernelRow& k = quant_kernel(isa, p.format);
        run_quant_gemm(k.gemm, isa, in.quantized(k.quantize, isa), p, y, p.N);
        return;
    }
    if (uses_bf16_dot(p, false, bf16_act)) {
        GDN_PROFILE(M == 1 ? "linear (gemv)" : "linear");
        const uint32_t* xp = in.bf16_pairs();
        global_pool().parallel_for_balanced(p.n_panels, min_stream_panels(p.panel_bytes(), M),
                                            [&](int, int64_t p0, int64_t p1) {
            cpu::avx512::linear_bf16dot(xp, M, in.K2(), p, y, p.N, p0, p1, false);
        });
        return;
    }
    linear(in.x(), M, w, y, bf16_act);  // the f32 and reference kernels take x as it is
}

void linear_swiglu(LinearInput& in, const LinearWeight& w, float* out, bool bf16_act) {
    const PackedWeight& p = w.packed;
    const int64_t M = in.M();
    GDN_CHECK(in.K() == w.K(), "linear_swiglu: input rows of %lld for a weight of K = %lld", (long long)in.K(),
              (long long)w.K());
    if (M <= 0) return;
    const Isa isa = op_isa(OpId::LINEAR);
    if (is_quantized(p.format)) {
        QuantizeRowFn quantize = nullptr;
        if (const QuantGemmFn epilogue = pooled_quant_kernel(p, true, &quantize)) {
            GDN_PROFILE("linear+swiglu");
            run_quant_gemm(epilogue, isa, in.quantized(quantize, isa), p, out, p.N / 2);
            return;
        }
    } else if (uses_bf16_dot(p, true, bf16_act)) {
        GDN_PROFILE("linear+swiglu");
        const uint32_t* xp = in.bf16_pairs();
        global_pool().parallel_for_balanced(p.n_panels, min_stream_panels(p.panel_bytes(), M),
                                            [&](int, int64_t p0, int64_t p1) {
            cpu::avx512::linear_bf16dot_swiglu(xp, M, in.K2(), p, out, p.N / 2, p0, p1);
        });
        return;
    }
    linear_swiglu(in.x(), M, w, out, bf16_act);  // products, then the activation
}

}  // namespace gdn
