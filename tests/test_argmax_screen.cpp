// The greedy argmax's int8 screen must give exactly the ids of the full bf16 pass: random outputs, exact
// ties, near ties one bf16 ulp apart, outliers in x, flat outputs (candidate overflow), zero and
// non-finite rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "ops/argmax_screen.h"
#include "ops/cpu/linear_kernels.h"
#include "ops/dispatch.h"
#include "ops/linear.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

struct Screened {
    std::vector<uint16_t> wb;
    LinearWeight full;      // no screen: the full bf16 pass
    LinearWeight screened;  // the same packed weight with the screen
    Screened(const std::vector<float>& wf, int64_t N, int64_t K) : wb(N * K) {
        convert_from_f32(wf.data(), DType::BF16, wb.data(), N * K);
        full = make_linear(ctx(), {TensorView::contiguous(wb.data(), DType::BF16, {N, K})});
        screened = make_linear(ctx(), {TensorView::contiguous(wb.data(), DType::BF16, {N, K})});
        screened.screen = make_int8_screen(ctx(), screened.packed);
    }
};

int32_t argmax_of(const float* x, const LinearWeight& w) {
    int32_t id = -7;
    linear_argmax(ctx(), x, 1, w, &id, true);
    return id;
}

// Runs body on every fast path whose kernels run a screen (AVX-512 VNNI: vpdpbusd; AVX2: vpmaddubsw, also
// on an AVX-512 CPU), each against that path's own full pass; skips where no path has one.
template <typename F>
void on_screen_paths(const F& body) {
    int ran = 0;
    for (const FastPath& path : fast_paths()) {
        path.use();
        if (!argmax_screen_available()) continue;
        SCOPED_TRACE(path.name());
        body();
        ++ran;
    }
    restore_default_kernels();
    if (ran == 0) GTEST_SKIP() << "no screen kernel here (needs AVX2)";
}

TEST(ArgmaxScreen, RandomOutputsGiveTheFullPassIds) {
    on_screen_paths([&] {
        for (auto [N, K] : std::vector<std::array<int64_t, 2>>{
                 {1, 1}, {31, 3}, {33, 5}, {100, 64}, {1000, 127}, {5000, 1024}, {40000, 256}}) {
            Screened w(random_vec(N * K, static_cast<uint32_t>(N + K), -0.1f, 0.1f), N, K);
            ASSERT_TRUE(w.screened.screen);
            for (uint32_t trial = 0; trial < 20; ++trial) {
                auto x = random_vec(K, 100 + trial, -2.0f, 2.0f);
                if (trial % 4 == 1) x[trial % K] = 60.0f;  // an outlier channel: coarse x quantisation
                if (trial % 4 == 2)
                    for (auto& v : x) v *= 1e-3f;  // small activations
                const int32_t want = argmax_of(x.data(), w.full);
                // The screen itself (true: it ran, no overflow), and through linear_argmax.
                std::vector<uint32_t> xp((K + 1) / 2, 0);
                for (int64_t k = 0; k < K; ++k)
                    xp[k / 2] |= static_cast<uint32_t>(f32_to_bf16(x[k])) << (16 * (k & 1));
                // x is quantised with one scale: an outlier channel widens the bounds, and the candidates may
                // overflow (then the full pass runs, counted); otherwise the screen must run.
                int32_t got = -7;
                const bool ran = screened_argmax(ctx(), xp.data(), 1, w.screened, &got);
                if (trial % 4 != 1) {
                    ASSERT_TRUE(ran) << "N=" << N << " K=" << K << " trial=" << trial;
                }
                if (ran) {
                    EXPECT_EQ(got, want) << "N=" << N << " K=" << K << " trial=" << trial;
                }
                EXPECT_EQ(argmax_of(x.data(), w.screened), want)
                    << "N=" << N << " K=" << K << " trial=" << trial;
            }
        }
    });
}

