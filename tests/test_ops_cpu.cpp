// Every op of the op API on every ISA path against the scalar reference path, on odd shapes.
// Tolerances: f32 mode 2e-5 relative to the values' scale (summation order only); bf16 mode allows one
// bf16 ulp of the rounded outputs (2^-8 relative).
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "ops/cpu/kernels.h"
#include "ops/dispatch.h"
#include "ops/layers.h"
#include "ops/ref/ref_ops.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

// Runs f with all ops on the reference, then on each fast ISA; compares outputs.
template <typename F>
void compare_paths(F f, float atol, float rtol, const char* what) {
    force_reference_all(true);
    std::vector<float> want = f();
    force_reference_all(false);
    for (Isa isa : fast_isas()) {
        set_active_isa(isa);
        std::vector<float> got = f();
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i]))
                << what << " " << isa_name(isa) << " i=" << i;
    }
    set_active_isa(cpu_isa());
}

TEST(OpsCpu, NormsSwigluArgmax) {
    for (int64_t n : {1, 7, 16, 33, 256, 1000}) {
        for (bool bf16 : {false, true}) {
            const float rt = bf16 ? 8e-3f : 2e-5f;
            auto x = random_vec(3 * n, n), d = random_vec(3 * n, n + 1), w = random_vec(n, n + 2, 0.5f, 1.5f);
            compare_paths(
                [&] {
                    std::vector<float> y(3 * n);
                    ops::rms_norm(ctx(), x.data(), 3, n, w.data(), 1e-6f, y.data(), bf16);
                    return y;
                },
                1e-6f, rt, "rms_norm");
            compare_paths(
                [&] {
                    std::vector<float> xx = x, y(3 * n);
                    ops::add_rms_norm(ctx(), xx.data(), d.data(), 3, n, w.data(), 1e-6f, y.data(), bf16);
                    y.insert(y.end(), xx.begin(), xx.end());
                    return y;
                },
                1e-6f, rt, "add_rms_norm");
            compare_paths(
                [&] {
                    std::vector<float> y(2 * n);
                    ops::swiglu(ctx(), x.data(), 1, n, y.data(), bf16);  // gate = x[:n], up = x[n:2n]
                    ops::swiglu(ctx(), x.data() + n, 1, n, y.data() + n, bf16);
                    return y;
                },
                1e-6f, rt, "swiglu");
        }
        auto v = random_vec(n, 5 * n);
        compare_paths([&] { return std::vector<float>{static_cast<float>(ops::argmax(ctx(), v.data(), n))}; },
                      0, 0, "argmax");
    }
}

TEST(OpsCpu, ArgmaxOfAVocabularyRowSplitOverThreads) {
    for (int64_t n : {65536 + 7, 248320}) {
        auto v = random_vec(n, static_cast<uint32_t>(n));
        v[n - 3] = 5.0f;  // a tie between the two thread ranges: the lowest index wins
        v[11] = 5.0f;
        compare_paths([&] { return std::vector<float>{static_cast<float>(ops::argmax(ctx(), v.data(), n))}; },
                      0, 0, "argmax");
        EXPECT_EQ(ops::argmax(ctx(), v.data(), n), 11);
    }
}

TEST(OpsCpu, QkNormRope) {
    for (int64_t D : {16, 64, 100, 256}) {
        const int64_t N = 5, H = 3, rot = std::max<int64_t>(2, (D / 4) & ~int64_t(1));
        auto x = random_vec(N * H * D, D), w = random_vec(D, D + 1, 0.5f, 1.5f);
        const int64_t pos[5] = {0, 1, 7, 100, 4095};
        for (bool bf16 : {false, true})
            compare_paths(
                [&] {
                    std::vector<float> y = x;
                    ops::qk_norm_rope(ctx(), y.data(), H * D, N, {{0, H, D, w.data()}}, D, 1e-6f, rot, 1e7f,
                                      pos, bf16);
                    return y;
                },
                2e-6f, bf16 ? 8e-3f : 2e-5f, "qk_norm_rope");
    }
}

// The attention layer's layout: per token H query heads each followed by its gate (stride 2D), then Hkv
// key heads (stride D), normed with their own weights in one call; the gates are not touched.
TEST(OpsCpu, QkNormRopeOfTwoHeadSets) {
    const int64_t N = 6, H = 4, Hkv = 2, D = 64, rot = 16, ld = H * 2 * D + Hkv * D;
    const auto x = random_vec(N * ld, 9), wq = random_vec(D, 10, 0.5f, 1.5f),
               wk = random_vec(D, 11, 0.5f, 1.5f);
    const int64_t pos[N] = {0, 3, 4, 5, 900, 70000};
    for (bool bf16 : {false, true})
        compare_paths(
            [&] {
                std::vector<float> y = x;
                ops::qk_norm_rope(ctx(), y.data(), ld, N,
                                  {{0, H, 2 * D, wq.data()}, {H * 2 * D, Hkv, D, wk.data()}}, D, 1e-6f, rot,
                                  1e7f, pos, bf16);
                for (int64_t t = 0; t < N; ++t)
                    for (int64_t h = 0; h < H; ++h)  // the gates stay as they were
                        for (int64_t d = 0; d < D; ++d)
                            EXPECT_EQ(y[t * ld + h * 2 * D + D + d], x[t * ld + h * 2 * D + D + d]);
                return y;
            },
            2e-6f, bf16 ? 8e-3f : 2e-5f, "qk_norm_rope");
}

