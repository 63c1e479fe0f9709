#include "ops/linear_input.h"

#include "core/profiler.h"
#include "core/thread_pool.h"

namespace gdn {

const quant::QuantizedRows& LinearInput::quantized(const ExecContext& ctx, QuantizeRowFn quantize, Isa isa) {
    // Every table row's quantizer gives the same bytes (quant_format.h); one that differs from the
    // maker of the kept form still remakes it, so a form is always its own quantizer's.
    if (quantized_by_ != quantize) {
        quantize_rows(ctx, x_, M_, K_, isa, quantize, &q_);
        quantized_by_ = quantize;
    }
    return q_;
}

const uint32_t* LinearInput::bf16_pairs(const ExecContext& ctx) {
    if (!have_pairs_) {
        GDN_PROFILE(ctx, "bf16 pairs");
        const int64_t K2 = this->K2();
        grow_read_buffer(ctx.pool(), pairs_, static_cast<size_t>(M_ * K2));
        pack_bf16_pairs_pooled(ctx, x_, M_, K_, pairs_.data(), K2);
        have_pairs_ = true;
    }
    return pairs_.data();
}

}  // namespace gdn
