// Linear kernels of every ISA path against the scalar reference, over odd shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/cpu/row_slabs.h"
#include "ops/dispatch.h"
#include "ops/layers.h"
#include "ops/linear.h"
#include "ops/linear_group.h"
#include "ops/linear_input.h"
#include "ops/ref/ref_ops.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

struct Shape {
    int64_t M, N, K;
};

TEST(OpsLinear, EveryIsaMatchesReference) {
    const Shape shapes[] = {{1, 1, 1},     {1, 16, 64},    {1, 33, 17},  {2, 31, 63},
                            {3, 64, 128},  {5, 100, 37},   {8, 96, 256}, {12, 45, 99},
                            {13, 70, 300}, {29, 130, 515}, {64, 257, 66}};
    for (DType dt : {DType::BF16, DType::F32, DType::F16}) {
        for (const Shape& s : shapes) {
            auto wf = random_vec(s.N * s.K, 11 + s.N, -0.5f, 0.5f);
            std::vector<uint8_t> wb(s.N * s.K * dtype_size(dt));
            convert_from_f32(wf.data(), dt, wb.data(), s.N * s.K);
            TensorView view = TensorView::contiguous(wb.data(), dt, {s.N, s.K});
            LinearWeight lw = make_linear(ctx(), {view});
            auto x = random_vec(s.M * s.K, 7 + s.M);
            for (bool bf16_act : {false, true}) {
                // Reference: rounded input (bf16 mode), plain weight, f32 accumulation.
                std::vector<float> xr = x;
                if (bf16_act)
                    for (auto& v : xr) v = round_bf16(v);
                std::vector<float> want(s.M * s.N);
                ref::linear(ctx(), xr.data(), s.M, view, want.data());
                // (bf16 mode also rounds the outputs: round_out = true below)
                for (const FastPath& path : fast_paths()) {
                    path.use();
                    std::vector<float> got(s.M * s.N, NAN);
                    linear(ctx(), x.data(), s.M, lw, got.data(), bf16_act, bf16_act);
                    // f32: summation order only (K <= 515 terms of O(0.5)); bf16 mode: output rounding to
                    // bf16.
                    for (int64_t i = 0; i < s.M * s.N; ++i) {
                        const float tol = bf16_act ? 1e-5f + std::abs(want[i]) * 8e-3f : 1e-4f;
                        ASSERT_NEAR(got[i], want[i], tol)
                            << path.name() << " " << dtype_name(dt) << " M=" << s.M << " N=" << s.N
                            << " K=" << s.K << " bf16_act=" << bf16_act << " i=" << i;
                    }
                }
            }
        }
    }
    restore_default_kernels();
}

// A row's products do not depend on the batch it is computed in (bitwise): the engine's concurrent ==
// alone and prefix-cache == recompute guarantees rest on it. M = 1 (decode), M = 12 (one vector tile),
// M = 45 (AMX: a full 32-row block and a copied tail; vector: k-blocked prefill); K past both k blocks,
// and an odd K (its last k-pair half empty). M = 2..5: a verify step's rows (whole-K tiles or k blocks).
// F32 weights (--dtype f32 checkpoints) run the same tiles on f32 panels.
TEST(OpsLinear, RowsDoNotDependOnTheBatch) {
    for (DType dt : {DType::BF16, DType::F32}) {
        for (int64_t K : {int64_t{40}, int64_t{41}, int64_t{1024}, int64_t{4100}}) {
            const int64_t N = 70, Mmax = 45;
            auto wf = random_vec(N * K, static_cast<uint32_t>(K), -0.5f, 0.5f);
            std::vector<uint8_t> wb(N * K * dtype_size(dt));
            convert_from_f32(wf.data(), dt, wb.data(), N * K);
            const LinearWeight lw = make_linear(ctx(), {TensorView::contiguous(wb.data(), dt, {N, K})});
            auto x = random_vec(Mmax * K, 9);
            for (const FastPath& path : fast_paths()) {
                path.use();
                // The engine's two modes: bf16 (activations and outputs rounded) and f32, whose unrounded
                // outputs also show order changes that bf16 rounding hides.
                for (bool bf16 : {true, false}) {
                    std::vector<float> all(Mmax * N);
                    linear(ctx(), x.data(), Mmax, lw, all.data(), bf16, bf16);
                    for (int64_t M : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{12},
                                      int64_t{33}}) {
                        for (int64_t m0 : {int64_t{0}, Mmax - M}) {
                            std::vector<float> part(M * N);
                            linear(ctx(), x.data() + m0 * K, M, lw, part.data(), bf16, bf16);
                            for (int64_t i = 0; i < M * N; ++i)
                                ASSERT_EQ(part[i], all[m0 * N + i])
                                    << path.name() << " " << dtype_name(dt) << " K=" << K << " M=" << M
                                    << " m0=" << m0 << " bf16=" << bf16 << " i=" << i;
                        }
                    }
                }
            }
        }
    }
    restore_default_kernels();
}

