#include "ops/argmax_screen.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/profiler.h"
#include "core/thread_pool.h"
#include "ops/cpu/linear_kernels.h"
#include "ops/dispatch.h"
#include "ops/linear.h"

namespace gdn {

namespace {

constexpr double kUnit = 0x1p-24;  // f32 unit roundoff

// |value| of a bound term computed in double (sums of squares, sqrt) and stored in f32, rounded up by
// more than those roundings can take away, so the bound stays a bound.
double round_up_factor(int64_t K) {
    return 1.0 + 1e-9 * K + 8 * kUnit;
}

// round(v / scale) in [-127, 127]; 0 for a zero scale (an all-zero row).
// Non-finite weights (a corrupt checkpoint) quantise to 0: the screen is then refused for the weight
// anyway, and a NaN must never reach the float -> int conversion (undefined behaviour).
int quantize_i8(float v, float scale) {
    const float q = scale > 0.0f ? std::nearbyint(v / scale) : 0.0f;
    return std::isfinite(q) ? static_cast<int>(std::clamp(q, -127.0f, 127.0f)) : 0;
}

}  // namespace

std::shared_ptr<const Int8Screen> make_int8_screen(const ExecContext& ctx, const PackedWeight& w) {
    GDN_CHECK(w.format == WeightFormat::BF16, "the argmax screen is built from a bf16 packed weight");
    auto s = std::make_shared<Int8Screen>();
    s->N = w.N;
    s->K = w.K;
    s->K4 = (w.K + 3) / 4;
    s->n_panels = w.n_panels;
    s->q.allocate(s->n_panels * s->K4 * 128, true);  // zero padding: k >= K and columns >= N add nothing
    s->meta.allocate(5 * s->cols() * sizeof(float), true);
    float* scale = s->meta.as<float>();
    float* err_norm = scale + s->cols();
    float* wq_norm = err_norm + s->cols();
    float* wmax = wq_norm + s->cols();
    int32_t* qsum = reinterpret_cast<int32_t*>(wmax + s->cols());
    std::atomic<bool> finite{true};
    ctx.pool().parallel_for(s->n_panels, [&](int64_t p0, int64_t p1) {
        std::vector<float> row(w.K);
        for (int64_t n = p0 * kPanelCols; n < std::min(w.N, p1 * kPanelCols); ++n) {
            unpack_row(w, n, row.data());
            float amax = 0.0f;
            bool row_finite = true;
            for (float v : row) {
                amax = std::max(amax, std::abs(v));
                row_finite &= std::isfinite(v);
            }
            if (!row_finite) finite = false;
            const float sc = amax / 127.0f;
            double e2 = 0.0, w2 = 0.0;
            int32_t sum = 0;
            int8_t* col = s->q.as<int8_t>() + (n / kPanelCols) * s->K4 * 128 + (n % kPanelCols) * 4;
            for (int64_t k = 0; k < w.K; ++k) {
                const int q = quantize_i8(row[k], sc);
                col[(k / 4) * 128 + (k % 4)] = static_cast<int8_t>(q);
                sum += q;
                // Exact in double: an f32 times a small integer, and a bf16 value minus it.
                const double W = static_cast<double>(sc) * q, e = static_cast<double>(row[k]) - W;
                e2 += e * e;
                w2 += W * W;
            }
            scale[n] = sc;
            err_norm[n] = static_cast<float>(std::sqrt(e2) * round_up_factor(w.K));
            wq_norm[n] = static_cast<float>(std::sqrt(w2) * round_up_factor(w.K));
            wmax[n] = amax;
            qsum[n] = sum;
        }
    });
    if (!finite) return nullptr;  // the exact pass's NaN / inf outputs have no bound
    return s;
}

namespace {
// Which kernels the screen and its exact pass run on: the full pass's own (linear_argmax).
//   VNNI: vpdpbusd screen; exact pass = linear_bf16dot_argmax (the bf16 dot full pass).
//   AVX2: vpmaddubsw screen (any AVX2 CPU); exact pass = the f32-FMA linear kernel of the linear op's ISA
//         on the bf16-rounded x, as linear() computes the full pass there.
enum class ScreenPath { NONE, VNNI, AVX2 };
ScreenPath screen_path() {
    const Isa lin = op_isa(OpId::LINEAR), am = op_isa(OpId::ARGMAX);
    if (lin == Isa::REF || am == Isa::REF) return ScreenPath::NONE;
    if (lin == Isa::AVX512 && am == Isa::AVX512 && has_bf16_dot() && has_int8_dot()) return ScreenPath::VNNI;
    if (lin == Isa::AVX512 && has_bf16_dot())
        return ScreenPath::NONE;  // bf16 dot without VNNI: no CPU has it
    return ScreenPath::AVX2;
}
}  // namespace

bool argmax_screen_available() {
    return screen_path() != ScreenPath::NONE;
}

const char* argmax_screen_kernel() {
    switch (screen_path()) {
        case ScreenPath::VNNI:
            return has_amx_int8()
                       ? "int8 screen (vpdpbusd; 4+ rows on AMX tiles, tdpbusd), candidates rechecked in bf16"
                       : "int8 screen (vpdpbusd), candidates rechecked in bf16";
        case ScreenPath::AVX2:
            return "int8 screen (vpmaddubsw), candidates rechecked by the f32 linear kernel";
        case ScreenPath::NONE:
            break;
    }
    return nullptr;
}

bool argmax_screen_supported_by_cpu() {
    return cpu_isa() != Isa::REF;
}

namespace {
// Value k of a row of bf16 pairs (one 32-bit lane per k-pair, the low half first).
float bf16_pair_value(const uint32_t* xp, int64_t k) {
    return bf16_to_f32(static_cast<uint16_t>(xp[k / 2] >> (16 * (k & 1))));
}

// x (bf16 pairs [K2]) as the screen reads it: xq (k-quads of xq_k + 128, padding xq = 0) and the bound's
// per-row terms, accumulated in double. False for a non-finite row.
bool screen_row(const uint32_t* xp, int64_t K, int64_t K4, uint32_t* xq, ScreenRow* out,
                std::vector<float>& xf) {
    xf.resize(K);
    float amax = 0.0f;  // a max of |bf16 values|: exact in f32
    double xabs = 0.0;
    for (int64_t k = 0; k < K; ++k) {
        xf[k] = bf16_pair_value(xp, k);
        amax = std::max(amax, std::abs(xf[k]));
        xabs += std::abs(xf[k]);
    }
    if (!std::isfinite(xabs)) return false;
    const float sx = static_cast<float>(static_cast<double>(amax) / 127.0);
    // Any q in [-127, 127] keeps the screen a bound: its terms below are computed from the q taken.
    // A subnormal sx has no finite reciprocal: those rows divide.
    const float inv = sx > 0.0f ? 1.0f / sx : 0.0f;
    const bool by_inv = std::isfinite(inv);
    auto* bytes = reinterpret_cast<uint8_t*>(xq);  // k-quads, byte k % 4 of word k / 4 (little endian)
    std::fill(bytes + K, bytes + 4 * K4, uint8_t{0x80});
    double x2 = 0.0, ex2 = 0.0;
    for (int64_t k = 0; k < K; ++k) {
        const int q = by_inv ? static_cast<int>(std::clamp(std::nearbyint(xf[k] * inv), -127.0f, 127.0f))
                             : quantize_i8(xf[k], sx);
        const double X = static_cast<double>(sx) * q, e = static_cast<double>(xf[k]) - X;
        x2 += X * X;
        ex2 += e * e;
        bytes[k] = static_cast<uint8_t>(q + 128);
    }
    // K + 2 roundings bound the exact kernel's chain (two adds per k-pair, an odd K padded to a pair).
    const double gamma = (K + 2) * kUnit / (1.0 - (K + 2) * kUnit);
    const double up = round_up_factor(K);
    const double xn = std::sqrt(x2), exn = std::sqrt(ex2);
    *out = ScreenRow{sx, static_cast<float>((xn + exn) * up), static_cast<float>(exn * up),
                     static_cast<float>((gamma * xabs + K * 0x1p-126) * up),
                     static_cast<float>((xabs + K) * 0x1p-126 * up + 1e-30)};
    return true;
}
}  // namespace

namespace {
// The dispatching thread's buffers of a screened argmax (grow-only: no allocation once warm).
struct ScreenBuffers {
    std::vector<float> row;  // screen_row's x values
    // The rows' quantized k-quads and constants, read by the screen job: buffers that outlive it (a
    // claim stolen from a descheduled worker may still be read by that worker after the job returns).
    std::vector<uint32_t> xq;
    ScreenRow r[cpu::kScreenRows];
    std::vector<float> bounds;                  // [2 rows, n_panels]
    std::vector<std::pair<int, int64_t>> work;  // (row, panel) of the exact pass
    std::vector<float> best_v;                  // [threads, rows]
    std::vector<int64_t> best_ix;               // [threads, rows]
    std::vector<float> xf;                      // the rows' bf16 values (AVX2 path)
    std::vector<float> y;                       // the candidate panels' outputs (AVX2 path)
    std::vector<int32_t> chunk_ids;             // screened_argmax's ids before they are all known
};

// Candidate panels of one row beyond which the screen gives up and the full pass runs: near-flat outputs
// (e.g. a zero row: every column ties), where rechecking panel by panel approaches a full pass per row.
// A row may take 1 / kScreenMaxRows of the panels (kScreenMaxRows such rows: one full pass's bytes), and
// 128 panels (4096 columns) whatever the size. The random 0.8B shape's rows have 2-242 (median 59) of
// its 7760 panels.
int64_t max_candidate_panels(const Int8Screen& s) {
    return std::max<int64_t>(128, s.n_panels / kScreenMaxRows);
}

// screened_argmax of M <= kScreenRows rows: one stream of the int8 copy, then their exact pass.
bool screen_chunk(const ExecContext& ctx, const uint32_t* xp, int64_t M, const LinearWeight& w,
                  ScreenPath path, int32_t* ids) {
    const Int8Screen& s = *w.screen;
    const PackedWeight& pw = w.packed;
    const int rows = static_cast<int>(M);
    ScreenBuffers& b = ctx.pool().scratch().get<ScreenBuffers>();
    std::vector<uint32_t>& xq = b.xq;
    ScreenRow* r = b.r;
    grow_read_buffer(ctx.pool(), xq, static_cast<size_t>(rows) * s.K4);
    for (int m = 0; m < rows; ++m)
        if (!screen_row(xp + m * pw.K2, s.K, s.K4, xq.data() + m * s.K4, &r[m], b.row)) return false;

    // Pass 1: the screen of every row in one stream of the int8 copy, balanced over the threads like the
    // bf16 pass it replaces, as a stealable job (ThreadPool::parallel_for_stealable): each panel writes its
    // own column of bounds [2 rows, n_panels]: row m's largest A - B (row 2 m) and A + B (2 m + 1).
    ThreadPool& pool = ctx.pool();
    const int nth = pool.size();
    const int64_t np = s.n_panels;
    std::vector<float>& bounds_buf = b.bounds;
    if (bounds_buf.size() < static_cast<size_t>(2 * rows * np)) bounds_buf.resize(2 * rows * np);
    const float* bounds = bounds_buf.data();
    {
        GDN_PROFILE(ctx, "lm_head screen");
        auto* kernel = path == ScreenPath::AVX2                        ? cpu::avx2::screen_i8
                       : rows >= cpu::kScreenAmxRows && has_amx_int8() ? cpu::avx512::screen_i8_amx
                                                                       : cpu::avx512::screen_i8;
        const uint32_t* xq_p = xq.data();
        const ScreenRow* r_p = r;
        const Int8Screen* sp = &s;
        const UnitColumns out{bounds_buf.data(), 2 * rows, np, 1, np};
        pool.parallel_for_stealable(np, min_stream_panels(s.K4 * 128, rows), out,
                                    [kernel, xq_p, rows, sp, r_p, np](int64_t p0, int64_t p1, float* dst) {
                                        kernel(xq_p, rows, *sp, r_p, p0, p1, dst, np);
                                    });
    }
    GDN_PROFILE(ctx, "lm_head exact");
    // Pass 2: row m's threshold is its largest A - B; the panels whose largest A + B reaches it hold every
    // column that can still be its argmax. They run exactly; every row's panels in one pass over the
    // threads (one dispatch, not one per row). work[j] = (row, panel), in panel order per row.
    std::vector<std::pair<int, int64_t>>& work = b.work;
    work.clear();
    for (int m = 0; m < rows; ++m) {
        const float* lo = bounds + 2 * m * np;
        const float* hi = lo + np;
        float part[8];
        std::fill(part, part + 8, -INFINITY);
        int64_t p = 0;
        for (; p + 8 <= np; p += 8)  // eight independent maxima, not one chain of 7760 dependent ones
            for (int i = 0; i < 8; ++i) part[i] = std::max(part[i], lo[p + i]);
        for (; p < np; ++p) part[0] = std::max(part[0], lo[p]);
        const float thr = *std::max_element(part, part + 8);
        const size_t first = work.size();
        for (p = 0; p < np; ++p)
            if (hi[p] >= thr) work.emplace_back(m, p);
        GDN_CHECK(work.size() > first, "argmax screen: no candidate (bound arithmetic broken)");
        if (static_cast<int64_t>(work.size() - first) > max_candidate_panels(s)) {
            count_fallback(OpId::ARGMAX, "screen overflow (near-flat outputs): the lm_head ran in full bf16");
            return false;
        }
    }
    // Per thread and row: the best (value, column) of its panels; ties to the lowest column, so the id
    // does not depend on which thread took which panel.
    std::vector<float>& best_v_buf = b.best_v;
    std::vector<int64_t>& best_ix_buf = b.best_ix;
    best_v_buf.assign(static_cast<size_t>(nth) * rows, 0.0f);
    best_ix_buf.assign(static_cast<size_t>(nth) * rows, -1);
    float* best_v = best_v_buf.data();
    int64_t* best_ix = best_ix_buf.data();
    const std::pair<int, int64_t>* work_p = work.data();
    // The f32 kernels' input (AVX2 path): the rows' bf16 values (xp holds the rounded x linear() multiplies).
    std::vector<float>& xf_buf = b.xf;
    const float* xf = nullptr;
    if (path == ScreenPath::AVX2) {
        xf_buf.resize(static_cast<size_t>(rows) * pw.K);
        for (int m = 0; m < rows; ++m)
            for (int64_t k = 0; k < pw.K; ++k) xf_buf[m * pw.K + k] = bf16_pair_value(xp + m * pw.K2, k);
        xf = xf_buf.data();
    }
    const bool f32_avx512 = op_isa(OpId::LINEAR) == Isa::AVX512;
    // The exact outputs of the candidate panels (AVX2 path): [rows, n_panels * kPanelCols], each (row,
    // panel) at its own columns, so the threads write disjoint parts. Sized here, on the caller: a buffer
    // a worker grew on its first job would allocate in whichever decode step timing first gave it one
    // (the NoAlloc tests).
    const int64_t ld_y = pw.n_panels * kPanelCols;
    std::vector<float>& y_buf = b.y;
    if (path == ScreenPath::AVX2 && y_buf.size() < static_cast<size_t>(rows * ld_y))
        y_buf.resize(rows * ld_y);
    float* y_rows = y_buf.data();
    const auto exact_argmax = bf16_linear_kernels().argmax;
    pool.parallel_for_balanced(static_cast<int64_t>(work.size()), 1, [&](int ith, int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) {
            const int m = work_p[j].first;
            const int64_t pj = work_p[j].second;
            float v = 0.0f;
            int64_t i = -1;
            if (path == ScreenPath::VNNI) {
                exact_argmax(xp + m * pw.K2, 1, pw.K2, pw, pj, pj + 1, &v, &i);
            } else {
                const float* xm = xf + m * pw.K;
                float* y = y_rows + m * ld_y;
                if (f32_avx512)
                    cpu::avx512::linear_f32(xm, 1, pw.K, pw, y, pw.N, pj, pj + 1, false);
                else
                    cpu::avx2::linear_f32(xm, 1, pw.K, pw, y, pw.N, pj, pj + 1, false);
                for (int64_t n = pj * kPanelCols; n < std::min(pw.N, (pj + 1) * kPanelCols); ++n)
                    if (argmax_better(y[n], n, v, i)) {
                        v = y[n];
                        i = n;
                    }
            }
            float& bv = best_v[ith * rows + m];
            int64_t& bi = best_ix[ith * rows + m];
            if (argmax_better(v, i, bv, bi)) {
                bv = v;
                bi = i;
            }
        }
    });
    for (int m = 0; m < rows; ++m) {
        float bv = 0.0f;
        int64_t best_i = -1;
        for (int t = 0; t < nth; ++t)
            if (argmax_better(best_v[t * rows + m], best_ix[t * rows + m], bv, best_i)) {
                bv = best_v[t * rows + m];
                best_i = best_ix[t * rows + m];
            }
        ids[m] = static_cast<int32_t>(best_i);
    }
    return true;
}
}  // namespace

bool screened_argmax(const ExecContext& ctx, const uint32_t* xp, int64_t M, const LinearWeight& w,
                     int32_t* ids) {
    const ScreenPath path = screen_path();
    if (!w.screen || path == ScreenPath::NONE || M < 1 || M > kScreenMaxRows) return false;
    // Rows kScreenRows at a time, each chunk one stream of the int8 copy; the ids are written only once
    // every chunk ran (false: nothing written).
    std::vector<int32_t>& chunk_ids = ctx.pool().scratch().get<ScreenBuffers>().chunk_ids;
    chunk_ids.resize(M);
    for (int64_t m0 = 0; m0 < M; m0 += cpu::kScreenRows)
        if (!screen_chunk(ctx, xp + m0 * w.packed.K2, std::min<int64_t>(cpu::kScreenRows, M - m0), w, path,
                          chunk_ids.data() + m0))
            return false;
    std::copy(chunk_ids.begin(), chunk_ids.end(), ids);
    return true;
}

}  // namespace gdn