struct GdnCase {
    std::vector<int64_t> lens;  // one sequence per entry
    int64_t Hk, r, Dk, Dv;
};

// Random inputs of one GDN mixer call for a case: projections, conv and gating weights, and nonzero
// initial states (continuing sequences).
struct GdnInputs {
    GdnCase c;
    int64_t Hv, KD, VD, CD, K = 4, ldp, N = 0;
    std::vector<float> proj, conv_w, conv_wT, negA, dtb, nw, conv0, ssm0;

    GdnInputs(const GdnCase& cs, uint32_t seed) : c(cs) {
        Hv = c.Hk * c.r, KD = c.Hk * c.Dk, VD = Hv * c.Dv, CD = 2 * KD + VD, ldp = CD + VD + 2 * Hv;
        for (int64_t l : c.lens) N += l;
        proj = random_vec(N * ldp, seed + static_cast<uint32_t>(N + CD));
        conv_w = random_vec(CD * K, seed + 3, -0.5f, 0.5f);
        conv_wT.resize(K * CD);
        for (int64_t ch = 0; ch < CD; ++ch)
            for (int64_t j = 0; j < K; ++j) conv_wT[j * CD + ch] = conv_w[ch * K + j];
        negA = random_vec(Hv, seed + 4, -8.0f, -0.5f);
        dtb = random_vec(Hv, seed + 5, -4.0f, 0.0f);
        nw = random_vec(c.Dv, seed + 6, 0.8f, 1.2f);
        conv0 = random_vec(c.lens.size() * (K - 1) * CD, seed + 7);
        ssm0 = random_vec(c.lens.size() * Hv * c.Dk * c.Dv, seed + 8, -0.3f, 0.3f);
    }
    // The mixer over all sequences from copies of the initial states: out, then conv and ssm states.
    std::vector<float> run(bool bf16, bool staged_decode = false) const {
        std::vector<float> conv = conv0, ssm = ssm0, out(N * VD);
        std::vector<ops::GdnSeq> seqs;
        int64_t t0 = 0;
        for (size_t i = 0; i < c.lens.size(); ++i) {
            seqs.push_back(
                {t0, c.lens[i], conv.data() + i * (K - 1) * CD, ssm.data() + i * Hv * c.Dk * c.Dv});
            t0 += c.lens[i];
        }
        ops::GdnParams p{c.Hk,           Hv,          c.Dk,       c.Dv,      K,    1e-6f, conv_w.data(),
                         conv_wT.data(), negA.data(), dtb.data(), nw.data(), false};
        ops::Scratch sc;
        sc.gdn_staged_decode = staged_decode;
        ops::gdn_mixer(ctx(), proj.data(), ldp, seqs, p, out.data(), sc, bf16);
        out.insert(out.end(), conv.begin(), conv.end());
        out.insert(out.end(), ssm.begin(), ssm.end());
        return out;
    }
};

TEST(OpsCpu, GdnMixerDecodeAndPrefill) {
    const GdnCase cases[] = {{{1}, 2, 2, 16, 16},     {{1, 1, 1}, 2, 1, 64, 64},  {{7}, 1, 3, 12, 20},
                             {{150}, 2, 2, 64, 64},   {{65, 1, 3}, 2, 2, 32, 48}, {{300}, 1, 1, 128, 128},
                             {{2, 129}, 2, 3, 16, 40}};
    for (const GdnCase& c : cases) {
        const GdnInputs in(c, 0);
        // Both prefill forms of the fast delta rule (the chunked one on every full 64-token chunk).
        for (DeltaRuleForm form : {DeltaRuleForm::RECURRENT, DeltaRuleForm::CHUNKED})
            for (bool bf16 : {false, true}) {
                SCOPED_TRACE(delta_rule_form_name(form));
                set_delta_rule_form(form);
                const uint64_t fallbacks = fallback_count(OpId::GDN_RULE);
                compare_paths([&] { return in.run(bf16); }, 1e-4f, bf16 ? 1.6e-2f : 1e-4f, "gdn_mixer");
                // Forcing the chunked form on head dims it cannot take is counted, never silent.
                const bool unsupported = c.Dk % 16 != 0 || c.Dv % 16 != 0;
                bool long_seq = false;
                for (int64_t l : c.lens) long_seq |= l >= cpu::kGdnChunk;
                EXPECT_EQ(fallback_count(OpId::GDN_RULE) > fallbacks,
                          form == DeltaRuleForm::CHUNKED && unsupported && long_seq);
                set_delta_rule_form(DeltaRuleForm::AUTO);
            }
    }
}

