// The quantized formats: the scalar definition against float64, every ISA's kernel against the
// scalar reference on odd shapes, and the quantizers' error.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/dispatch.h"
#include "ops/layers.h"
#include "ops/linear.h"
#include "ops/linear_quant.h"
#include "ops/ref/ref_ops.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

const WeightFormat kFormats[] = {WeightFormat::Q8,  WeightFormat::Q4,  WeightFormat::Q4K,
                                 WeightFormat::Q6K, WeightFormat::Q8X, WeightFormat::Q6K16};

struct Shape {
    int64_t M, N, K;
};
// 1 row; K below, at and past a group and a super-block; N below, at and past a panel; prefill-sized M.
const Shape kShapes[] = {{1, 1, 1},    {1, 31, 33},  {1, 33, 64},   {2, 32, 31},   {3, 65, 100}, {5, 100, 37},
                         {1, 257, 96}, {17, 45, 99}, {64, 70, 130}, {65, 33, 515}, {7, 96, 1024}};

LinearWeight quantized(WeightFormat f, const std::vector<float>& w, int64_t N, int64_t K) {
    return make_linear(ctx(), {TensorView::contiguous(const_cast<float*>(w.data()), DType::F32, {N, K})}, f);
}

TEST(Quant, ReferenceEqualsFloat64DequantizedProduct) {
    for (WeightFormat f : kFormats)
        for (const Shape& s : kShapes) {
            auto wf = random_vec(s.N * s.K, 3 + s.N, -0.3f, 0.3f);
            auto x = random_vec(s.M * s.K, 5 + s.M, -2.0f, 2.0f);
            LinearWeight lw = quantized(f, wf, s.N, s.K);
            quant::QuantizedRows xq;
            quant::quantize_activations(x.data(), s.M, s.K, &xq);
            std::vector<float> y(s.M * s.N);
            ref::linear_quant(xq.view(), lw.packed, y.data(), s.N);
            for (int64_t m = 0; m < s.M; ++m)
                for (int64_t n = 0; n < s.N; ++n) {
                    double want = 0.0, mag = 0.0;
                    for (int64_t k = 0; k < s.K; ++k) {
                        float a, b;
                        quant::half_affine(lw.packed, n, k / kQuantGroup,
                                           static_cast<int>(k % kQuantGroup) / 16, &a, &b);
                        const double aq = static_cast<double>(a) * quant::q_value(lw.packed, n, k);
                        const double xd =
                            static_cast<double>(xq.xs[m * xq.G + k / kQuantGroup]) * xq.xq[m * xq.Kp + k];
                        want += (aq - b) * xd;
                        mag += std::abs(aq * xd) + std::abs(b * xd);
                    }
                    // f32: one scale product and one sum per group, on sums of magnitude <= mag.
                    ASSERT_NEAR(y[m * s.N + n], want, 1e-6 * mag * (2 + xq.G) + 1e-30)
                        << weight_format_name(f) << " M=" << s.M << " N=" << s.N << " K=" << s.K;
                }
        }
}

TEST(Quant, EveryIsaMatchesReference) {
    for (WeightFormat f : kFormats)
        for (const Shape& s : kShapes) {
            auto wf = random_vec(s.N * s.K, 13 + s.K, -0.5f, 0.5f);
            auto x = random_vec(s.M * s.K, 17 + s.M);
            LinearWeight lw = quantized(f, wf, s.N, s.K);
            EXPECT_FALSE(lw.view.data);
            set_active_isa(Isa::REF);
            std::vector<float> want(s.M * s.N);
            linear(ctx(), x.data(), s.M, lw, want.data(), false);
            std::vector<float> avx2_out;  // the vpmaddubsw build's products (unrounded)
            for (const QuantPath& path : quant_paths()) {
                path.use();
                for (bool round_out : {false, true}) {
                    std::vector<float> got(s.M * s.N, NAN);
                    linear(ctx(), x.data(), s.M, lw, got.data(), true, round_out);
                    for (int64_t i = 0; i < s.M * s.N; ++i) {
                        // Same integer dots; only the order of the f32 group sums differs (and bf16 output
                        // rounding when asked).
                        const float tol =
                            1e-5f * (1 + std::abs(want[i])) + (round_out ? std::abs(want[i]) * 4e-3f : 0);
                        ASSERT_NEAR(got[i], want[i], tol)
                            << path.name() << " " << weight_format_name(f) << " M=" << s.M << " N=" << s.N
                            << " K=" << s.K << " i=" << i;
                    }
                    // The AVX-VNNI build differs from the AVX2 one only in how it forms the same integer
                    // sums.
                    if (path.isa == Isa::AVX2 && !round_out) {
                        if (!path.avx_vnni)
                            avx2_out = got;
                        else
                            for (int64_t i = 0; i < s.M * s.N; ++i)
                                ASSERT_EQ(got[i], avx2_out[i]) << weight_format_name(f) << " M=" << s.M
                                                               << " N=" << s.N << " K=" << s.K << " i=" << i;
                    }
                }
            }
        }
    restore_default_kernels();
}