// Up to cpu::kScreenRows rows in one stream of the int8 copy (a decode batch's or a speculative
// verify's rows), more in chunks of them up to kScreenMaxRows, beyond that the full pass: each row's id
// is the full pass's, whatever the other rows hold (an outlier row, a zero row, rows that share the
// argmax). Every row count of one stream, one and two chunks with a partial last one, and one row too many.
TEST(ArgmaxScreen, SeveralRowsGiveTheFullPassIds) {
    static_assert(cpu::kScreenRows == 8 && kScreenMaxRows == 16, "the row counts below cover these limits");
    on_screen_paths([&] {
        for (auto [N, K] : std::vector<std::array<int64_t, 2>>{{33, 5}, {1000, 127}, {40000, 256}}) {
            Screened w(random_vec(N * K, static_cast<uint32_t>(3 * N + K), -0.1f, 0.1f), N, K);
            for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17}) {
                for (uint32_t trial = 0; trial < 6; ++trial) {
                    std::vector<float> x =
                        random_vec(M * K, 500 + 10 * static_cast<uint32_t>(M) + trial, -2.0f, 2.0f);
                    // A zero row: the second, or past one stream the last (a second chunk that overflows
                    // after the first ran must leave the ids unwritten too).
                    const int64_t zero_row = M > cpu::kScreenRows ? M - 1 : 1;
                    if (M > 1 && trial % 3 == 1)
                        for (int64_t k = 0; k < K; ++k) x[zero_row * K + k] = 0.0f;
                    if (M > 2 && trial % 3 == 2)
                        std::copy(x.begin(), x.begin() + K, x.begin() + 2 * K);  // a repeated row
                    std::vector<int32_t> want(M), got(M, -7), through(M, -7);
                    for (int64_t m = 0; m < M; ++m) want[m] = argmax_of(x.data() + m * K, w.full);
                    const int64_t K2 = (K + 1) / 2;
                    std::vector<uint32_t> xp(M * K2, 0);
                    for (int64_t m = 0; m < M; ++m)
                        for (int64_t k = 0; k < K; ++k)
                            xp[m * K2 + k / 2] |= static_cast<uint32_t>(f32_to_bf16(x[m * K + k]))
                                                  << (16 * (k & 1));
                    const bool ran = screened_argmax(ctx(), xp.data(), M, w.screened, got.data());
                    // A zero row's outputs are all equal: beyond the candidate capacity the full pass runs.
                    const bool flat_row = M > 1 && trial % 3 == 1;
                    if (!flat_row || N <= 4096) {
                        EXPECT_EQ(ran, M <= kScreenMaxRows) << "N=" << N << " M=" << M << " trial=" << trial;
                    }
                    if (ran) {
                        EXPECT_EQ(got, want) << "N=" << N << " M=" << M << " trial=" << trial;
                    } else {
                        EXPECT_EQ(got, std::vector<int32_t>(M, -7))
                            << "N=" << N << " M=" << M << " trial=" << trial;
                    }
                    linear_argmax(ctx(), x.data(), M, w.screened, through.data(), true);
                    EXPECT_EQ(through, want) << "N=" << N << " M=" << M << " trial=" << trial;
                }
            }
        }
    });
}