// Decode steps run fused per key head; the staged path (conv, prep, rule, norm over all heads) must give
// bitwise the same outputs and states, on every ISA, in f32 and bf16 mode.
TEST(OpsCpu, GdnFusedDecodeEqualsStaged) {
    const GdnCase cases[] = {
        {{1}, 2, 2, 16, 16}, {{1, 1, 1}, 2, 1, 64, 64}, {{1, 1}, 2, 3, 12, 20}, {{1}, 16, 1, 128, 128}};
    for (const GdnCase& c : cases) {
        const GdnInputs in(c, 20);
        for (Isa isa : fast_isas())
            for (bool bf16 : {false, true}) {
                set_active_isa(isa);
                EXPECT_EQ(in.run(bf16, false), in.run(bf16, true))
                    << isa_name(isa) << (bf16 ? " bf16" : " f32") << " Dk=" << c.Dk;
            }
        set_active_isa(cpu_isa());
    }
}

// Speculative verification: a sequence with keep_state gives every token's output bitwise as decode
// steps would and leaves its state untouched; gdn_commit of its first n tokens (from the staged rows, in
// place or into another state) then leaves bitwise the state n decode steps leave. Every fast ISA and the
// reference, f32 and bf16 mode, several sequences in one call.
TEST(OpsCpu, GdnVerifyKeepsTheStateAndCommitEqualsDecodeSteps) {
    const GdnCase cases[] = {{{4, 3}, 2, 2, 16, 16}, {{5}, 1, 3, 12, 20}, {{2, 4, 1}, 16, 1, 128, 128}};
    for (const GdnCase& c : cases) {
        const GdnInputs in(c, 30);
        const int64_t Hv = in.Hv, CD = in.CD, VD = in.VD, K = in.K;
        const int64_t conv_n = (K - 1) * CD, ssm_n = Hv * c.Dk * c.Dv;
        const size_t S = c.lens.size();
        ops::GdnParams p{c.Hk,
                         Hv,
                         c.Dk,
                         c.Dv,
                         K,
                         1e-6f,
                         in.conv_w.data(),
                         in.conv_wT.data(),
                         in.negA.data(),
                         in.dtb.data(),
                         in.nw.data(),
                         false};
        std::vector<int64_t> t0(S);
        for (size_t i = 1; i < S; ++i) t0[i] = t0[i - 1] + c.lens[i - 1];
        auto conv_of = [&](std::vector<float>& v, size_t i) { return v.data() + i * conv_n; };
        auto ssm_of = [&](std::vector<float>& v, size_t i) { return v.data() + i * ssm_n; };
        for (int path = 0; path <= static_cast<int>(fast_isas().size()); ++path) {
            const bool reference = path == 0;
            force_reference_all(reference);
            if (!reference) set_active_isa(fast_isas()[path - 1]);
            for (bool bf16 : {false, true}) {
                SCOPED_TRACE(std::string(reference ? "ref" : isa_name(fast_isas()[path - 1])) +
                             (bf16 ? " bf16" : " f32"));
                ops::Scratch sc;
                // Decode steps, one token per call: outputs and the state after every token.
                std::vector<float> conv = in.conv0, ssm = in.ssm0, want_out(in.N * VD);
                std::vector<std::vector<float>> conv_after(in.N), ssm_after(in.N);
                for (size_t i = 0; i < S; ++i)
                    for (int64_t t = 0; t < c.lens[i]; ++t) {
                        std::vector<ops::GdnSeq> one{{t0[i] + t, 1, conv_of(conv, i), ssm_of(ssm, i)}};
                        ops::gdn_mixer(ctx(), in.proj.data(), in.ldp, one, p, want_out.data(), sc, bf16);
                        conv_after[t0[i] + t].assign(conv_of(conv, i), conv_of(conv, i) + conv_n);
                        ssm_after[t0[i] + t].assign(ssm_of(ssm, i), ssm_of(ssm, i) + ssm_n);
                    }
                // The verification of all tokens at once.
                std::vector<float> vconv = in.conv0, vssm = in.ssm0, got_out(in.N * VD);
                std::vector<ops::GdnSeq> seqs;
                for (size_t i = 0; i < S; ++i) {
                    seqs.push_back({t0[i], c.lens[i], conv_of(vconv, i), ssm_of(vssm, i)});
                    seqs.back().keep_state = true;
                }
                ops::gdn_mixer(ctx(), in.proj.data(), in.ldp, seqs, p, got_out.data(), sc, bf16);
                EXPECT_EQ(got_out, want_out);
                EXPECT_EQ(vconv, in.conv0);
                EXPECT_EQ(vssm, in.ssm0);
                // Commits of n_i = 1 + i % len tokens: sequence 0 in place, the others into fresh states.
                std::vector<float> fconv(S * conv_n, -1.0f), fssm(S * ssm_n, -1.0f);
                std::vector<float*> outs;
                outs.reserve(2 * in.N);
                std::vector<ops::GdnSeq> cs;
                for (size_t i = 0; i < S; ++i) {
                    const int64_t n = 1 + static_cast<int64_t>(i) % c.lens[i];
                    float* to_conv = i == 0 ? conv_of(vconv, i) : conv_of(fconv, i);
                    float* to_ssm = i == 0 ? ssm_of(vssm, i) : ssm_of(fssm, i);
                    ops::GdnSeq g{t0[i], n, conv_of(vconv, i), ssm_of(vssm, i)};
                    const size_t o = outs.size();
                    outs.insert(outs.end(), n, to_conv);
                    outs.insert(outs.end(), n, to_ssm);
                    g.conv_out = outs.data() + o;
                    g.ssm_out = outs.data() + o + n;
                    cs.push_back(g);
                }
                // A second layer (the same rows, its own states, committed in place) in the same pass:
                // gdn_commit runs all layers' units at once.
                std::vector<float> conv2 = in.conv0, ssm2 = in.ssm0;
                std::vector<float*> outs2;
                outs2.reserve(2 * in.N);
                std::vector<ops::GdnSeq> cs2;
                for (size_t i = 0; i < S; ++i) {
                    const int64_t n = cs[i].T;
                    ops::GdnSeq g{t0[i], n, conv_of(conv2, i), ssm_of(ssm2, i)};
                    const size_t o = outs2.size();
                    outs2.insert(outs2.end(), n, conv_of(conv2, i));
                    outs2.insert(outs2.end(), n, ssm_of(ssm2, i));
                    g.conv_out = outs2.data() + o;
                    g.ssm_out = outs2.data() + o + n;
                    cs2.push_back(g);
                }
                ops::gdn_commit(
                    ctx(), {{in.proj.data(), in.ldp, &cs, &p}, {in.proj.data(), in.ldp, &cs2, &p}}, sc, bf16);
                for (size_t i = 0; i < S; ++i) {
                    const int64_t last = t0[i] + cs[i].T - 1;
                    float* cv = i == 0 ? conv_of(vconv, i) : conv_of(fconv, i);
                    float* sv = i == 0 ? ssm_of(vssm, i) : ssm_of(fssm, i);
                    EXPECT_EQ(std::vector<float>(cv, cv + conv_n), conv_after[last]) << "sequence " << i;
                    EXPECT_EQ(std::vector<float>(sv, sv + ssm_n), ssm_after[last]) << "sequence " << i;
                    EXPECT_EQ(std::vector<float>(conv_of(conv2, i), conv_of(conv2, i) + conv_n),
                              conv_after[last]);
                    EXPECT_EQ(std::vector<float>(ssm_of(ssm2, i), ssm_of(ssm2, i) + ssm_n), ssm_after[last]);
                    if (i > 0) {  // the source of a commit into another state is left as it was
                        EXPECT_EQ(std::vector<float>(conv_of(vconv, i), conv_of(vconv, i) + conv_n),
                                  std::vector<float>(in.conv0.begin() + i * conv_n,
                                                     in.conv0.begin() + (i + 1) * conv_n));
                    }
                }
            }
        }
        force_reference_all(false);
        set_active_isa(cpu_isa());
    }
}