// A long prefill hands its panels over in row chunks of ~2 MiB of packed rows (ops/cpu/row_slabs.h:
// chunk_rows): rows on both sides of a chunk boundary, and the last ones, give the bits they give in a
// short batch or alone. 2400 rows of K = 1030 (515 k-pairs, 4.9 MB) make chunks of 864, 864 and 672 rows.
TEST(OpsLinear, RowsDoNotDependOnTheRowChunk) {
    const int64_t M = 2400, K = 1030, I = 48;
    ASSERT_EQ(cpu::chunk_rows(M, (K + 1) / 2 * 4), 864);
    auto g = random_vec(I * K, 21, -0.5f, 0.5f), u = random_vec(I * K, 22, -0.5f, 0.5f);
    std::vector<uint16_t> gb(I * K), ub(I * K);
    convert_from_f32(g.data(), DType::BF16, gb.data(), gb.size());
    convert_from_f32(u.data(), DType::BF16, ub.data(), ub.size());
    const TensorView vg = TensorView::contiguous(gb.data(), DType::BF16, {I, K});
    const TensorView vu = TensorView::contiguous(ub.data(), DType::BF16, {I, K});
    const LinearWeight plain = make_linear(ctx(), {vg, vu});  // N = 2I: the two parts stacked
    const LinearWeight gate_up = make_swiglu_linear(ctx(), vg, vu);
    auto x = random_vec(M * K, 23);
    for (const FastPath& path : fast_paths()) {
        path.use();
        std::vector<float> all(M * 2 * I), all_swiglu(M * I);
        linear(ctx(), x.data(), M, plain, all.data(), true, true);
        linear_swiglu(ctx(), x.data(), M, gate_up, all_swiglu.data(), true);
        const std::vector<std::pair<int64_t, int64_t>> batches = {{856, 16},  {863, 1},   {864, 1},
                                                                  {1720, 16}, {M - 1, 1}, {M - 30, 30}};
        for (auto [m0, rows] : batches) {
            std::vector<float> part(rows * 2 * I), part_swiglu(rows * I);
            linear(ctx(), x.data() + m0 * K, rows, plain, part.data(), true, true);
            linear_swiglu(ctx(), x.data() + m0 * K, rows, gate_up, part_swiglu.data(), true);
            for (int64_t i = 0; i < rows * 2 * I; ++i)
                ASSERT_EQ(part[i], all[m0 * 2 * I + i]) << path.name() << " m0=" << m0 << " i=" << i;
            for (int64_t i = 0; i < rows * I; ++i)
                ASSERT_EQ(part_swiglu[i], all_swiglu[m0 * I + i])
                    << path.name() << " swiglu m0=" << m0 << " i=" << i;
        }
    }
    restore_default_kernels();
}