// From cpu::kScreenAmxRows rows on the screen's integer sums run on AMX-INT8 tiles where the CPU has
// them, the k-quads past the last multiple of 16 on vpdpbusd: the kernel's per-panel bounds are bitwise
// those of vpdpbusd alone, for every row count of one stream (the fewer rows stay on vpdpbusd) and a K
// with both parts (K4 = 258: 256 + 2).
TEST(ArgmaxScreen, AmxTilesGiveTheVnniScreenBitForBit) {
    set_active_isa(cpu_isa());
    if (!set_amx_bf16(true) || !has_amx_int8()) {
        restore_default_kernels();
        GTEST_SKIP() << "no AMX-INT8 here";
    }
    const int64_t N = 1000, K = 1030;
    Screened w(random_vec(N * K, 77, -0.1f, 0.1f), N, K);
    const Int8Screen& s = *w.screened.screen;
    ASSERT_EQ(s.K4, 258);
    std::vector<uint32_t> xq(cpu::kScreenRows * s.K4);
    uint32_t seed = 5;
    for (auto& q : xq) q = seed = seed * 1664525u + 1013904223u;  // any unsigned bytes
    const int64_t ld = s.n_panels + 3;                            // a row stride past the panels' columns
    auto run = [&](int M) {
        std::vector<ScreenRow> r(M);
        for (int m = 0; m < M; ++m) r[m] = ScreenRow{1e-3f * (m + 1), 1e-4f, 1e-4f, 0.0f, 1e-30f};
        std::vector<float> bounds(2 * M * ld, NAN);
        cpu::avx512::screen_i8(xq.data(), M, s, r.data(), 0, s.n_panels, bounds.data(), ld);
        return bounds;
    };
    for (int M = 2; M <= cpu::kScreenRows; ++M) {
        set_amx_bf16(true);
        const std::vector<float> amx = run(M);
        set_amx_bf16(false);
        const std::vector<float> vnni = run(M);
        for (int m = 0; m < M; ++m)
            for (int64_t p = 0; p < s.n_panels; ++p) {
                const float lo = vnni[2 * m * ld + p], hi = vnni[(2 * m + 1) * ld + p];
                ASSERT_TRUE(std::isfinite(lo) && lo <= hi) << "M=" << M << " row " << m << " panel " << p;
                for (int64_t i : {2 * m * ld + p, (2 * m + 1) * ld + p})
                    ASSERT_EQ(std::memcmp(&amx[i], &vnni[i], sizeof(float)), 0)
                        << "M=" << M << " row " << m << " panel " << p;
            }
    }
    restore_default_kernels();
}

// The screen's stream is a stealable job: with the worker descheduled inside its claim (the test hook
// sleeps it), the caller takes the claim over and the ids are still the full pass's, for one row, the
// first AMX row count and a whole stream of rows.
TEST(ArgmaxScreen, StolenClaimsGiveTheFullPassIds) {
    set_global_threads(2);
    ThreadPool& pool = global_pool();
    const int64_t steals_before = pool.steals();
    on_screen_paths([&] {
        const int64_t N = 20000, K = 512;
        Screened w(random_vec(N * K, 91, -0.1f, 0.1f), N, K);
        for (int64_t M : {1, 4, 8})
            for (uint32_t trial = 0; trial < 2; ++trial) {
                const uint32_t seed = 700 + 10 * static_cast<uint32_t>(M) + trial;
                const std::vector<float> x = random_vec(M * K, seed, -2.0f, 2.0f);
                std::vector<int32_t> want(M), got(M, -7);
                for (int64_t m = 0; m < M; ++m) want[m] = argmax_of(x.data() + m * K, w.full);
                const int64_t K2 = K / 2;
                std::vector<uint32_t> xp(M * K2, 0);
                for (int64_t i = 0; i < M * K; ++i)
                    xp[i / 2] |= static_cast<uint32_t>(f32_to_bf16(x[i])) << (16 * (i & 1));
                {
                    ThreadPool::StealScope scope(pool);
                    pool.run([](int, int) {});  // the worker awake: it claims in the screen's stream
                    pool.delay_next_claim_for_test(1, 30);
                    ASSERT_TRUE(screened_argmax(ctx(), xp.data(), M, w.screened, got.data())) << "M=" << M;
                }
                EXPECT_EQ(got, want) << "M=" << M << " trial=" << trial;
            }
    });
    EXPECT_GE(pool.steals() - steals_before, 1) << "no claim was stolen";
    pool.delay_next_claim_for_test(1, 0);  // a hook the worker did not reach stays off for later tests
    set_global_threads(default_thread_count());
}