// The chunked-form kernel on its own, chunk after chunk with a carried state, against the reference's
// chunked and recurrent forms (decays from ~1 down to e^-15 per token, so both the long-memory and the
// underflowing ends of exp(G_i - G_j) are exercised).
TEST(OpsCpu, GdnChunkKernelMatchesReferenceForms) {
    struct Dims {
        int64_t Dk, Dv;
    };
    for (Dims d : {Dims{16, 16}, Dims{32, 48}, Dims{128, 128}}) {
        const int64_t C = cpu::kGdnChunk, T = 3 * C;
        auto q = random_vec(T * d.Dk, 11), k = random_vec(T * d.Dk, 12), v = random_vec(T * d.Dv, 13);
        for (int64_t t = 0; t < T; ++t) {  // L2-normalised q, k as the model feeds them (q also scaled)
            ref::l2_norm(q.data() + t * d.Dk, 1, d.Dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(d.Dk)));
            ref::l2_norm(k.data() + t * d.Dk, 1, d.Dk, 1e-6f, 1.0f);
        }
        auto g = random_vec(T, 14, -1.0f, 0.0f), beta = random_vec(T, 15, 0.0f, 1.0f);
        for (int64_t t = 0; t < T; t += 17) g[t] = -15.0f;
        const auto S0 = random_vec(d.Dk * d.Dv, 16, -0.5f, 0.5f);
        std::vector<float> S_rec = S0, S_chk = S0, o_rec(T * d.Dv), o_chk(T * d.Dv);
        ref::gated_delta_rule_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), T, 1, 1, d.Dk,
                                        d.Dv, S_rec.data(), o_rec.data());
        ref::gated_delta_rule_chunked(q.data(), k.data(), v.data(), g.data(), beta.data(), T, 1, 1, d.Dk,
                                      d.Dv, S_chk.data(), o_chk.data());
        for (Isa isa : fast_isas()) {
            std::vector<float> S = S0, o(T * d.Dv);
            for (int64_t c0 = 0; c0 < T; c0 += C) {
                const bool avx512 = isa == Isa::AVX512;
                std::vector<float> scratch((avx512 ? cpu::avx512::gdn_chunk_scratch_floats
                                                   : cpu::avx2::gdn_chunk_scratch_floats)(d.Dk, d.Dv));
                (avx512 ? cpu::avx512::gdn_chunk : cpu::avx2::gdn_chunk)(
                    S.data(), q.data() + c0 * d.Dk, k.data() + c0 * d.Dk, v.data() + c0 * d.Dv, g.data() + c0,
                    beta.data() + c0, d.Dk, d.Dv, o.data() + c0 * d.Dv, scratch.data());
            }
            for (auto* want : {&o_chk, &o_rec})
                for (int64_t i = 0; i < T * d.Dv; ++i)
                    ASSERT_NEAR(o[i], (*want)[i], 2e-5f + 2e-5f * std::abs((*want)[i]))
                        << isa_name(isa) << " Dk=" << d.Dk << " out " << i;
            for (auto* want : {&S_chk, &S_rec})
                for (int64_t i = 0; i < d.Dk * d.Dv; ++i)
                    ASSERT_NEAR(S[i], (*want)[i], 2e-5f + 2e-5f * std::abs((*want)[i]))
                        << isa_name(isa) << " Dk=" << d.Dk << " state " << i;
        }
    }
}