// The same for every quantized format on every quantized path (AVX2's k-quants take their unpacked
// prefill tiles from 4 rows on: those follow the one-row tiles' order; on AMX-INT8 CPUs int8 batches of
// 4-16 rows run on tiles), plain and with the fused SwiGLU.
TEST(OpsLinear, QuantizedRowsDoNotDependOnTheBatch) {
    const int64_t N = 70, K = 600, Mmax = 45, I = 48;
    auto wf = random_vec(N * K, 4, -0.5f, 0.5f);
    auto wg = random_vec(2 * I * K, 5, -0.5f, 0.5f);
    auto x = random_vec(Mmax * K, 9);
    const TensorView vg = TensorView::contiguous(wg.data(), DType::F32, {I, K});
    const TensorView vu = TensorView::contiguous(wg.data() + I * K, DType::F32, {I, K});
    for (WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4, WeightFormat::Q4K, WeightFormat::Q6K,
                           WeightFormat::Q8X, WeightFormat::Q6K16}) {
        const LinearWeight lw =
            make_linear(ctx(), {TensorView::contiguous(wf.data(), DType::F32, {N, K})}, f);
        const LinearWeight gate_up = make_swiglu_linear(ctx(), vg, vu, f);
        for (const QuantPath& path : quant_paths()) {
            path.use();
            std::vector<float> all(Mmax * N), all_swiglu(Mmax * I);
            linear(ctx(), x.data(), Mmax, lw, all.data(), true);
            linear_swiglu(ctx(), x.data(), Mmax, gate_up, all_swiglu.data(), true);
            for (int64_t M :
                 {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{7}, int64_t{16}, int64_t{33}})
                for (int64_t m0 : {int64_t{0}, Mmax - M}) {
                    std::vector<float> part(M * N), part_swiglu(M * I);
                    linear(ctx(), x.data() + m0 * K, M, lw, part.data(), true);
                    linear_swiglu(ctx(), x.data() + m0 * K, M, gate_up, part_swiglu.data(), true);
                    for (int64_t i = 0; i < M * N; ++i)
                        ASSERT_EQ(part[i], all[m0 * N + i]) << path.name() << " " << weight_format_name(f)
                                                            << " M=" << M << " m0=" << m0 << " i=" << i;
                    for (int64_t i = 0; i < M * I; ++i)
                        ASSERT_EQ(part_swiglu[i], all_swiglu[m0 * I + i])
                            << path.name() << " " << weight_format_name(f) << " swiglu M=" << M
                            << " m0=" << m0 << " i=" << i;
                }
        }
    }
    restore_default_kernels();
}

TEST(OpsLinear, FusedPartsEqualSeparateProjections) {
    const int64_t K = 70;
    auto a = random_vec(33 * K, 1), b = random_vec(5 * K, 2);
    std::vector<uint16_t> ab(33 * K), bb(5 * K);
    convert_from_f32(a.data(), DType::BF16, ab.data(), ab.size());
    convert_from_f32(b.data(), DType::BF16, bb.data(), bb.size());
    TensorView va = TensorView::contiguous(ab.data(), DType::BF16, {33, K});
    TensorView vb = TensorView::contiguous(bb.data(), DType::BF16, {5, K});
    LinearWeight fused = make_linear(ctx(), {va, vb}), la = make_linear(ctx(), {va}),
                 lb = make_linear(ctx(), {vb});
    auto x = random_vec(3 * K, 3);
    std::vector<float> yf(3 * 38), ya(3 * 33), yb(3 * 5);
    linear(ctx(), x.data(), 3, fused, yf.data(), true, true);
    linear(ctx(), x.data(), 3, la, ya.data(), true, true);
    linear(ctx(), x.data(), 3, lb, yb.data(), true, true);
    for (int m = 0; m < 3; ++m) {
        for (int n = 0; n < 33; ++n) EXPECT_EQ(yf[m * 38 + n], ya[m * 33 + n]);
        for (int n = 0; n < 5; ++n) EXPECT_EQ(yf[m * 38 + 33 + n], yb[m * 5 + n]);
    }
    // The reference path of a fused weight (no plain view kept) agrees too.
    force_reference(OpId::LINEAR, true);
    std::vector<float> yr(3 * 38);
    linear(ctx(), x.data(), 3, fused, yr.data(), true, true);
    force_reference(OpId::LINEAR, false);
    for (size_t i = 0; i < yr.size(); ++i) EXPECT_NEAR(yr[i], yf[i], 1e-5f + std::abs(yf[i]) * 8e-3f);
}