TEST(ArgmaxScreen, ExactAndNearTiesAreDecidedByTheExactKernel) {
    on_screen_paths([&] {
        const int64_t N = 30000, K = 96;
        auto wf = random_vec(N * K, 3, -0.05f, 0.05f);
        const auto x = random_vec(K, 4, 0.5f, 1.0f);  // positive: a row of large positive weights wins
        auto set_row = [&](int64_t n, float v) {
            for (int64_t k = 0; k < K; ++k) wf[n * K + k] = v;
        };
        // Exact ties in different panels and balanced chunks: the lowest column wins.
        set_row(20001, 0.5f);
        set_row(9, 0.5f);
        set_row(29999, 0.5f);
        {
            Screened w(wf, N, K);
            EXPECT_EQ(argmax_of(x.data(), w.full), 9);
            EXPECT_EQ(argmax_of(x.data(), w.screened), 9);
        }
        // A near tie: column 20001 larger by one bf16 ulp in one weight (far below the int8 resolution).
        wf[20001 * K + 17] = bf16_to_f32(static_cast<uint16_t>(f32_to_bf16(0.5f) + 1));
        {
            Screened w(wf, N, K);
            EXPECT_EQ(argmax_of(x.data(), w.full), 20001);
            EXPECT_EQ(argmax_of(x.data(), w.screened), 20001);
        }
    });
}

TEST(ArgmaxScreen, FlatZeroAndNonFiniteRowsStillGiveTheFullPassIds) {
    on_screen_paths([&] {
        // Every column equal: all are candidates, more than the screen keeps; it falls back (counted).
        const int64_t N = 20000, K = 16;
        std::vector<float> flat(N * K, 0.25f);
        Screened w(flat, N, K);
        auto x = random_vec(K, 9);
        const uint64_t before = fallback_count(OpId::ARGMAX);
        EXPECT_EQ(argmax_of(x.data(), w.screened), 0);
        EXPECT_EQ(fallback_count(OpId::ARGMAX), before + 1);
        // A zero row: every output is 0, the first column wins.
        Screened r(random_vec(300 * K, 10), 300, K);
        std::vector<float> zero(K, 0.0f);
        EXPECT_EQ(argmax_of(zero.data(), r.screened), argmax_of(zero.data(), r.full));
        EXPECT_EQ(argmax_of(zero.data(), r.screened), 0);
        // A row of subnormal size: its quantisation scale has no finite reciprocal (the screen divides).
        std::vector<float> tiny = random_vec(K, 12, -1e-38f, 1e-38f);
        EXPECT_EQ(argmax_of(tiny.data(), r.screened), argmax_of(tiny.data(), r.full));
        // A non-finite row is left to the full pass (whose NaN outputs the screen cannot bound).
        std::vector<float> bad(K, 1.0f);
        bad[3] = INFINITY;
        int32_t id = -7;
        uint32_t xp[8];
        for (int64_t k = 0; k < K; k += 2)
            xp[k / 2] = f32_to_bf16(bad[k]) | static_cast<uint32_t>(f32_to_bf16(bad[k + 1])) << 16;
        EXPECT_FALSE(screened_argmax(ctx(), xp, 1, r.screened, &id));
        EXPECT_EQ(id, -7);
    });
}

TEST(ArgmaxScreen, NotBuiltForNonFiniteWeightsAndOffWhenForcedToTheReference) {
    std::vector<float> wf = random_vec(64 * 8, 11);
    wf[5] = NAN;
    std::vector<uint16_t> wb(64 * 8);
    convert_from_f32(wf.data(), DType::BF16, wb.data(), wb.size());
    const LinearWeight lw = make_linear(ctx(), {TensorView::contiguous(wb.data(), DType::BF16, {64, 8})});
    EXPECT_EQ(make_int8_screen(ctx(), lw.packed), nullptr);
    force_reference(OpId::ARGMAX, true);
    EXPECT_FALSE(argmax_screen_available());
    force_reference(OpId::ARGMAX, false);
}

}  // namespace
