#include "ops/linear_group.h"

#include <algorithm>

#include "core/log.h"
#include "core/profiler.h"
#include "core/thread_pool.h"
#include "ops/cpu/linear_kernels.h"
#include "ops/dispatch.h"
#include "ops/linear_quant.h"

namespace gdn {

namespace {

// A job run as part of the group: its pooled kernel, where its rows and panels sit in the group's row
// and panel spaces (jobs in order, each range after the previous one's), and where its operand rows are.
struct GroupedJob {
    const LinearJob* job = nullptr;
    QuantGemmFn quant = nullptr;       // quantized weights: the table's panel kernel (else bf16 dot)
    QuantizeRowFn quantize = nullptr;  // and its activation quantizer
    int64_t row0 = 0, panel0 = 0;
    int64_t prep_rows = 0;  // rows pass 1 prepares: M, or 0 for a job reading a shared input in place
    int64_t pairs0 = 0;     // bf16 dot: the job's first word in GroupScratch::pairs ([M, K2])
    const quant::QuantizedRows* src_q = nullptr;  // a shared input's kept forms (LinearJob::in)
    const uint32_t* src_pairs = nullptr;
    const quant::QuantizedRows* xq = nullptr;  // the operand rows pass 2 reads
    const uint32_t* pairs = nullptr;
};

// Grows-only; the calling thread's, shared with the workers for the duration of one call.
struct GroupScratch {
    std::vector<GroupedJob> grouped;
    std::vector<quant::QuantizedRows> xq;  // per grouped job with quantized weights
    std::vector<uint32_t> pairs;           // every bf16-dot job's rows as bf16 pairs
    std::vector<float> gathered;           // a job run alone: its rows gathered
};

const float* job_x(const LinearJob& j) {
    return j.in ? j.in->x() : j.x;
}
const float* input_row(const LinearJob& j, int64_t m) {
    return job_x(j) + (j.rows ? j.rows[m] : m) * j.w->K();
}

// A job through linear() / linear_swiglu() (its rows gathered first where it names them).
void run_alone(const ExecContext& ctx, const LinearJob& j, bool swiglu, bool bf16_act,
               std::vector<float>& gathered) {
    if (j.in && !j.rows) {
        if (swiglu)
            linear_swiglu(ctx, *j.in, *j.w, j.y, bf16_act);
        else
            linear(ctx, *j.in, *j.w, j.y, bf16_act);
        return;
    }
    const float* x = job_x(j);
    if (j.rows) {
        const int64_t K = j.w->K();
        gathered.resize(j.M * K);
        for (int64_t m = 0; m < j.M; ++m) std::copy_n(input_row(j, m), K, gathered.data() + m * K);
        x = gathered.data();
    }
    if (swiglu)
        linear_swiglu(ctx, x, j.M, *j.w, j.y, bf16_act);
    else
        linear(ctx, x, j.M, *j.w, j.y, bf16_act);
}

// Row m of `to` = row r of `from` (the same quantized bytes, scales and group sums).
void copy_quantized_row(const quant::QuantizedRows& from, int64_t r, quant::QuantizedRows& to, int64_t m) {
    std::copy_n(from.xq.data() + r * from.Kp, from.Kp, to.xq.data() + m * to.Kp);
    std::copy_n(from.xs.data() + r * from.G, from.G, to.xs.data() + m * to.G);
    std::copy_n(from.xsum.data() + r * from.G, from.G, to.xsum.data() + m * to.G);
    std::copy_n(from.xsum_lo.data() + r * from.G, from.G, to.xsum_lo.data() + m * to.G);
}

// Index of the grouped job whose range in a space holds item i: the last one starting at or before it.
template <typename Start>
size_t job_holding(const std::vector<GroupedJob>& g, int64_t i, Start start) {
    size_t lo = 0, hi = g.size();
    while (hi - lo > 1) {
        const size_t mid = (lo + hi) / 2;
        (start(g[mid]) <= i ? lo : hi) = mid;
    }
    return lo;
}

}  // namespace

void linear_group(const ExecContext& ctx, const std::vector<LinearJob>& jobs, bool swiglu, bool bf16_act) {
    GDN_PROFILE(ctx, swiglu ? "linear+swiglu (group)" : "linear (group)");
    GroupScratch& s = ctx.pool().scratch().get<GroupScratch>();
    s.grouped.clear();
    int64_t rows = 0, panels = 0, pairs = 0, min_chunk = INT64_MAX, max_k = 1;
    for (const LinearJob& j : jobs) {
        if (j.M <= 0) continue;
        const PackedWeight& p = j.w->packed;
        GroupedJob g;
        g.job = &j;
        if (is_quantized(p.format)) g.quant = pooled_quant_kernel(p, j.M, swiglu, &g.quantize);
        if (!g.quant && (is_quantized(p.format) || !uses_bf16_dot(p, swiglu, bf16_act))) {
            run_alone(ctx, j, swiglu, bf16_act, s.gathered);
            continue;
        }
        if (j.in) {  // the shared input's form, made once for every job that reads it
            j.in->check_fits(p.K, "linear_group");
            if (g.quant)
                g.src_q = &j.in->quantized(ctx, g.quantize, op_isa(OpId::LINEAR));
            else
                g.src_pairs = j.in->bf16_pairs(ctx);
        }
        g.prep_rows = j.in && !j.rows ? 0 : j.M;
        g.row0 = rows;
        g.panel0 = panels;
        g.pairs0 = pairs;
        rows += g.prep_rows;
        panels += p.n_panels;
        if (!g.quant) pairs += g.prep_rows * p.K2;
        min_chunk = std::min(min_chunk, min_stream_panels(p.panel_bytes(), j.M));
        max_k = std::max(max_k, p.K);
        s.grouped.push_back(g);
    }
    if (s.grouped.empty()) return;
    if (s.xq.size() < s.grouped.size()) s.xq.resize(s.grouped.size());
    if (s.pairs.size() < static_cast<size_t>(pairs)) s.pairs.resize(pairs);
    for (size_t i = 0; i < s.grouped.size(); ++i) {
        GroupedJob& g = s.grouped[i];
        const bool own = g.prep_rows > 0;
        if (g.quant && own) s.xq[i].resize(g.job->M, g.job->w->K(), &ctx.pool());
        if (g.quant)
            g.xq = own ? &s.xq[i] : g.src_q;
        else
            g.pairs = own ? s.pairs.data() + g.pairs0 : g.src_pairs;
    }
    ThreadPool& pool = ctx.pool();
    // Pass 1: every row's activations in its job's operand form (int8 groups, or bf16 pairs), made here
    // or copied from a shared input's.
    if (rows > 0) {
        GDN_PROFILE(ctx, "group activations");
        pool.parallel_for(
            rows,
            [&](int64_t r0, int64_t r1) {
                size_t gi = job_holding(s.grouped, r0, [](const GroupedJob& g) { return g.row0; });
                for (int64_t r = r0; r < r1; ++r) {
                    while (r >= s.grouped[gi].row0 + s.grouped[gi].prep_rows) ++gi;
                    const GroupedJob& g = s.grouped[gi];
                    const LinearJob& j = *g.job;
                    const int64_t m = r - g.row0;
                    const int64_t K2 = j.w->packed.K2;
                    if (g.quant) {
                        if (g.src_q)
                            copy_quantized_row(*g.src_q, j.rows[m], s.xq[gi], m);
                        else
                            g.quantize(input_row(j, m), &s.xq[gi], m);
                    } else if (g.src_pairs) {
                        std::copy_n(g.src_pairs + j.rows[m] * K2, K2, s.pairs.data() + g.pairs0 + m * K2);
                    } else {
                        cpu::avx512::pack_bf16_pairs(input_row(j, m), 1, j.w->K(),
                                                     s.pairs.data() + g.pairs0 + m * K2, K2);
                    }
                }
            },
            row_grain(2 * max_k));
    }
    // Pass 2: every job's panels, one balanced pass over all of them.
    const cpu::Bf16LinearKernels& bf16 = bf16_linear_kernels();
    pool.parallel_for_balanced(panels, min_chunk, [&](int, int64_t p0, int64_t p1) {
        size_t gi = job_holding(s.grouped, p0, [](const GroupedJob& g) { return g.panel0; });
        while (p0 < p1) {
            const GroupedJob& g = s.grouped[gi++];
            const LinearJob& j = *g.job;
            const PackedWeight& w = j.w->packed;
            const int64_t a = p0 - g.panel0, b = std::min(p1 - g.panel0, w.n_panels);
            const int64_t ldy = swiglu ? w.N / 2 : w.N;
            if (g.quant)
                g.quant(g.xq->view(), w, j.y, ldy, a, b);
            else if (swiglu)
                bf16.swiglu(g.pairs, j.M, w.K2, w, j.y, ldy, a, b);
            else
                bf16.linear(g.pairs, j.M, w.K2, w, j.y, ldy, a, b, false);
            p0 = g.panel0 + b;
        }
    });
}

}  // namespace gdn