TEST(OpsLinear, ArgmaxWithoutMaterialisingEqualsArgmaxOfTheProducts) {
    for (auto [M, N, K] :
         std::vector<std::array<int64_t, 3>>{{1, 1000, 64}, {3, 4099, 96}, {13, 2048, 33}, {2, 40000, 64}}) {
        auto wf = random_vec(N * K, static_cast<uint32_t>(N));
        // Duplicate a row so two columns tie exactly: the first must win (N = 40000 spreads the two over
        // many balanced chunks, so the tie is decided across chunks and threads).
        for (int64_t k = 0; k < K; ++k) wf[(N - 5) * K + k] = wf[7 * K + k] = 3.0f;
        std::vector<uint16_t> wb(N * K);
        convert_from_f32(wf.data(), DType::BF16, wb.data(), N * K);
        LinearWeight lw = make_linear(ctx(), {TensorView::contiguous(wb.data(), DType::BF16, {N, K})});
        auto x = random_vec(M * K, static_cast<uint32_t>(M), 0.0f, 1.0f);
        for (bool bf16 : {true, false})
            for (const FastPath& path : fast_paths()) {
                path.use();
                std::vector<float> y(M * N);
                linear(ctx(), x.data(), M, lw, y.data(), bf16);
                std::vector<int32_t> ids(M);
                linear_argmax(ctx(), x.data(), M, lw, ids.data(), bf16);
                for (int64_t m = 0; m < M; ++m)
                    EXPECT_EQ(ids[m], ref::argmax(&y[m * N], N)) << path.name() << " m=" << m;
            }
    }
    restore_default_kernels();
}

TEST(OpsLinear, FusedSwigluEqualsSiluOfGateTimesUp) {
    // K = 4100 exceeds the fused kernel's single k block, so the products-then-activation path is covered
    // too.
    for (auto [M, I, K] : std::vector<std::array<int64_t, 3>>{
             {1, 16, 33}, {5, 48, 300}, {13, 32, 64}, {29, 64, 1024}, {3, 16, 4100}}) {
        auto g = random_vec(I * K, static_cast<uint32_t>(I + K), -0.3f, 0.3f);
        auto u = random_vec(I * K, static_cast<uint32_t>(I * K), -0.3f, 0.3f);
        std::vector<uint16_t> gb(I * K), ub(I * K);
        convert_from_f32(g.data(), DType::BF16, gb.data(), gb.size());
        convert_from_f32(u.data(), DType::BF16, ub.data(), ub.size());
        const TensorView vg = TensorView::contiguous(gb.data(), DType::BF16, {I, K});
        const TensorView vu = TensorView::contiguous(ub.data(), DType::BF16, {I, K});
        const LinearWeight lw = make_swiglu_linear(ctx(), vg, vu);
        auto x = random_vec(M * K, static_cast<uint32_t>(M));
        for (bool bf16_act : {false, true}) {
            std::vector<float> xr = x;
            if (bf16_act)
                for (auto& v : xr) v = round_bf16(v);
            std::vector<float> yg(M * I), yu(M * I), want(M * I);
            ref::linear(ctx(), xr.data(), M, vg, yg.data());
            ref::linear(ctx(), xr.data(), M, vu, yu.data());
            for (int64_t i = 0; i < M * I; ++i) want[i] = ref::silu(yg[i]) * yu[i];
            auto check = [&](const char* path) {
                std::vector<float> got(M * I, NAN);
                linear_swiglu(ctx(), x.data(), M, lw, got.data(), bf16_act);
                for (int64_t i = 0; i < M * I; ++i)
                    ASSERT_NEAR(got[i], want[i], 1e-5f + std::abs(want[i]) * 2e-3f)
                        << path << " M=" << M << " I=" << I << " K=" << K << " bf16_act=" << bf16_act
                        << " i=" << i;
            };
            for (const FastPath& path : fast_paths()) {
                path.use();
                const Isa isa = path.isa;
                const uint64_t fallbacks = fallback_count(OpId::SWIGLU);
                check(path.name().c_str());
                // Where the fused kernel exists but K is too long for it, the slower path is counted.
                if (isa == Isa::AVX512 && has_bf16_dot() && !has_amx_bf16() && bf16_act && K > 4096)
                    EXPECT_EQ(fallback_count(OpId::SWIGLU), fallbacks + 1);
                else
                    EXPECT_EQ(fallback_count(OpId::SWIGLU), fallbacks);
            }
            restore_default_kernels();
            force_reference_all(true);
            check("reference");
            force_reference_all(false);
        }
    }
}

}  // namespace