// Where the products are used inside other ops: the fused SwiGLU layout and the argmax.
// M = 1, 3, 7: the fused epilogue's tiles of 1, 3, 6 + 1 rows (AVX-512).
TEST(Quant, SwigluAndArgmaxOverQuantizedWeights) {
    const int64_t I = 48, K = 70;
    for (int64_t M : {1, 3, 7})
        for (WeightFormat f : kFormats) {
            auto g = random_vec(I * K, 1), u = random_vec(I * K, 2), x = random_vec(M * K, 3);
            LinearWeight sw = make_swiglu_linear(ctx(), TensorView::contiguous(g.data(), DType::F32, {I, K}),
                                                 TensorView::contiguous(u.data(), DType::F32, {I, K}), f);
            LinearWeight lg = quantized(f, g, I, K), lu = quantized(f, u, I, K);
            for (const QuantPath& path : quant_paths()) {
                path.use();
                std::vector<float> act(M * I), yg(M * I), yu(M * I);
                linear_swiglu(ctx(), x.data(), M, sw, act.data(), true);
                linear(ctx(), x.data(), M, lg, yg.data(), true);
                linear(ctx(), x.data(), M, lu, yu.data(), true);
                for (int64_t i = 0; i < M * I; ++i) {
                    const float want = yg[i] / (1.0f + std::exp(-yg[i])) * yu[i];
                    ASSERT_NEAR(act[i], want, 1e-4f * (1 + std::abs(want)))
                        << weight_format_name(f) << " " << path.name() << " M=" << M;
                }
                std::vector<int32_t> ids(M);
                linear_argmax(ctx(), x.data(), M, lg, ids.data(), true);
                for (int64_t m = 0; m < M; ++m) EXPECT_EQ(ids[m], ops::argmax(ctx(), yg.data() + m * I, I));
            }
        }
    restore_default_kernels();
}

// Rows gathered from the packed layout (the embedding) are the dequantized values; q and scale obey
// the format's ranges and error bounds.
TEST(Quant, QuantizersAndRowGather) {
    const int64_t N = 37, K = 77;
    auto wf = random_vec(N * K, 9, -1.0f, 1.0f);
    wf[5] = 40.0f;  // an outlier: only its own group's scale may grow
    for (WeightFormat f : kFormats) {
        LinearWeight lw = quantized(f, wf, N, K);
        const int lo = f == WeightFormat::Q8 || f == WeightFormat::Q8X ? -127
                       : f == WeightFormat::Q4                         ? -8
                       : f == WeightFormat::Q4K                        ? 0
                                                                       : -32;
        const int hi = f == WeightFormat::Q8 || f == WeightFormat::Q8X ? 127
                       : f == WeightFormat::Q4                         ? 7
                       : f == WeightFormat::Q4K                        ? 15
                                                                       : 31;
        std::vector<float> row(K);
        double err2 = 0.0, absmax_err2 = 0.0;
        for (int64_t n = 0; n < N; ++n) {
            unpack_row(lw.packed, n, row.data());
            for (int64_t k = 0; k < K; ++k) {
                const int q = quant::q_value(lw.packed, n, k);
                ASSERT_GE(q, lo);
                ASSERT_LE(q, hi);
                float s, b;
                quant::half_affine(lw.packed, n, k / kQuantGroup, static_cast<int>(k % kQuantGroup) / 16, &s,
                                   &b);
                ASSERT_EQ(row[k], s * q - b);
                const double e = row[k] - wf[n * K + k];
                if (n > 0) err2 += e * e;  // row 0 holds the outlier: its group is all-zero either way
                if (f == WeightFormat::Q8 || f == WeightFormat::Q8X) {
                    ASSERT_LE(std::abs(e), s * 0.5 * (1 + 1e-3)) << n << " " << k;
                }
            }
            // Q4's search must beat plain absmax scaling (max|w| / 7, the simplest symmetric choice).
            for (int64_t g = 0; n > 0 && g * kQuantGroup < K; ++g) {
                float amax = 0;
                const int64_t k1 = std::min<int64_t>(K, (g + 1) * kQuantGroup);
                for (int64_t k = g * kQuantGroup; k < k1; ++k) amax = std::max(amax, std::abs(wf[n * K + k]));
                const float d = amax / 7.0f;
                for (int64_t k = g * kQuantGroup; k < k1; ++k) {
                    const double e =
                        d * std::clamp(std::nearbyint(wf[n * K + k] / d), -8.0f, 7.0f) - wf[n * K + k];
                    absmax_err2 += e * e;
                }
            }
        }
        if (f == WeightFormat::Q4) {
            EXPECT_LT(err2, 0.9 * absmax_err2);
        }
        // 4 bits with a per-group minimum lose little against the symmetric search on centred values;
        // 6 bits cut the error by ~16x.
        if (f == WeightFormat::Q4K) {
            EXPECT_LT(err2, 1.3 * absmax_err2);
        }
        if (f == WeightFormat::Q6K || f == WeightFormat::Q6K16) {
            EXPECT_LT(err2, 0.1 * absmax_err2);
        }
        // Padding is exactly zero: columns past N and k past K contribute nothing.
        EXPECT_EQ(quant::q_value(lw.packed, N, 0), 0);
        EXPECT_EQ(quant::q_value(lw.packed, 0, K), 0);
        const int64_t nb = lw.packed.bytes();
        EXPECT_EQ(nb, lw.packed.n_panels * lw.packed.n_blocks * quant::block_bytes(f));
    }
}