// K/V rows [2 * nk, row] (keys then values) in a paged arena: blocks of 4 rows, scattered by the block
// table `step` x b mod nb (a permutation for the steps used), in f32 and in bf16.
struct PagedKv {
    static constexpr int64_t bs = 4;
    int64_t row;
    std::vector<int32_t> table;
    std::vector<float> k, v;
    std::vector<uint16_t> k16, v16;
    PagedKv(const std::vector<float>& kv, int64_t nk, int64_t row_, int64_t step) : row(row_) {
        const int64_t nb = (nk + bs - 1) / bs;
        table.resize(nb);
        for (int64_t b = 0; b < nb; ++b) table[b] = static_cast<int32_t>((b * step) % nb);
        k.resize(nb * bs * row);
        v.resize(nb * bs * row);
        for (int64_t j = 0; j < nk; ++j) {
            const int64_t r = table[j / bs] * bs + j % bs;
            std::copy(kv.begin() + j * row, kv.begin() + (j + 1) * row, k.begin() + r * row);
            std::copy(kv.begin() + (nk + j) * row, kv.begin() + (nk + j + 1) * row, v.begin() + r * row);
        }
        k16.resize(k.size());
        v16.resize(v.size());
        convert_from_f32(k.data(), DType::BF16, k16.data(), k.size());
        convert_from_f32(v.data(), DType::BF16, v16.data(), v.size());
    }
    cpu::KvRows rows(bool bf16) const {
        return bf16 ? cpu::KvRows{k16.data(), v16.data(), row, table.data(), bs, true}
                    : cpu::KvRows{k.data(), v.data(), row, table.data(), bs, false};
    }
};