// The embedding of a tied model gathers its rows from the packed lm_head: every row of every table dtype
// (odd K, a partial last panel) must come back exactly as the checkpoint's row.
TEST(OpsLinear, EmbeddingFromPackedTableEqualsTheStoredRows) {
    const int64_t V = 70, H = 37;
    auto wf = random_vec(V * H, 5, -2.0f, 2.0f);
    const std::vector<int32_t> ids = {0, 31, 32, 69, 5, 5, 64};
    const int64_t n = static_cast<int64_t>(ids.size());
    for (DType dt : {DType::BF16, DType::F32, DType::F16}) {
        std::vector<uint8_t> wb(V * H * dtype_size(dt));
        convert_from_f32(wf.data(), dt, wb.data(), V * H);
        const TensorView table = TensorView::contiguous(wb.data(), dt, {V, H});
        const LinearWeight packed = make_linear(ctx(), {table});
        std::vector<float> want(n * H), got(n * H, NAN);
        ref::embedding(table, ids.data(), n, want.data());
        ops::embedding(ctx(), table, &packed.packed, ids.data(), n, got.data(), false);
        for (int64_t i = 0; i < n * H; ++i) ASSERT_EQ(got[i], want[i]) << dtype_name(dt) << " i=" << i;
    }
}

// A group of linears (an MoE layer's experts) gives every job the bits linear() / linear_swiglu() give
// it alone: bf16 and every quantized format (grouped), f32 weights (run alone), inputs read in place
// through a row list or contiguous, on every fast path and the reference.
TEST(OpsLinear, GroupEqualsEachLinearAlone) {
    const int64_t K = 70, I = 48, R = 40;  // R: rows of the matrix the row lists index
    auto h = random_vec(R * K, 5);
    std::vector<std::optional<WeightFormat>> formats = {
        std::nullopt,      WeightFormat::Q8,  WeightFormat::Q4,   WeightFormat::Q4K,
        WeightFormat::Q6K, WeightFormat::Q8X, WeightFormat::Q6K16};
    std::vector<std::vector<float>> gate, up, down;
    std::vector<LinearWeight> gate_up, down_w;
    for (size_t e = 0; e < formats.size() + 1; ++e) {  // the last: f32 weights (no grouped kernel)
        gate.push_back(random_vec(I * K, 10 + e, -0.5f, 0.5f));
        up.push_back(random_vec(I * K, 20 + e, -0.5f, 0.5f));
        down.push_back(random_vec(K * I, 30 + e, -0.5f, 0.5f));
    }
    auto view = [](std::vector<float>& v, int64_t n, int64_t k) {
        return TensorView::contiguous(v.data(), DType::F32, {n, k});
    };
    std::vector<std::vector<uint16_t>> bf16_store;
    for (size_t e = 0; e < formats.size() + 1; ++e) {
        if (e == formats.size()) {
            gate_up.push_back(make_swiglu_linear(ctx(), view(gate[e], I, K), view(up[e], I, K)));
            down_w.push_back(make_linear(ctx(), {view(down[e], K, I)}));
        } else if (!formats[e]) {  // bf16 weights
            for (auto* v : {&gate[e], &up[e], &down[e]}) {
                bf16_store.emplace_back(v->size());
                convert_from_f32(v->data(), DType::BF16, bf16_store.back().data(), v->size());
            }
            const size_t b = bf16_store.size() - 3;
            auto bview = [&](size_t i, int64_t n, int64_t k) {
                return TensorView::contiguous(bf16_store[b + i].data(), DType::BF16, {n, k});
            };
            gate_up.push_back(make_swiglu_linear(ctx(), bview(0, I, K), bview(1, I, K)));
            down_w.push_back(make_linear(ctx(), {bview(2, K, I)}));
        } else {
            gate_up.push_back(make_swiglu_linear(ctx(), view(gate[e], I, K), view(up[e], I, K), formats[e]));
            down_w.push_back(make_linear(ctx(), {view(down[e], K, I)}, formats[e]));
        }
    }
    std::vector<int64_t>
        rows;  // expert e: rows e, e + 3, e + 6, ... (e + 1 of them; distinct, unordered runs)
    std::vector<int64_t> first;
    for (size_t e = 0; e < gate_up.size(); ++e) {
        first.push_back(static_cast<int64_t>(rows.size()));
        for (size_t i = 0; i <= e; ++i) rows.push_back((e + 3 * i * 7) % R);
    }
    first.push_back(static_cast<int64_t>(rows.size()));
    const int64_t total = static_cast<int64_t>(rows.size());
    std::vector<QuantPath> paths = quant_paths();
    paths.push_back({Isa::REF, false});
    for (const QuantPath& path : paths)
        for (bool bf16_act : {false, true}) {
            path.use();
            std::vector<float> act(total * I, NAN), y(total * K, NAN), want_act(total * I), want_y(total * K);
            std::vector<LinearJob> gu_jobs, down_jobs;
            for (size_t e = 0; e < gate_up.size(); ++e) {
                const int64_t n = first[e + 1] - first[e], at = first[e];
                const bool in_place = e % 2 == 0;
                std::vector<float> xe(n * K);
                for (int64_t i = 0; i < n; ++i)
                    std::copy_n(h.data() + rows[at + i] * K, K, xe.data() + i * K);
                linear_swiglu(ctx(), xe.data(), n, gate_up[e], want_act.data() + at * I, bf16_act);
                linear(ctx(), want_act.data() + at * I, n, down_w[e], want_y.data() + at * K, bf16_act);
                if (in_place)
                    gu_jobs.push_back({h.data(), n, &gate_up[e], act.data() + at * I, rows.data() + at});
                else
                    gu_jobs.push_back({h.data() + rows[at] * K, 1, &gate_up[e], act.data() + at * I});
                down_jobs.push_back({act.data() + at * I, n, &down_w[e], y.data() + at * K});
            }
            // Contiguous-input jobs above cover one row each; the rest of those experts' rows by row list.
            for (size_t e = 1; e < gate_up.size(); e += 2) {
                const int64_t n = first[e + 1] - first[e], at = first[e];
                if (n > 1)
                    gu_jobs.push_back(
                        {h.data(), n - 1, &gate_up[e], act.data() + (at + 1) * I, rows.data() + at + 1});
            }
            linear_group(ctx(), gu_jobs, true, bf16_act);
            linear_group(ctx(), down_jobs, false, bf16_act);
            for (int64_t i = 0; i < total * I; ++i)
                ASSERT_EQ(act[i], want_act[i]) << path.name() << " bf16=" << bf16_act << " i=" << i;
            for (int64_t i = 0; i < total * K; ++i)
                ASSERT_EQ(y[i], want_y[i]) << path.name() << " bf16=" << bf16_act << " i=" << i;
        }
    restore_default_kernels();
}