// Values all on one side of zero: int4-k's grid starts at its minimum, which ggml's fit keeps <= 0,
// so it spans [0, max] with 16 levels where symmetric int4 spends half of its on the empty side; int6-k
// (symmetric too, 64 levels) is then ~4x better than int4-k rather than the ~16x of centred values.
TEST(Quant, Int4KFitsOffsetGroups) {
    const int64_t N = 32, K = 256;
    auto wf = random_vec(N * K, 4, 0.5f, 1.5f);
    auto err2 = [&](WeightFormat f) {
        LinearWeight lw = quantized(f, wf, N, K);
        std::vector<float> row(K);
        double e2 = 0.0;
        for (int64_t n = 0; n < N; ++n) {
            quant::dequantize_row(lw.packed, n, row.data());
            for (int64_t k = 0; k < K; ++k) e2 += (row[k] - wf[n * K + k]) * (row[k] - wf[n * K + k]);
        }
        return e2;
    };
    EXPECT_LT(err2(WeightFormat::Q4K), 0.3 * err2(WeightFormat::Q4));
    EXPECT_LT(err2(WeightFormat::Q6K), 0.35 * err2(WeightFormat::Q4K));
}

// Every ISA's activation quantizer gives the reference's bytes (scales, values and sums), odd K included.
TEST(Quant, ActivationQuantizersAreBitwiseTheReference) {
    for (int64_t K : {1, 5, 31, 32, 33, 100, 256, 300, 1024, 1031}) {
        auto x = random_vec(3 * K, 21 + K, -3.0f, 3.0f);
        x[0] = 0.0f;
        if (K >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero group
        if (K >= 100) x[K + 70] = INFINITY;  // an overflowed activation: defined bytes, the same everywhere
        quant::QuantizedRows want;
        quant::quantize_activations(x.data(), 3, K, &want);
        for (Isa isa : fast_isas())
            for (WeightFormat f : kFormats) {
                const QuantKernelRow& k = quant_kernel(isa, f);
                quant::QuantizedRows got;
                got.resize(3, K, nullptr);
                for (int64_t m = 0; m < 3; ++m) k.quantize(x.data() + m * K, &got, m);
                for (int64_t i = 0; i < 3 * want.Kp; ++i)
                    ASSERT_EQ(got.xq[i], want.xq[i]) << isa_name(isa) << " K=" << K << " " << i;
                for (int64_t i = 0; i < 3 * want.G; ++i) {
                    ASSERT_EQ(got.xs[i], want.xs[i]) << isa_name(isa) << " K=" << K;
                    ASSERT_EQ(got.xsum[i], want.xsum[i]) << isa_name(isa) << " K=" << K;
                    ASSERT_EQ(got.xsum_lo[i], want.xsum_lo[i]) << isa_name(isa) << " K=" << K;
                }
            }
    }
}

TEST(Quant, EveryIsaHasAKernelRow) {
    for (Isa isa : {Isa::REF, Isa::AVX2, Isa::AVX512})
        for (WeightFormat f : kFormats) EXPECT_NE(quant_kernel(isa, f).gemm, nullptr);
    // A CPU with AVX-512 VNNI runs the vpdpbusd kernels, one without it the AVX2 ones (both on AVX512);
    // AVX2 runs its AVX-VNNI build where the CPU has it and GDN_AVX_VNNI / set_avx_vnni leave it on.
    for (WeightFormat f : kFormats) {
        if (has_half_groups(f)) continue;  // no AVX2 kernel yet: the reference over the pool, named so
        EXPECT_EQ(quant_kernel(Isa::AVX512, f).need,
                  cpu_has_avx512_vnni() ? CpuNeed::AVX512_VNNI : CpuNeed::NOTHING)
            << quant_kernel(Isa::AVX512, f).name;
        for (bool on : {false, true}) {
            const bool vnni = set_avx_vnni(on);
            EXPECT_EQ(vnni, on && cpu_has_avx_vnni());
            EXPECT_EQ(quant_kernel(Isa::AVX2, f).need, vnni ? CpuNeed::AVX_VNNI : CpuNeed::NOTHING)
                << quant_kernel(Isa::AVX2, f).name;
        }
    }
    restore_default_kernels();
    const std::string r = quant_kernel_report();
    EXPECT_NE(r.find("linear int8:"), std::string::npos) << r;
    for (WeightFormat f : kFormats)
        EXPECT_NE(r.find(std::string("linear ") + weight_format_name(f) + ":"), std::string::npos) << r;
}

}  // namespace
