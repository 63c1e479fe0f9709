#include "ops/linear.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/log.h"
#include "core/profiler.h"
#include "core/thread_pool.h"
#include "ops/argmax_screen.h"
#include "ops/cpu/linear_kernels.h"
#include "ops/cpu/row_slabs.h"
#include "ops/dispatch.h"
#include "ops/layers.h"
#include "ops/linear_input.h"
#include "ops/linear_quant.h"
#include "ops/quant/ggml_repack.h"
#include "ops/ref/ref_ops.h"

namespace gdn {

LinearWeight make_linear(const ExecContext& ctx, const std::vector<TensorView>& parts,
                         std::optional<WeightFormat> quantize,
                         const std::function<void(int64_t n0, int64_t n1)>& rows_done) {
    GDN_CHECK(!parts.empty());
    LinearWeight lw;
    PackedWeight& p = lw.packed;
    p.K = parts[0].shape[1];
    bool all_bf16 = true, any_ggml = false, one_ggml_type = true;
    for (const auto& t : parts) {
        GDN_CHECK(t.rank == 2 && t.shape[1] == p.K && (t.stride[1] == 1 || t.dtype == DType::GGML),
                  "linear parts must be [N_i, K] with one K");
        p.N += t.shape[0];
        all_bf16 &= t.dtype == DType::BF16;
        any_ggml |= t.dtype == DType::GGML;
        one_ggml_type &= t.dtype == DType::GGML && t.ggml_type == parts[0].ggml_type;
    }
    // Row r of the stacked matrix: (part, row in the part).
    std::vector<std::pair<const TensorView*, int64_t>> rows;
    rows.reserve(p.N);
    for (const auto& t : parts)
        for (int64_t r = 0; r < t.shape[0]; ++r) rows.emplace_back(&t, r);
    const int64_t K = p.K;
    if (any_ggml && !quantize) {
        // A GGUF file's blocks, moved without changing a value (ops/quant/ggml_repack.h): into the type's
        // own format, or int8-x for the rest and for fused groups of mixed types; widened to f32 below only
        // beside float parts. GDN_GGUF_WIDEN=1 widens every type (an A/B against the exact f32 products).
        static const bool widen_all = std::getenv("GDN_GGUF_WIDEN") && *std::getenv("GDN_GGUF_WIDEN") == '1';
        bool all_ggml = !widen_all;
        for (const auto& t : parts)
            all_ggml =
                all_ggml && t.dtype == DType::GGML && ggml_moves_to_q8x(static_cast<GgmlType>(t.ggml_type));
        std::optional<WeightFormat> target;
        if (all_ggml) {
            bool own = one_ggml_type;
            for (const auto& t : parts) own = own && ggml_rows_movable(t);
            target = own ? ggml_native_format(static_cast<GgmlType>(parts[0].ggml_type)) : WeightFormat::Q8X;
        }
        if (target) {
            const WeightFormat f = *target;
            quant::pack_column_blocks(
                ctx, f, p.N, K,
                [&](int64_t n, int64_t b, quant::ColumnBlock* out) {
                    const TensorView& t = *rows[n].first;
                    ggml_column_block(static_cast<GgmlType>(t.ggml_type),
                                      static_cast<const uint8_t*>(t.row(rows[n].second)), b, f, out);
                },
                &p, rows_done);
            return lw;
        }
    }
    if (quantize) {  // converted to f32 as stored, straight from the parts (a checkpoint mmap)
        quant::pack_quantized(
            ctx, *quantize, p.N, K,
            [&](int64_t n, float* out) { row_to_f32(*rows[n].first, rows[n].second, out); }, &p, rows_done);
        return lw;
    }
    if (parts.size() == 1 && !any_ggml) lw.view = parts[0];  // the reference path reads float views
    p.format = all_bf16 ? WeightFormat::BF16 : WeightFormat::F32;
    p.K2 = (p.K + 1) / 2;
    p.n_panels = (p.N + kPanelCols - 1) / kPanelCols;
    p.data.allocate(p.bytes(), true);
    if (p.format == WeightFormat::BF16) {
        uint16_t* dst = p.data.as<uint16_t>();
        for (int64_t n = 0; n < p.N; ++n) {
            const uint16_t* src = static_cast<const uint16_t*>(rows[n].first->row(rows[n].second));
            const int64_t panel = n / kPanelCols, col = n % kPanelCols;
            uint16_t* pd = dst + panel * p.K2 * 2 * kPanelCols + col * 2;
            for (int64_t k = 0; k < p.K; ++k) pd[(k / 2) * 2 * kPanelCols + (k & 1)] = src[k];
        }
    } else {
        float* dst = p.data.as<float>();
        std::vector<float> row(p.K);
        for (int64_t n = 0; n < p.N; ++n) {
            row_to_f32(*rows[n].first, rows[n].second, row.data());
            const int64_t panel = n / kPanelCols, col = n % kPanelCols;
            float* pd = dst + panel * p.K * kPanelCols + col;
            for (int64_t k = 0; k < p.K; ++k) pd[k * kPanelCols] = row[k];
        }
    }
    return lw;
}

void unpack_row(const PackedWeight& p, int64_t n, float* out) {
    const int64_t panel = n / kPanelCols, col = n % kPanelCols;
    if (is_quantized(p.format)) {
        quant::dequantize_row(p, n, out);
    } else if (p.format == WeightFormat::BF16) {
        const uint16_t* src = p.bf16_panel(panel) + col * 2;  // k-pair kk of the column at kk * 64 + col * 2
        for (int64_t k = 0; k < p.K; ++k) out[k] = bf16_to_f32(src[(k / 2) * 2 * kPanelCols + (k & 1)]);
    } else {
        const float* src = p.f32_panel(panel) + col;
        for (int64_t k = 0; k < p.K; ++k) out[k] = src[k * kPanelCols];
    }
}

namespace {

// Reference path over the packed weight's source: unpack rows (slow, for A/B runs only).
void linear_ref(const ExecContext& ctx, const float* x, int64_t M, const LinearWeight& w, float* y) {
    if (w.view.data) {
        ref::linear(ctx, x, M, w.view, y);
        return;
    }
    // Fused weights keep only the packed form: rebuild a plain [N, K] f32 copy once per call.
    const PackedWeight& p = w.packed;
    std::vector<float> plain(p.N * p.K);
    for (int64_t n = 0; n < p.N; ++n) unpack_row(p, n, &plain[n * p.K]);
    ref::linear(ctx, x, M, TensorView::contiguous(plain.data(), DType::F32, {p.N, p.K}), y);
}

// The calling thread's grow-only buffers (its pool's ThreadScratch: no allocation once warm).
struct LinearBuffers {
    std::vector<uint32_t> pairs;   // x as bf16 pairs
    std::vector<float> f32;        // x rounded to bf16 values; linear_argmax's per-thread maxima
    std::vector<float> products;   // the [M, N] products of a linear() called inside another op
    std::vector<int64_t> columns;  // linear_argmax's per-thread columns
};
LinearBuffers& buffers(const ExecContext& ctx) {
    return ctx.pool().scratch().get<LinearBuffers>();
}

// Converted activations: bf16 pairs (uint32_t) or f32 values.
template <typename T>
T* scratch(const ExecContext& ctx, size_t n) {
    LinearBuffers& b = buffers(ctx);
    if constexpr (std::is_same_v<T, uint32_t>) {
        grow_read_buffer(ctx.pool(), b.pairs, n);
        return b.pairs.data();
    } else {
        static_assert(std::is_same_v<T, float>);
        grow_read_buffer(ctx.pool(), b.f32, n);
        return b.f32.data();
    }
}

// The [M, N] products of a linear() called inside another op (linear_swiglu, linear_argmax off their
// fused kernels). Not scratch<float>(ctx, ): linear() uses that for its own input.
float* products_scratch(const ExecContext& ctx, size_t n) {
    std::vector<float>& buf = buffers(ctx).products;
    grow_read_buffer(ctx.pool(), buf, n);
    return buf.data();
}

int64_t min_panels(const PackedWeight& p, int64_t M) {
    return min_stream_panels(p.panel_bytes(), M);
}

// v rounded to bf16 in place by the linear op's kernel for isa (linear_argmax's screen must multiply the
// very x linear() does).
void round_bf16_with(Isa isa, float* v, int64_t n) {
    if (isa == Isa::AVX512)
        cpu::avx512::round_bf16_inplace(v, n);
    else if (isa == Isa::AVX2)
        cpu::avx2::round_bf16_inplace(v, n);
    else
        for (int64_t i = 0; i < n; ++i) v[i] = round_bf16(v[i]);
}

// x [M, K], already bf16 values, as bf16 pairs [M, K2] (the top half of each f32: exact; odd K padded 0).
void pack_rounded_bf16_pairs(const float* x, int64_t M, int64_t K, uint32_t* xp, int64_t K2) {
    for (int64_t m = 0; m < M; ++m) {
        std::fill(xp + m * K2, xp + (m + 1) * K2, 0u);
        for (int64_t k = 0; k < K; ++k) {
            uint32_t bits;
            std::memcpy(&bits, x + m * K + k, 4);
            xp[m * K2 + k / 2] |= (bits >> 16) << (16 * (k & 1));
        }
    }
}

// The vdpbf16ps SwiGLU epilogue needs the whole K in one k block; the AMX one takes any K.
bool swiglu_epilogue_fits(const PackedWeight& p) {
    return p.K2 <= 2048 || bf16_linear_kernels().swiglu_any_k;
}

}  // namespace

void pack_bf16_pairs_pooled(const ExecContext& ctx, const float* x, int64_t M, int64_t K, uint32_t* xp,
                            int64_t K2) {
    ctx.pool().parallel_for(
        M,
        [&](int64_t m0, int64_t m1) {
            cpu::avx512::pack_bf16_pairs(x + m0 * K, m1 - m0, K, xp + m0 * K2, K2);
        },
        row_grain(K));  // a copy-like pass: a decode batch of up to 8 rows of 1024 stays on the caller
}

bool uses_bf16_dot(const PackedWeight& p, bool swiglu, bool bf16_act) {
    const bool dot = op_isa(OpId::LINEAR) == Isa::AVX512 && bf16_act && p.format == WeightFormat::BF16 &&
                     p.data.data() && has_bf16_dot();
    if (!swiglu) return dot;
    return dot && op_isa(OpId::SWIGLU) == Isa::AVX512 && swiglu_epilogue_fits(p);
}

namespace {

// x [M, K] as bf16 pairs: the shared input's kept form, or packed into the thread's scratch.
const uint32_t* bf16_pairs_of(const ExecContext& ctx, const float* x, int64_t M, int64_t K, int64_t K2,
                              LinearInput* in) {
    if (in) return in->bf16_pairs(ctx);
    uint32_t* xp = scratch<uint32_t>(ctx, M * K2);
    pack_bf16_pairs_pooled(ctx, x, M, K, xp, K2);
    return xp;
}

// The bf16 products of a decode-sized x (M <= kStealableRows rows as bf16 pairs [M, K2]) into y [M, ldy],
// over the pool as a stealable job: unit = panel, unit_cols output columns each (32, or 16 for the fused
// SwiGLU's activations). kernel: linear_bf16dot's or linear_bf16dot_swiglu's signature.
template <class Kernel>
void stealable_bf16_products(const ExecContext& ctx, const uint32_t* xp, int64_t M, const PackedWeight& p,
                             float* y, int64_t ldy, int64_t unit_cols, Kernel kernel) {
    const PackedWeight* w = &p;
    ctx.pool().parallel_for_stealable(p.n_panels, min_panels(p, M), UnitColumns{y, M, ldy, unit_cols, ldy},
                                      [xp, M, w, ldy, kernel](int64_t p0, int64_t p1, float* dst) {
                                          kernel(xp, M, w->K2, *w, dst, ldy, p0, p1);
                                      });
}

// fn(m0, rows, p0, p1): the bf16 products of rows [m0, m0 + rows) and panels [p0, p1) of p. The rows go
// in chunks (ops/cpu/row_slabs.h: chunk_rows; one for a decode batch or a short prompt), each its own
// pass of panel claims over the pool.
template <class Fn>
void bf16_products_over_pool(const ExecContext& ctx, const PackedWeight& p, int64_t M, Fn&& fn) {
    const int64_t chunk = cpu::chunk_rows(M, p.K2 * 4);
    for (int64_t m0 = 0; m0 < M; m0 += chunk) {
        const int64_t rows = std::min(chunk, M - m0);
        ctx.pool().parallel_for_balanced(p.n_panels, min_panels(p, rows),
                                         [&](int, int64_t p0, int64_t p1) { fn(m0, rows, p0, p1); });
    }
}

// linear() and linear_swiglu(); in: x as a shared input whose kept operand forms are read
// (ops/linear_input.h).
void linear_from(const ExecContext& ctx, const float* x, int64_t M, const LinearWeight& w, float* y,
                 bool bf16_act, bool round_out, LinearInput* in) {
    GDN_PROFILE(ctx, M == 1 ? "linear (gemv)" : "linear");
    const PackedWeight& p = w.packed;
    const int64_t N = w.N(), K = w.K();
    if (M <= 0) return;
    if (is_quantized(p.format)) {  // activations become int8 whatever bf16_act says (ops/linear_quant.h)
        linear_quantized(ctx, x, M, p, y, round_out, in);
        return;
    }
    const Isa isa = op_isa(OpId::LINEAR);
    if (uses_bf16_dot(p, false, bf16_act)) {
        // x as bf16 pairs, one 32-bit lane per k-pair; vdpbf16ps products are exact, sums in f32.
        const uint32_t* xp = bf16_pairs_of(ctx, x, M, K, p.K2, in);
        const auto linear_kernel = bf16_linear_kernels().linear;
        if (M <= kStealableRows) {
            auto kernel = [round_out, linear_kernel](const uint32_t* a, int64_t m, int64_t ldp,
                                                     const PackedWeight& w, float* d, int64_t ld, int64_t p0,
                                                     int64_t p1) {
                linear_kernel(a, m, ldp, w, d, ld, p0, p1, round_out);
            };
            stealable_bf16_products(ctx, xp, M, p, y, N, kPanelCols, kernel);
            return;
        }
        bf16_products_over_pool(ctx, p, M, [&](int64_t m0, int64_t rows, int64_t p0, int64_t p1) {
            linear_kernel(xp + m0 * p.K2, rows, p.K2, p, y + m0 * N, N, p0, p1, round_out);
        });
        return;
    }
    const float* xin = x;
    if (bf16_act) {
        float* xr = scratch<float>(ctx, M * K);
        std::memcpy(xr, x, M * K * sizeof(float));
        round_bf16_with(isa, xr, M * K);
        xin = xr;
    }
    if (isa == Isa::REF || !p.data.data()) {
        if (isa != Isa::REF)
            count_fallback(OpId::LINEAR, "runs on the reference kernel: the weight was not packed");
        linear_ref(ctx, xin, M, w, y);
        if (round_out) round_bf16_with(isa, y, M * N);
        return;
    }
    ctx.pool().parallel_for_balanced(p.n_panels, min_panels(p, M), [&](int, int64_t p0, int64_t p1) {
        if (isa == Isa::AVX512)
            cpu::avx512::linear_f32(xin, M, K, p, y, N, p0, p1, round_out);
        else
            cpu::avx2::linear_f32(xin, M, K, p, y, N, p0, p1, round_out);
    });
}

void linear_swiglu_from(const ExecContext& ctx, const float* x, int64_t M, const LinearWeight& w, float* out,
                        bool bf16_act, LinearInput* in) {
    GDN_PROFILE(ctx, "linear+swiglu");
    const PackedWeight& p = w.packed;
    const int64_t N = w.N(), K = w.K(), I = N / 2;
    if (M <= 0) return;
    if (uses_bf16_dot(p, false, bf16_act) && op_isa(OpId::SWIGLU) == Isa::AVX512 && !swiglu_epilogue_fits(p))
        count_fallback(OpId::SWIGLU,
                       "is not fused into the gate|up GEMM: K > 4096 needs more than one k block");
    if (uses_bf16_dot(p, true, bf16_act)) {
        const uint32_t* xp = bf16_pairs_of(ctx, x, M, K, p.K2, in);
        const auto swiglu_kernel = bf16_linear_kernels().swiglu;
        if (M <= kStealableRows) {  // 16 activations per panel of 16 gate | 16 up columns
            stealable_bf16_products(ctx, xp, M, p, out, I, kPanelCols / 2, swiglu_kernel);
            return;
        }
        bf16_products_over_pool(ctx, p, M, [&](int64_t m0, int64_t rows, int64_t p0, int64_t p1) {
            swiglu_kernel(xp + m0 * p.K2, rows, p.K2, p, out + m0 * I, I, p0, p1);
        });
        return;
    }
    // Quantized weights: the table's SwiGLU epilogue where the row has one (silu(gate) x up of the
    // unrounded products, as the bf16 epilogue above).
    if (is_quantized(p.format) && linear_quantized_swiglu(ctx, x, M, p, out, in)) return;
    float* products = products_scratch(ctx, M * N);  // [M, 2I] in the interleaved column order
    linear_from(ctx, x, M, w, products, bf16_act, false, in);
    // Each 32 columns are [gate 16 | up 16]: as rows of a [M * I / 16, 2 * 16] gate|up matrix, they give
    // out [M * I / 16, 16] = [M, I] through the plain SwiGLU op (vectorised on every ISA).
    ops::swiglu(ctx, products, M * (I / 16), 16, out, false);
}

}  // namespace

void linear(const ExecContext& ctx, const float* x, int64_t M, const LinearWeight& w, float* y, bool bf16_act,
            bool round_out) {
    linear_from(ctx, x, M, w, y, bf16_act, round_out, nullptr);
}

void linear(const ExecContext& ctx, LinearInput& in, const LinearWeight& w, float* y, bool bf16_act,
            bool round_out) {
    in.check_fits(w.K(), "linear");
    linear_from(ctx, in.x(), in.M(), w, y, bf16_act, round_out, &in);
}

void linear_swiglu(const ExecContext& ctx, const float* x, int64_t M, const LinearWeight& w, float* out,
                   bool bf16_act) {
    linear_swiglu_from(ctx, x, M, w, out, bf16_act, nullptr);
}

void linear_swiglu(const ExecContext& ctx, LinearInput& in, const LinearWeight& w, float* out,
                   bool bf16_act) {
    in.check_fits(w.K(), "linear");
    linear_swiglu_from(ctx, in.x(), in.M(), w, out, bf16_act, &in);
}

LinearWeight make_swiglu_linear(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                                std::optional<WeightFormat> quantize) {
    const int64_t I = gate.shape[0];
    GDN_CHECK(I % 16 == 0 && up.shape[0] == I, "fused SwiGLU needs I %% 16 == 0");
    auto rows = [](const TensorView& t, int64_t r0, int64_t n) {
        TensorView v = t;
        v.shape[0] = n;
        v.data = static_cast<char*>(t.data) + r0 * t.stride[0] * static_cast<int64_t>(dtype_size(t.dtype));
        return v;
    };
    std::vector<TensorView> parts;
    for (int64_t r = 0; r < I; r += 16) {
        parts.push_back(rows(gate, r, 16));
        parts.push_back(rows(up, r, 16));
    }
    LinearWeight lw = make_linear(ctx, parts, quantize);
    lw.view = TensorView();  // only the packed (interleaved) form exists
    return lw;
}

void linear_argmax(const ExecContext& ctx, const float* x, int64_t M, const LinearWeight& w, int32_t* ids,
                   bool bf16_act) {
    GDN_PROFILE(ctx, "lm_head argmax");
    const PackedWeight& p = w.packed;
    const int64_t N = w.N(), K = w.K();
    if (M <= 0) return;
    const bool bf16_weight = bf16_act && p.format == WeightFormat::BF16 && p.data.data();
    const bool dot = op_isa(OpId::LINEAR) == Isa::AVX512 && bf16_weight && has_bf16_dot();
    if (!dot) {
        // The f32-FMA kernels: M <= kScreenMaxRows rows try the int8 screen on the x that linear()
        // multiplies (rounded by the same code, then packed as bf16 pairs: exact); otherwise, and when the
        // screen declines, the products are materialised and each row's argmax taken.
        if (bf16_weight && w.screen && M <= kScreenMaxRows && argmax_screen_available()) {
            float* xr = products_scratch(ctx, M * K);
            std::memcpy(xr, x, M * K * sizeof(float));
            round_bf16_with(op_isa(OpId::LINEAR), xr, M * K);
            uint32_t* xp = scratch<uint32_t>(ctx, M * p.K2);
            pack_rounded_bf16_pairs(xr, M, K, xp, p.K2);
            if (screened_argmax(ctx, xp, M, w, ids)) return;
        }
        float* y = products_scratch(ctx, M * N);
        linear(ctx, x, M, w, y, bf16_act);
        for (int64_t m = 0; m < M; ++m) ids[m] = static_cast<int32_t>(ops::argmax(ctx, y + m * N, N));
        return;
    }
    uint32_t* xp = scratch<uint32_t>(ctx, M * p.K2);
    pack_bf16_pairs_pooled(ctx, x, M, K, xp, p.K2);
    if (screened_argmax(ctx, xp, M, w, ids)) return;  // M <= kScreenMaxRows rows: the int8 screen
    ThreadPool& pool = ctx.pool();
    const int nth = pool.size();
    // Rows [0, nth M): each thread's best (value, column) so far; [nth M, 2 nth M): its current chunk's.
    // Chunks reach threads in no fixed order, so ties go to the lowest column explicitly (the reference's
    // first maximum) and the ids do not depend on timing.
    float* vals = scratch<float>(ctx, static_cast<size_t>(2 * nth) * M);
    std::vector<int64_t>& idx_buf = buffers(ctx).columns;
    if (idx_buf.size() < static_cast<size_t>(2 * nth) * M) idx_buf.resize(static_cast<size_t>(2 * nth) * M);
    int64_t* idx = idx_buf.data();
    for (int64_t i = 0; i < nth * M; ++i) idx[i] = -1;
    const auto argmax_kernel = bf16_linear_kernels().argmax;
    pool.parallel_for_balanced(p.n_panels, min_panels(p, M), [&](int ith, int64_t p0, int64_t p1) {
        float* cv = vals + (nth + ith) * M;
        int64_t* ci = idx + (nth + ith) * M;
        argmax_kernel(xp, M, p.K2, p, p0, p1, cv, ci);
        for (int64_t m = 0; m < M; ++m)
            if (argmax_better(cv[m], ci[m], vals[ith * M + m], idx[ith * M + m])) {
                vals[ith * M + m] = cv[m];
                idx[ith * M + m] = ci[m];
            }
    });
    for (int64_t m = 0; m < M; ++m) {
        float bv = 0.0f;
        int64_t bi = -1;
        for (int t = 0; t < nth; ++t)
            if (argmax_better(vals[t * M + m], idx[t * M + m], bv, bi)) {
                bv = vals[t * M + m];
                bi = idx[t * M + m];
            }
        ids[m] = static_cast<int32_t>(bi);
    }
}

}  // namespace gdn