// A shared input (ops/linear_input.h) gives every linear exactly what the plain call on its matrix gives,
// through every path, alone or in a group (rows copied from its kept forms, or read in place); a reset
// drops the forms made for the previous matrix.
TEST(OpsLinear, SharedInputEqualsPlainCalls) {
    const int64_t K = 70, I = 48, R = 9;
    auto h = random_vec(R * K, 41), h2 = random_vec(R * K, 42);
    auto gate = random_vec(I * K, 43, -0.5f, 0.5f), up = random_vec(I * K, 44, -0.5f, 0.5f);
    auto plain = random_vec(I * K, 45, -0.5f, 0.5f);
    std::vector<uint16_t> gate16(I * K), up16(I * K), plain16(I * K);
    convert_from_f32(gate.data(), DType::BF16, gate16.data(), I * K);
    convert_from_f32(up.data(), DType::BF16, up16.data(), I * K);
    convert_from_f32(plain.data(), DType::BF16, plain16.data(), I * K);
    auto f32 = [&](std::vector<float>& v) { return TensorView::contiguous(v.data(), DType::F32, {I, K}); };
    auto b16 = [&](std::vector<uint16_t>& v) {
        return TensorView::contiguous(v.data(), DType::BF16, {I, K});
    };
    struct Case {
        std::string name;
        LinearWeight gu, w;
    };
    std::vector<Case> cases;
    cases.push_back(
        {"bf16", make_swiglu_linear(ctx(), b16(gate16), b16(up16)), make_linear(ctx(), {b16(plain16)})});
    cases.push_back({"f32", make_swiglu_linear(ctx(), f32(gate), f32(up)), make_linear(ctx(), {f32(plain)})});
    for (WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4, WeightFormat::Q4K, WeightFormat::Q6K,
                           WeightFormat::Q8X, WeightFormat::Q6K16})
        cases.push_back({weight_format_name(f), make_swiglu_linear(ctx(), f32(gate), f32(up), f),
                         make_linear(ctx(), {f32(plain)}, f)});
    const std::vector<int64_t> rows = {4, 0, 8, 4, 2};  // a routed expert's tokens (a repeat included)
    const int64_t n = static_cast<int64_t>(rows.size());
    std::vector<float> gathered(n * K);
    for (int64_t i = 0; i < n; ++i) std::copy_n(h.data() + rows[i] * K, K, gathered.data() + i * K);
    std::vector<QuantPath> paths = quant_paths();
    paths.push_back({Isa::REF, false});
    LinearInput in;  // one object through every case: each reset must drop the previous forms
    for (const QuantPath& path : paths)
        for (bool bf16_act : {false, true})
            for (const Case& c : cases) {
                path.use();
                const std::string what = path.name() + " " + c.name + (bf16_act ? " bf16" : " f32");
                std::vector<float> want_y(R * I), want_act(R * I), want_rows(n * I), want2(R * I),
                    want_rounded(R * I);
                linear(ctx(), h.data(), R, c.w, want_y.data(), bf16_act);
                linear(ctx(), h.data(), R, c.w, want_rounded.data(), bf16_act, true);
                linear_swiglu(ctx(), h.data(), R, c.gu, want_act.data(), bf16_act);
                linear_swiglu(ctx(), gathered.data(), n, c.gu, want_rows.data(), bf16_act);
                linear(ctx(), h2.data(), R, c.w, want2.data(), bf16_act);
                in.reset(h.data(), R, K);
                std::vector<float> y(R * I, NAN), act(R * I, NAN), act_rows(n * I, NAN),
                    act_group(R * I, NAN), rounded(R * I, NAN);
                linear(ctx(), in, c.w, y.data(), bf16_act);
                linear(ctx(), in, c.w, rounded.data(), bf16_act, true);  // outputs rounded where HF rounds
                linear_swiglu(ctx(), in, c.gu, act.data(), bf16_act);
                // One group: a job on rows of the shared input, and one on all of it in place.
                linear_group(ctx(),
                             {{nullptr, n, &c.gu, act_rows.data(), rows.data(), &in},
                              {nullptr, R, &c.gu, act_group.data(), nullptr, &in}},
                             true, bf16_act);
                for (int64_t i = 0; i < R * I; ++i) {
                    ASSERT_EQ(y[i], want_y[i]) << what << " i=" << i;
                    ASSERT_EQ(rounded[i], want_rounded[i]) << what << " (rounded) i=" << i;
                    ASSERT_EQ(act[i], want_act[i]) << what << " i=" << i;
                    ASSERT_EQ(act_group[i], want_act[i]) << what << " i=" << i;
                }
                for (int64_t i = 0; i < n * I; ++i)
                    ASSERT_EQ(act_rows[i], want_rows[i]) << what << " i=" << i;
                in.reset(h2.data(), R, K);  // another matrix at once: nothing of h may be reused
                linear(ctx(), in, c.w, y.data(), bf16_act);
                for (int64_t i = 0; i < R * I; ++i)
                    ASSERT_EQ(y[i], want2[i]) << what << " (after reset) i=" << i;
            }
    restore_default_kernels();
}
