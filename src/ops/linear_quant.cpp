#include "ops/linear_quant.h"

#include "core/log.h"
#include "core/profiler.h"
#include "core/thread_pool.h"
#include "ops/cpu/linear_quant_kernels.h"
#include "ops/linear_input.h"
#include "ops/ref/ref_ops.h"

namespace gdn {

namespace {

// The scalar reference over the same panel range (single threaded by linear_quantized).
void ref_gemm(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
              int64_t p1) {
    (void)p0;
    (void)p1;
    ref::linear_quant(x, w, y, ldy);
}

// The scalar reference over panels [p0, p1) (its columns only): int8-x on an ISA with no kernel of it yet,
// run over the pool like a kernel. Named so in the kernel table: a slow path chosen is visible.
void ref_panels(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                int64_t p1) {
    ref::linear_quant(x, w, y, ldy, p0 * quant::kCols, p1 * quant::kCols);
}

// The first row matching (ISA, format) whose CPU need holds runs. AVX2 takes the AVX-VNNI build of its
// kernels where the CPU has it; AVX-512 CPUs without AVX-512 VNNI (Skylake-X, which has no AVX-VNNI
// either) run the plain AVX2 kernels, which every AVX-512 CPU executes. The activation quantizer is
// the AVX-512 one on AVX512 rows (it needs no VNNI) and the AVX2 one on AVX2 rows.
constexpr CpuNeed kAny = CpuNeed::NOTHING, kVnni512 = CpuNeed::AVX512_VNNI, kVnni256 = CpuNeed::AVX_VNNI;
const QuantKernelRow kTable[] = {
    {Isa::REF, WeightFormat::Q8, "reference (scalar)", kAny, quant::quantize_activation_row, ref_gemm,
     nullptr, false},
    {Isa::REF, WeightFormat::Q4, "reference (scalar)", kAny, quant::quantize_activation_row, ref_gemm,
     nullptr, false},
    {Isa::REF, WeightFormat::Q4K, "reference (scalar)", kAny, quant::quantize_activation_row, ref_gemm,
     nullptr, false},
    {Isa::REF, WeightFormat::Q6K, "reference (scalar)", kAny, quant::quantize_activation_row, ref_gemm,
     nullptr, false},
    {Isa::REF, WeightFormat::Q8X, "reference (scalar)", kAny, quant::quantize_activation_row, ref_gemm,
     nullptr, false},
    {Isa::REF, WeightFormat::Q6K16, "reference (scalar)", kAny, quant::quantize_activation_row, ref_gemm,
     nullptr, false},
    {Isa::AVX2, WeightFormat::Q6K16, "reference (scalar, over the pool: no AVX2 kernel for int6-k16 yet)",
     kAny, cpu::avx2::quantize_activation_row, ref_panels, nullptr, false},
    {Isa::AVX2, WeightFormat::Q8X, "reference (scalar, over the pool: no AVX2 kernel for int8-x yet)", kAny,
     cpu::avx2::quantize_activation_row, ref_panels, nullptr, false},
    {Isa::AVX2, WeightFormat::Q8, "avx-vnni vpdpbusd (sign trick)", kVnni256,
     cpu::avx2::quantize_activation_row, cpu::avxvnni::linear_q8, cpu::avxvnni::linear_q8_swiglu, false},
    {Isa::AVX2, WeightFormat::Q4, "avx-vnni vpdpbusd (int32 group sums)", kVnni256,
     cpu::avx2::quantize_activation_row, cpu::avxvnni::linear_q4, cpu::avxvnni::linear_q4_swiglu, false},
    {Isa::AVX2, WeightFormat::Q4K, "avx-vnni vpdpbusd (int32 group sums, minimum by group sum)", kVnni256,
     cpu::avx2::quantize_activation_row, cpu::avxvnni::linear_q4k, cpu::avxvnni::linear_q4k_swiglu, false},
    {Isa::AVX2, WeightFormat::Q6K, "avx-vnni vpdpbusd (q + 32, offset by group sum)", kVnni256,
     cpu::avx2::quantize_activation_row, cpu::avxvnni::linear_q6k, cpu::avxvnni::linear_q6k_swiglu, false},
    {Isa::AVX2, WeightFormat::Q8, "avx2 vpmaddubsw (sign trick)", kAny, cpu::avx2::quantize_activation_row,
     cpu::avx2::linear_q8, cpu::avx2::linear_q8_swiglu, false},
    {Isa::AVX2, WeightFormat::Q4, "avx2 vpmaddubsw (int16 group sums)", kAny,
     cpu::avx2::quantize_activation_row, cpu::avx2::linear_q4, cpu::avx2::linear_q4_swiglu, false},
    {Isa::AVX2, WeightFormat::Q4K, "avx2 vpmaddubsw (int16 group sums, minimum by group sum)", kAny,
     cpu::avx2::quantize_activation_row, cpu::avx2::linear_q4k, cpu::avx2::linear_q4k_swiglu, false},
    {Isa::AVX2, WeightFormat::Q6K, "avx2 vpmaddubsw (q + 32, offset by group sum)", kAny,
     cpu::avx2::quantize_activation_row, cpu::avx2::linear_q6k, cpu::avx2::linear_q6k_swiglu, false},
    {Isa::AVX512, WeightFormat::Q8, "avx512 vpdpbusd (weight + 128, group-sum offset)", kVnni512,
     cpu::avx512::quantize_activation_row, cpu::avx512::linear_q8, cpu::avx512::linear_q8_swiglu, false,
     cpu::avx512::amx_quant_panels<WeightFormat::Q8, false>,
     cpu::avx512::amx_quant_panels<WeightFormat::Q8, true>},
    {Isa::AVX512, WeightFormat::Q4, "avx512 vpdpbusd (nibble + 8, group-sum offset)", kVnni512,
     cpu::avx512::quantize_activation_row, cpu::avx512::linear_q4, cpu::avx512::linear_q4_swiglu, false,
     cpu::avx512::amx_quant_panels<WeightFormat::Q4, false>,
     cpu::avx512::amx_quant_panels<WeightFormat::Q4, true>},
    {Isa::AVX512, WeightFormat::Q4K, "avx512 vpdpbusd (group scale and minimum in f32)", kVnni512,
     cpu::avx512::quantize_activation_row, cpu::avx512::linear_q4k, cpu::avx512::linear_q4k_swiglu, false,
     cpu::avx512::amx_quant_panels<WeightFormat::Q4K, false>,
     cpu::avx512::amx_quant_panels<WeightFormat::Q4K, true>},
    {Isa::AVX512, WeightFormat::Q6K, "avx512 vpdpbusd (q + 32, group-sum offset)", kVnni512,
     cpu::avx512::quantize_activation_row, cpu::avx512::linear_q6k, cpu::avx512::linear_q6k_swiglu, false,
     cpu::avx512::amx_quant_panels<WeightFormat::Q6K, false>,
     cpu::avx512::amx_quant_panels<WeightFormat::Q6K, true>},
    {Isa::AVX512, WeightFormat::Q8, "avx2 vpmaddubsw (sign trick; this CPU has no AVX-512 VNNI)", kAny,
     cpu::avx512::quantize_activation_row, cpu::avx2::linear_q8, cpu::avx2::linear_q8_swiglu, false},
    {Isa::AVX512, WeightFormat::Q4, "avx2 vpmaddubsw (int16 group sums; this CPU has no AVX-512 VNNI)", kAny,
     cpu::avx512::quantize_activation_row, cpu::avx2::linear_q4, cpu::avx2::linear_q4_swiglu, false},
    {Isa::AVX512, WeightFormat::Q4K, "avx2 vpmaddubsw (this CPU has no AVX-512 VNNI)", kAny,
     cpu::avx512::quantize_activation_row, cpu::avx2::linear_q4k, cpu::avx2::linear_q4k_swiglu, false},
    {Isa::AVX512, WeightFormat::Q8X,
     "avx512 vpdpbusd (weight + 128, half-group sums offset; f32 scale and "
     "offset per 16)",
     kVnni512, cpu::avx512::quantize_activation_row, cpu::avx512::linear_q8x, cpu::avx512::linear_q8x_swiglu,
     false},
    {Isa::AVX512, WeightFormat::Q8X,
     "reference (scalar, over the pool: no int8-x kernel without AVX-512 VNNI yet)", kAny,
     cpu::avx512::quantize_activation_row, ref_panels, nullptr, false},
    {Isa::AVX512, WeightFormat::Q6K16, "avx512 vpdpbusd (q + 32, half-group sums offset, a scale per 16)",
     kVnni512, cpu::avx512::quantize_activation_row, cpu::avx512::linear_q6k16,
     cpu::avx512::linear_q6k16_swiglu, false},
    {Isa::AVX512, WeightFormat::Q6K16,
     "reference (scalar, over the pool: no int6-k16 kernel without AVX-512 VNNI yet)", kAny,
     cpu::avx512::quantize_activation_row, ref_panels, nullptr, false},
    {Isa::AVX512, WeightFormat::Q6K, "avx2 vpmaddubsw (this CPU has no AVX-512 VNNI)", kAny,
     cpu::avx512::quantize_activation_row, cpu::avx2::linear_q6k, cpu::avx2::linear_q6k_swiglu, false},
};

bool holds(CpuNeed need) {
    switch (need) {
        case CpuNeed::NOTHING:
            return true;
        case CpuNeed::AVX512_VNNI:
            return cpu_has_avx512_vnni();
        case CpuNeed::AVX_VNNI:
            return has_avx_vnni();
    }
    return false;
}

// The calling thread's quantized activations (x of a linear without a shared LinearInput).
struct ActivationRows {
    quant::QuantizedRows rows;
};

}  // namespace

const QuantKernelRow& quant_kernel(Isa isa, WeightFormat format) {
    for (const QuantKernelRow& r : kTable)
        if (r.isa == isa && r.format == format && holds(r.need)) return r;
    GDN_CHECK(false, "no quantized kernel for %s on %s", weight_format_name(format), isa_name(isa));
    return kTable[0];
}

void quantize_rows(const ExecContext& ctx, const float* x, int64_t M, int64_t K, Isa isa,
                   QuantizeRowFn quantize, quant::QuantizedRows* xq) {
    GDN_PROFILE(ctx, "quantize activations");
    xq->resize(M, K, &ctx.pool());
    if (isa == Isa::REF) {
        for (int64_t m = 0; m < M; ++m) quantize(x + m * K, xq, m);
    } else {
        ctx.pool().parallel_for(
            M,
            [&](int64_t m0, int64_t m1) {
                for (int64_t m = m0; m < m1; ++m) quantize(x + m * K, xq, m);
            },
            row_grain(2 * K));
    }
}

namespace {

// The row's products (or SwiGLU epilogue) for a batch of M rows: on AMX-INT8 tiles from amx_min_rows rows
// where the row has them and the process uses AMX, else its vector kernel. The one place that is decided.
QuantGemmFn gemm_for(const QuantKernelRow& k, int64_t M, bool swiglu) {
    const bool tiles = k.tiles_gemm && M >= cpu::avx512::amx_min_rows(k.format) && has_amx_int8();
    if (swiglu) return tiles ? k.tiles_swiglu : k.swiglu;
    return tiles ? k.tiles_gemm : k.gemm;
}

// x [M, K] quantized by `quantize`: the shared input's kept form, or made into the thread's scratch.
const quant::QuantizedRows& quantized_rows(const ExecContext& ctx, const float* x, int64_t M, int64_t K,
                                           Isa isa, QuantizeRowFn quantize, LinearInput* in) {
    if (in) return in->quantized(ctx, quantize, isa);
    quant::QuantizedRows& xq = ctx.pool().scratch().get<ActivationRows>().rows;
    quantize_rows(ctx, x, M, K, isa, quantize, &xq);
    return xq;
}

// The columns of every panel into y [M, ldy] by gemm (unit_cols output columns a panel: quant::kCols, or
// half that for the SwiGLU epilogue's activations): the reference single threaded, else over the pool;
// a decode-sized x (M <= kStealableRows) as a stealable job, which carries the rows' view by value
// (quant::QuantRowsView), so a worker whose claim was stolen runs on with this job's shape.
void run_gemm(const ExecContext& ctx, QuantGemmFn gemm, Isa isa, const quant::QuantizedRows& xq,
              const PackedWeight& w, float* y, int64_t ldy, int64_t unit_cols) {
    const quant::QuantRowsView x = xq.view();
    if (isa == Isa::REF) {
        gemm(x, w, y, ldy, 0, w.n_panels);
        return;
    }
    const int64_t min_chunk = min_stream_panels(w.panel_bytes(), x.M);
    if (x.M <= kStealableRows) {
        const PackedWeight* wp = &w;
        ctx.pool().parallel_for_stealable(
            w.n_panels, min_chunk, UnitColumns{y, x.M, ldy, unit_cols, ldy},
            [x, wp, ldy, gemm](int64_t p0, int64_t p1, float* dst) { gemm(x, *wp, dst, ldy, p0, p1); });
        return;
    }
    ctx.pool().parallel_for_balanced(w.n_panels, min_chunk,
                                     [&](int, int64_t p0, int64_t p1) { gemm(x, w, y, ldy, p0, p1); });
}

}  // namespace

void linear_quantized(const ExecContext& ctx, const float* x, int64_t M, const PackedWeight& w, float* y,
                      bool round_out, LinearInput* in) {
    const Isa isa = op_isa(OpId::LINEAR);
    const QuantKernelRow& k = quant_kernel(isa, w.format);
    run_gemm(ctx, gemm_for(k, M, false), isa, quantized_rows(ctx, x, M, w.K, isa, k.quantize, in), w, y, w.N,
             quant::kCols);
    if (round_out) ref::round_activations(y, M * w.N, true);
}

QuantGemmFn pooled_quant_kernel(const PackedWeight& w, int64_t M, bool swiglu, QuantizeRowFn* quantize) {
    const Isa isa = op_isa(OpId::LINEAR);
    if (isa == Isa::REF) return nullptr;
    const QuantKernelRow& k = quant_kernel(isa, w.format);
    *quantize = k.quantize;
    if (!swiglu) return gemm_for(k, M, false);
    return op_isa(OpId::SWIGLU) == isa ? gemm_for(k, M, true) : nullptr;
}

bool linear_quantized_swiglu(const ExecContext& ctx, const float* x, int64_t M, const PackedWeight& w,
                             float* out, LinearInput* in) {
    const Isa isa = op_isa(OpId::LINEAR);
    QuantizeRowFn quantize = nullptr;
    const QuantGemmFn epilogue = pooled_quant_kernel(w, M, true, &quantize);
    if (!epilogue) return false;
    run_gemm(ctx, epilogue, isa, quantized_rows(ctx, x, M, w.K, isa, quantize, in), w, out, w.N / 2,
             quant::kCols / 2);
    return true;
}

std::string quant_kernel_report() {
    std::string out;
    for (WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4, WeightFormat::Q4K, WeightFormat::Q6K,
                           WeightFormat::Q6K16, WeightFormat::Q8X}) {
        const QuantKernelRow& k = quant_kernel(op_isa(OpId::LINEAR), f);
        // The AVX-512 VNNI kernels hand batches of amx_min_rows+ rows to AMX-INT8 tiles where the CPU has
        // them.
        const bool tiles = k.tiles_gemm && has_amx_int8();
        const std::string on_tiles =
            tiles ? strprintf("; %lld+ rows on AMX tiles, tdpbssd", (long long)cpu::avx512::amx_min_rows(f))
                  : "";
        out += strprintf("linear %s: %s%s (swiglu: %s; argmax: %s)\n", weight_format_name(f), k.name,
                         on_tiles.c_str(), k.swiglu ? "fused epilogue" : "products then activation",
                         k.fused_argmax ? "fused" : "products then scan");
    }
    return out;
}

}  // namespace gdn
