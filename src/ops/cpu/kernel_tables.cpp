// The kernel tables of ops/cpu/kernels.h (one per ISA) and of linear_kernels.h's bf16 linears (one per
// unit): the addresses of each build's kernels.
#include "ops/cpu/kernels.h"
#include "ops/cpu/linear_kernels.h"

namespace gdn::cpu {

const KernelTable& avx512_kernels() {
    static const KernelTable t{
        .isa = "avx512",
        .rms_norm_row = &avx512::rms_norm_row,
        .add_rms_norm_row = &avx512::add_rms_norm_row,
        .norm_rope_head = &avx512::norm_rope_head,
        .silu_mul = &avx512::silu_mul,
        .conv1d_silu = &avx512::conv1d_silu,
        .conv1d_silu_rows = &avx512::conv1d_silu_rows,
        .conv1d_state_update = &avx512::conv1d_state_update,
        .l2_norm_scale = &avx512::l2_norm_scale,
        .dot = &avx512::dot,
        .gdn_step = &avx512::gdn_step,
        .gdn_slab = &avx512::gdn_slab,
        .gdn_chunk = &avx512::gdn_chunk,
        .gdn_chunk_scratch_floats = &avx512::gdn_chunk_scratch_floats,
        .gated_norm_row = &avx512::gated_norm_row,
        .attention_group = &avx512::attention_group,
        .attention_decode_supported = &avx512::attention_decode_supported,
        .attention_decode_range = &avx512::attention_decode_range,
        .attention_merge = &avx512::attention_merge,
        .argmax = &avx512::argmax,
    };
    return t;
}

const KernelTable& avx2_kernels() {
    static const KernelTable t{
        .isa = "avx2",
        .rms_norm_row = &avx2::rms_norm_row,
        .add_rms_norm_row = &avx2::add_rms_norm_row,
        .norm_rope_head = &avx2::norm_rope_head,
        .silu_mul = &avx2::silu_mul,
        .conv1d_silu = &avx2::conv1d_silu,
        .conv1d_silu_rows = &avx2::conv1d_silu_rows,
        .conv1d_state_update = &avx2::conv1d_state_update,
        .l2_norm_scale = &avx2::l2_norm_scale,
        .dot = &avx2::dot,
        .gdn_step = &avx2::gdn_step,
        .gdn_slab = &avx2::gdn_slab,
        .gdn_chunk = &avx2::gdn_chunk,
        .gdn_chunk_scratch_floats = &avx2::gdn_chunk_scratch_floats,
        .gated_norm_row = &avx2::gated_norm_row,
        .attention_group = &avx2::attention_group,
        .attention_decode_supported = &avx2::attention_decode_supported,
        .attention_decode_range = &avx2::attention_decode_range,
        .attention_merge = &avx2::attention_merge,
        .argmax = &avx2::argmax,
    };
    return t;
}

const Bf16LinearKernels& bf16_linear_kernels_amx() {
    static const Bf16LinearKernels t{"amx", &avx512::linear_bf16dot_amx, &avx512::linear_bf16dot_swiglu_amx,
                                     &avx512::linear_bf16dot_argmax_amx, true};
    return t;
}

const Bf16LinearKernels& bf16_linear_kernels_vdp() {
    static const Bf16LinearKernels t{"vdpbf16ps", &avx512::linear_bf16dot, &avx512::linear_bf16dot_swiglu,
                                     &avx512::linear_bf16dot_argmax, false};
    return t;
}

}  // namespace gdn::cpu