TEST(OpsCpu, AttentionCausalGqaPaged) {
    for (auto [T, n_past, Hq, Hkv, D] : std::vector<std::array<int64_t, 5>>{
             {1, 0, 4, 2, 16},
             {1, 100, 8, 2, 64},
             {5, 0, 4, 4, 32},
             {70, 3, 6, 2, 24},
             {3, 130, 2, 1, 256},
             {37, 21, 8, 2, 256},
             {9, 50, 10, 2, 32},
             {4, 17, 7, 1, 128},  // GQA groups of 4, 5, 7 (head blocks + tails)
             {1, 700, 8, 2, 64},
             {1, 2000, 4, 1, 256},
             {1, 1500, 6, 2, 32},
             {1, 300, 6, 2, 24}}) {  // long decodes: key ranges merged
        const int64_t nk = n_past + T, row = Hkv * D;
        auto q = random_vec(T * 2 * Hq * D, 9 + T), kv = random_vec(2 * nk * row, 10 + nk);
        for (float& x : kv) x = round_bf16(x);  // bf16 values, so the f32 and bf16 caches hold the same keys
        const PagedKv paged(kv, nk, row, 5);
        auto run = [&](bool bf16_kv) {
            std::vector<float> out(T * Hq * D);
            ops::Scratch sc;
            const cpu::KvRows rows = paged.rows(bf16_kv);
            // q and gate interleaved per token: [q (Hq*D) | gate (Hq*D)]
            ops::attention(ctx(), q.data(), q.data() + Hq * D, 2 * Hq * D, {{0, T, n_past, rows}}, Hq, Hkv, D,
                           out.data(), sc, false);
            return out;
        };
        const std::string what = "attention T=" + std::to_string(T) + " n_past=" + std::to_string(n_past) +
                                 " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) +
                                 " D=" + std::to_string(D);
        for (bool bf16_kv : {false, true})
            compare_paths([&] { return run(bf16_kv); }, 2e-5f, 2e-4f, what.c_str());
        // A bf16 cache is read exactly: the same outputs as the f32 cache holding the same values.
        for (Isa isa : fast_isas()) {
            set_active_isa(isa);
            EXPECT_EQ(run(true), run(false)) << isa_name(isa) << " T=" << T << " D=" << D;
        }
        set_active_isa(cpu_isa());
    }
}

// The bf16-mode prefill on each engine the CPU has (AMX tiles, vdpbf16ps; rows past 256 keys, the first
// ones stay on the f32 kernel: every case here crosses that line or starts past it): Q, K, V and the
// probabilities in bf16, every product and sum in f32. Against the f32 reference: |error| <= 3e-3
// (measured <= 9.3e-4 on AMX, <= 4.6e-4 on vdpbf16ps, outputs O(0.7); bf16 keeps 8 bits, so the scores
// are off by ~2^-9 of |q||k| and the probabilities by 2^-9 each). And batch invariance, bitwise: a row
// gives the same output whether its sequence is prefilled in one chunk or two (the second with the first
// as past keys), as the prefix cache needs (one-token rows are decode steps: the f32 decode kernel, as
// before).
TEST(OpsCpu, AttentionPrefillBf16) {
    if (!has_bf16_dot()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
    const bool amx_before = has_amx_bf16();
    std::vector<bool> engines = {false};  // uses AMX
    if (cpu_has_amx_bf16()) engines.push_back(true);
    for (bool amx : engines)
        for (auto [T, n_past, Hq, Hkv, D] : std::vector<std::array<int64_t, 5>>{
                 {2, 255, 4, 2, 32},
                 {7, 300, 4, 2, 32},
                 {70, 203, 8, 2, 64},
                 {37, 241, 8, 2, 256},
                 {9, 550, 10, 2, 32},
                 {33, 250, 6, 1, 64},
                 {100, 260, 14, 2, 32},
                 {5, 400, 2, 2, 256},
                 {64, 287, 8, 2, 256},  // groups 1-7
                 {40, 700, 4, 1, 96},
                 {130, 200, 2, 1, 160}}) {  // D with a 32-dim tail; chunks ending mid-block
            const int64_t nk = n_past + T, row = Hkv * D;
            auto q = random_vec(T * 2 * Hq * D, 19 + T), kv = random_vec(2 * nk * row, 20 + nk);
            for (float& x : kv) x = round_bf16(x);
            const PagedKv paged(kv, nk, row, 7);
            const std::string what = std::string(amx ? "amx" : "vdpbf16ps") + " T=" + std::to_string(T) +
                                     " n_past=" + std::to_string(n_past) + " Hq=" + std::to_string(Hq) +
                                     " Hkv=" + std::to_string(Hkv) + " D=" + std::to_string(D);
            set_amx_bf16(amx);
            // seqs of (t0, T, n_past) over the same keys; bf16 mode unless the reference is forced.
            auto run = [&](bool bf16_kv, const std::vector<std::array<int64_t, 3>>& parts) {
                const cpu::KvRows rows = paged.rows(bf16_kv);
                std::vector<ops::AttnSeq> seqs;
                for (const auto& pt : parts) seqs.push_back({pt[0], pt[1], pt[2], rows});
                std::vector<float> out(T * Hq * D, NAN);
                ops::Scratch sc;
                ops::attention(ctx(), q.data(), q.data() + Hq * D, 2 * Hq * D, seqs, Hq, Hkv, D, out.data(),
                               sc, true);
                return out;
            };
            force_reference(OpId::ATTENTION, true);
            const std::vector<float> want = run(false, {{0, T, n_past}});
            force_reference(OpId::ATTENTION, false);
            ASSERT_TRUE(ops::uses_bf16_attention(Hq, Hkv, D, true)) << what;
            const std::vector<float> got = run(false, {{0, T, n_past}});
            float max_err = 0.0f, max_out = 0.0f;
            for (size_t i = 0; i < want.size(); ++i) {
                ASSERT_NEAR(got[i], want[i], 3e-3f) << what << " i=" << i;
                max_err = std::max(max_err, std::abs(got[i] - want[i]));
                max_out = std::max(max_out, std::abs(want[i]));
            }
            std::printf("bf16 attention %s: max |error| %.2e (max |out| %.2f)\n", what.c_str(), max_err,
                        max_out);
            EXPECT_EQ(run(true, {{0, T, n_past}}), got) << what << ": a bf16 cache holding the same values";
            const int64_t split =
                T / 2;  // both parts prefill chunks (a one-token chunk takes the decode kernel)
            if (split >= 2 && T - split >= 2) {
                const std::vector<float> two =
                    run(false, {{0, split, n_past}, {split, T - split, n_past + split}});
                for (size_t i = 0; i < got.size(); ++i)
                    ASSERT_EQ(two[i], got[i]) << what << " split at " << split << " i=" << i;
            }
        }
    set_amx_bf16(amx_before);
    // A head size the bf16 kernels do not take stays on f32 FMA, and says so (counted, logged once).
    const int64_t Hq = 4, Hkv = 2, D = 24, T = 4, n_past = 300, nk = n_past + T;
    ASSERT_FALSE(ops::uses_bf16_attention(Hq, Hkv, D, true));
    auto q = random_vec(T * 2 * Hq * D, 3), kv = random_vec(2 * nk * Hkv * D, 4);
    const PagedKv paged(kv, nk, Hkv * D, 5);
    std::vector<float> out(T * Hq * D);
    ops::Scratch sc;
    const uint64_t before = fallback_count(OpId::ATTENTION);
    ops::attention(ctx(), q.data(), q.data() + Hq * D, 2 * Hq * D, {{0, T, n_past, paged.rows(false)}}, Hq,
                   Hkv, D, out.data(), sc, true);
    EXPECT_EQ(fallback_count(OpId::ATTENTION), before + 1);
}

// A decode step of several sequences (different lengths, paged, one long enough to be split over key
// ranges) in one call, against the reference path.
TEST(OpsCpu, AttentionDecodeBatch) {
    const int64_t Hq = 8, Hkv = 2, D = 64, row = Hkv * D, bs = 16;
    const std::vector<int64_t> n_past = {0, 37, 1200, 5};
    std::vector<std::vector<float>> k(n_past.size()), v(n_past.size());
    std::vector<std::vector<int32_t>> tables(n_past.size());
    int64_t total_blocks = 0;
    for (int64_t np : n_past) total_blocks += (np + 1 + bs - 1) / bs;
    std::vector<float> arena_k(total_blocks * bs * row), arena_v(total_blocks * bs * row);
    auto kv = random_vec(arena_k.size() + arena_v.size(), 31);
    std::copy(kv.begin(), kv.begin() + arena_k.size(), arena_k.begin());
    std::copy(kv.begin() + arena_k.size(), kv.end(), arena_v.begin());
    int32_t next_block = static_cast<int32_t>(total_blocks) - 1;  // hand out blocks from the end: scattered
    for (size_t i = 0; i < n_past.size(); ++i)
        for (int64_t b = 0; b < (n_past[i] + 1 + bs - 1) / bs; ++b) tables[i].push_back(next_block--);
    const int64_t N = static_cast<int64_t>(n_past.size());
    auto q = random_vec(N * 2 * Hq * D, 32);
    for (bool bf16_kv : {false, true}) {
        std::vector<uint16_t> k16(arena_k.size()), v16(arena_v.size());
        std::vector<float> kf = arena_k, vf = arena_v;
        for (float& x : kf) x = round_bf16(x);
        for (float& x : vf) x = round_bf16(x);
        convert_from_f32(kf.data(), DType::BF16, k16.data(), kf.size());
        convert_from_f32(vf.data(), DType::BF16, v16.data(), vf.size());
        compare_paths(
            [&] {
                std::vector<ops::AttnSeq> seqs;
                for (int64_t i = 0; i < N; ++i)
                    seqs.push_back(
                        {i, 1, n_past[i],
                         bf16_kv ? cpu::KvRows{k16.data(), v16.data(), row, tables[i].data(), bs, true}
                                 : cpu::KvRows{kf.data(), vf.data(), row, tables[i].data(), bs, false}});
                std::vector<float> out(N * Hq * D);
                ops::Scratch sc;
                ops::attention(ctx(), q.data(), q.data() + Hq * D, 2 * Hq * D, seqs, Hq, Hkv, D, out.data(),
                               sc, false);
                return out;
            },
            2e-5f, 2e-4f, bf16_kv ? "decode batch, bf16 KV" : "decode batch");
    }
}

// A key's score has the same bits whether the kernel sums it beside three other keys (the 4-key score
// pass, whose 16 sums share one shuffle tree on AVX-512) or alone (a tile's tail keys): decode over 5 keys
// (keys 0-3 in the 4-key pass, key 4 alone) against the same 5 keys followed by 3 whose scores are so
// low that their weights vanish beside the others' (key 4 then in the 4-key pass).
TEST(OpsCpu, AttentionScoreOfAKeyDoesNotDependOnItsNeighbours) {
    for (auto [Hq, Hkv, D] :
         std::vector<std::array<int64_t, 3>>{{4, 1, 256}, {8, 2, 64}, {16, 2, 128}, {4, 1, 32}}) {
        const int64_t row = Hkv * D, n_small = 5, n_big = 8;
        const auto q =
            random_vec(2 * Hq * D, 41, 0.0f, 1.0f);  // positive: the keys of -100 score far below 0
        auto kv = random_vec(2 * n_big * row, 42);
        for (int64_t j = n_small; j < n_big; ++j)
            for (int64_t c = 0; c < row; ++c) kv[j * row + c] = -100.0f;
        auto run = [&](int64_t n) {
            std::vector<float> k(kv.begin(), kv.begin() + n * row);
            std::vector<float> v(kv.begin() + n_big * row, kv.begin() + (n_big + n) * row);
            std::vector<float> out(Hq * D);
            ops::Scratch sc;
            ops::attention(ctx(), q.data(), q.data() + Hq * D, 2 * Hq * D,
                           {{0, 1, n - 1, cpu::KvRows{k.data(), v.data(), row, nullptr, 0, false}}}, Hq, Hkv,
                           D, out.data(), sc, false);
            return out;
        };
        for (Isa isa : fast_isas()) {
            set_active_isa(isa);
            EXPECT_EQ(run(n_small), run(n_big))
                << isa_name(isa) << " Hq=" << Hq << " Hkv=" << Hkv << " D=" << D;
        }
        set_active_isa(cpu_isa());
    }
}

TEST(Dispatch, EnvOverridesAreValidated) {
    setenv("GDN_FORCE_REFERENCE", "linear,nonsense", 1);
    Status st = configure_kernels_from_env();
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("unknown op 'nonsense'"), std::string::npos) << st.message();
    setenv("GDN_FORCE_REFERENCE", "attention", 1);
    ASSERT_TRUE(configure_kernels_from_env().is_ok());
    EXPECT_EQ(op_isa(OpId::ATTENTION), Isa::REF);
    EXPECT_NE(kernel_selection_report().find("forced by GDN_FORCE_REFERENCE"), std::string::npos);
    setenv("GDN_ISA", "sse9", 1);
    EXPECT_FALSE(configure_kernels_from_env().is_ok());
    unsetenv("GDN_ISA");
    setenv("GDN_DELTA_RULE", "wy", 1);
    st = configure_kernels_from_env();
    EXPECT_NE(st.message().find("GDN_DELTA_RULE='wy'"), std::string::npos) << st.message();
    setenv("GDN_DELTA_RULE", "chunked", 1);
    ASSERT_TRUE(configure_kernels_from_env().is_ok());
    EXPECT_EQ(delta_rule_form(), DeltaRuleForm::CHUNKED);
    EXPECT_NE(kernel_selection_report().find("forced by GDN_DELTA_RULE"), std::string::npos);
    unsetenv("GDN_DELTA_RULE");
    setenv("GDN_AMX", "yes", 1);
    st = configure_kernels_from_env();
    EXPECT_NE(st.message().find("GDN_AMX='yes' is not 0 or 1"), std::string::npos) << st.message();
    setenv("GDN_AMX", "0", 1);
    ASSERT_TRUE(configure_kernels_from_env().is_ok());
    EXPECT_FALSE(has_amx_bf16());
    if (cpu_has_amx_bf16()) {
        EXPECT_NE(kernel_selection_report().find("AMX off by GDN_AMX=0"), std::string::npos);
    }
    unsetenv("GDN_AMX");
    unsetenv("GDN_FORCE_REFERENCE");
    ASSERT_TRUE(configure_kernels_from_env().is_ok());
    EXPECT_EQ(op_isa(OpId::ATTENTION), cpu_isa());
    EXPECT_EQ(delta_rule_form(), DeltaRuleForm::AUTO);
    EXPECT_EQ(has_amx_bf16(), cpu_has_amx_bf16() && has_bf16_dot());
}

}  // namespace
