#include "ops/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/log.h"
#include "core/profiler.h"
#include "core/thread_pool.h"
#include "ops/cpu/attention_bf16.h"
#include "ops/cpu/kernels.h"
#include "ops/dispatch.h"
#include "ops/linear.h"
#include "ops/ref/ref_ops.h"
#include "ops/scratch_slots.h"

namespace gdn::ops {

float* Scratch::f32(const ExecContext& ctx, int slot, size_t n) {
    if (static_cast<int>(f_.size()) <= slot) f_.resize(slot + 1);
    if (f_[slot].size() < n * sizeof(float)) {
        // A worker whose claim was stolen may still read the old buffer (a linear's input).
        ctx.pool().wait_for_late_workers();
        f_[slot].allocate(n * sizeof(float), false);  // contents not kept
    }
    return f_[slot].as<float>();
}

namespace {

// A GDN prefill unit's blocks of kBlock tokens (gdn_mixer): its key head's q and k, one value head's v
// and output, the gates, and the chunked form's scratch.
struct GdnBlockBuffers {
    std::vector<float> q, k, v, o, gates, chunk;
};

// The kernel table of the ISA an op runs on (never REF: the reference path calls ops/ref).
const cpu::KernelTable& kernels(Isa isa) {
    return isa == Isa::AVX512 ? cpu::avx512_kernels() : cpu::avx2_kernels();
}

// Asks for the cache lines of x[0, n).
void prefetch_floats(const float* x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(x + i);
}

void round_inplace(float* x, int64_t n, bool bf16) {
    ref::round_activations(x, n, bf16);
}

}  // namespace

void embedding(const ExecContext& ctx, const TensorView& table, const PackedWeight* packed,
               const int32_t* ids, int64_t n, float* out, bool bf16) {
    GDN_PROFILE(ctx, "embedding");
    // A quantized table exists only packed: its dequantized rows are the reference too.
    if (packed && (op_isa(OpId::EMBEDDING) != Isa::REF || is_quantized(packed->format))) {
        const int64_t V = table.shape[0], H = table.shape[1];
        GDN_CHECK(packed->N == V && packed->K == H,
                  "embedding: packed table [%lld, %lld] is not [%lld, %lld]", (long long)packed->N,
                  (long long)packed->K, (long long)V, (long long)H);
        for (int64_t i = 0; i < n; ++i)
            GDN_CHECK(ids[i] >= 0 && ids[i] < V, "token id %d out of range [0, %lld)", ids[i], (long long)V);
        // A quantized row is dequantized value by value (~5 ns each): a prefill's rows go over the pool.
        const int64_t grain = is_quantized(packed->format) ? row_grain(16 * H) : row_grain(2 * H);
        ctx.pool().parallel_for(
            n,
            [&](int64_t i0, int64_t i1) {
                for (int64_t i = i0; i < i1; ++i) {
                    if (is_quantized(packed->format) && i + 2 < i1) quant::prefetch_row(*packed, ids[i + 2]);
                    unpack_row(*packed, ids[i], out + i * H);
                }
            },
            grain);
    } else {
        ref::embedding(table, ids, n, out);
    }
    round_inplace(out, n * table.shape[1], bf16);
}

void rms_norm(const ExecContext& ctx, const float* x, int64_t rows, int64_t n, const float* w, float eps,
              float* y, bool bf16) {
    GDN_PROFILE(ctx, "rms_norm");
    const Isa isa = op_isa(OpId::RMS_NORM);
    if (isa == Isa::REF) {
        ref::rms_norm(x, rows, n, w, eps, y);
        round_inplace(y, rows * n, bf16);
        return;
    }
    ctx.pool().parallel_for(
        rows,
        [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r)
                kernels(isa).rms_norm_row(x + r * n, n, w, eps, y + r * n, bf16);
        },
        row_grain(n));
}

void add_rms_norm(const ExecContext& ctx, float* x, const float* d, int64_t rows, int64_t n, const float* w,
                  float eps, float* y, bool bf16) {
    GDN_PROFILE(ctx, "add_rms_norm");
    const Isa isa = op_isa(OpId::RMS_NORM);
    if (isa == Isa::REF) {
        for (int64_t i = 0; i < rows * n; ++i) x[i] += d[i];
        round_inplace(x, rows * n, bf16);
        ref::rms_norm(x, rows, n, w, eps, y);
        round_inplace(y, rows * n, bf16);
        return;
    }
    ctx.pool().parallel_for(
        rows,
        [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r)
                kernels(isa).add_rms_norm_row(x + r * n, d + r * n, n, w, eps, y + r * n, bf16);
        },
        row_grain(2 * n));
}

void qk_norm_rope(const ExecContext& ctx, float* x, int64_t ld, int64_t N,
                  std::initializer_list<RopeHeads> heads, int64_t D, float eps, int64_t rot, float theta,
                  const int64_t* pos, bool bf16) {
    GDN_PROFILE(ctx, "qk_norm_rope");
    const Isa isa = op_isa(OpId::QK_NORM_ROPE);
    if (isa == Isa::REF) {
        for (int64_t t = 0; t < N; ++t)
            for (const RopeHeads& hs : heads)
                for (int64_t h = 0; h < hs.n; ++h) {
                    float* head = x + t * ld + hs.first + h * hs.stride;
                    ref::rms_norm(head, 1, D, hs.w, eps, head);
                    round_inplace(head, D, bf16);
                    ref::rope_neox(head, 1, 1, D, rot, &pos[t], theta, bf16);
                }
        return;
    }
    int64_t n_heads = 0;
    for (const RopeHeads& hs : heads) n_heads += hs.n;
    const int64_t half = rot / 2;
    float inv_freq[256];  // computed like the reference (f32)
    GDN_CHECK(half <= 256, "qk_norm_rope: rotary dims above 512");
    for (int64_t j = 0; j < half; ++j)
        inv_freq[j] = 1.0f / std::pow(theta, static_cast<float>(2 * j) / static_cast<float>(rot));
    ctx.pool().parallel_for(
        N,
        [&](int64_t t0, int64_t t1) {
            float cs[512];  // [cos(rot/2) | sin(rot/2)]
            for (int64_t t = t0; t < t1; ++t) {
                for (int64_t j = 0; j < half; ++j) {
                    const float ang = static_cast<float>(pos[t]) * inv_freq[j];
                    cs[j] = bf16 ? round_bf16(std::cos(ang)) : std::cos(ang);
                    cs[half + j] = bf16 ? round_bf16(std::sin(ang)) : std::sin(ang);
                }
                for (const RopeHeads& hs : heads)
                    for (int64_t h = 0; h < hs.n; ++h)
                        kernels(isa).norm_rope_head(x + t * ld + hs.first + h * hs.stride, D, hs.w, eps, rot,
                                                    cs, bf16);
            }
        },
        row_grain(n_heads * D +
                  16 * rot));  // the pow/cos/sin per rotary pair weigh about 32 floats of norm work
}

void swiglu(const ExecContext& ctx, const float* gu, int64_t M, int64_t I, float* out, bool bf16) {
    GDN_PROFILE(ctx, "swiglu");
    const Isa isa = op_isa(OpId::SWIGLU);
    ctx.pool().parallel_for(
        M,
        [&](int64_t m0, int64_t m1) {
            for (int64_t m = m0; m < m1; ++m) {
                if (isa == Isa::REF) {
                    ref::silu_mul(gu + m * 2 * I, gu + m * 2 * I + I, I, out + m * I, bf16);
                    round_inplace(out + m * I, I, bf16);
                } else {
                    kernels(isa).silu_mul(gu + m * 2 * I, gu + m * 2 * I + I, I, out + m * I, bf16);
                }
            }
        },
        row_grain(3 * I));
}

int64_t argmax(const ExecContext& ctx, const float* x, int64_t n) {
    GDN_PROFILE(ctx, "argmax");
    const Isa isa = op_isa(OpId::ARGMAX);
    if (isa == Isa::REF) return ref::argmax(x, n);
    ThreadPool& pool = ctx.pool();
    if (n < (1 << 16) || pool.size() == 1) return kernels(isa).argmax(x, n);
    // A vocabulary row (~1 MB) split over the threads; ties resolve to the lowest index as in the reference.
    int64_t best[64];
    const int nth = std::min(pool.size(), 64);
    pool.run([&](int ith, int nt) {
        if (ith >= nth) return;
        int64_t b, e;
        split_range(n, ith, std::min(nt, nth), &b, &e);
        best[ith] = b + kernels(isa).argmax(x + b, e - b);
    });
    int64_t r = best[0];
    for (int i = 1; i < nth; ++i)
        if (x[best[i]] > x[r]) r = best[i];
    return r;
}

// ------------------------------------------------------------------------------------------------
// GDN

namespace {

// Value head h's gates for one token, from its projection row's beta logits bt [Hv] (the decay inputs a
// follow at bt + Hv): log decay g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b), rounded to
// bf16 in bf16 mode. One source for the decode unit and the prefill blocks, whose bitwise equality
// depends on it.
struct GdnGates {
    float log_decay, beta;
};
GdnGates gdn_gates(const GdnParams& p, const float* bt, int64_t h, bool bf16) {
    const float bb = ref::sigmoid(bt[h]);
    return {p.neg_exp_A[h] * ref::softplus(bt[p.Hv + h] + p.dt_bias[h]), bf16 ? round_bf16(bb) : bb};
}

// The reference composition (the oracle): exactly the steps of model_spec.md §4.5, one op each.
void gdn_mixer_ref(const float* proj, int64_t ldp, const std::vector<GdnSeq>& seqs_in, const GdnParams& p,
                   float* out, bool bf16) {
    const int64_t KD = p.Hk * p.Dk, VD = p.Hv * p.Dv, CD = 2 * KD + VD;
    int64_t N = 0;
    for (const auto& s : seqs_in) N = std::max(N, s.t0 + s.T);
    // A sequence with per-token state outputs runs as T one-token sequences, each on a copy of the state
    // it follows (the recurrent form one token at a time is the definition; the copies are the outputs).
    // A verified sequence (keep_state) does the same on a private copy of its state, which is dropped.
    std::vector<GdnSeq> seqs;
    std::vector<const float*> src_conv, src_ssm;  // the state each expanded sequence starts from
    std::vector<std::vector<float>> private_states;
    private_states.reserve(2 * seqs_in.size());
    for (const GdnSeq& s : seqs_in) {
        if (!s.ssm_out && !s.keep_state) {
            seqs.push_back(s);
            src_conv.push_back(s.conv);
            src_ssm.push_back(s.ssm);
            continue;
        }
        float* own_conv = nullptr;
        float* own_ssm = nullptr;
        if (s.keep_state) {
            own_conv = private_states.emplace_back((p.K - 1) * CD).data();
            own_ssm = private_states.emplace_back(p.Hv * p.Dk * p.Dv).data();
        }
        for (int64_t t = 0; t < s.T; ++t) {
            float* conv = s.keep_state ? own_conv : s.conv_out[t];
            float* ssm = s.keep_state ? own_ssm : s.ssm_out[t];
            seqs.push_back({s.t0 + t, 1, conv, ssm});
            src_conv.push_back(t == 0 ? s.conv : s.keep_state ? own_conv : s.conv_out[t - 1]);
            src_ssm.push_back(t == 0 ? s.ssm : s.keep_state ? own_ssm : s.ssm_out[t - 1]);
        }
    }
    std::vector<float> core(N * VD), z(N * VD);
    for (size_t si = 0; si < seqs.size(); ++si) {
        const GdnSeq& s = seqs[si];
        if (src_conv[si] != s.conv) std::memcpy(s.conv, src_conv[si], (p.K - 1) * CD * sizeof(float));
        if (src_ssm[si] != s.ssm) std::memcpy(s.ssm, src_ssm[si], p.Hv * p.Dk * p.Dv * sizeof(float));
        const int64_t T = s.T;
        std::vector<float> x(T * CD), y(T * CD), a(T * p.Hv), b(T * p.Hv);
        for (int64_t t = 0; t < T; ++t) {
            const float* row = proj + (s.t0 + t) * ldp;
            std::memcpy(&x[t * CD], row, CD * sizeof(float));
            std::memcpy(&z[(s.t0 + t) * VD], row + CD, VD * sizeof(float));
            std::memcpy(&b[t * p.Hv], row + CD + VD, p.Hv * sizeof(float));
            std::memcpy(&a[t * p.Hv], row + CD + VD + p.Hv, p.Hv * sizeof(float));
        }
        ref::causal_conv1d(x.data(), T, CD, p.conv_w, p.K, s.conv, y.data(), true);
        round_inplace(y.data(), T * CD, bf16);
        std::vector<float> q(T * KD), k(T * KD), v(T * VD);
        for (int64_t t = 0; t < T; ++t) {
            std::memcpy(&q[t * KD], &y[t * CD], KD * sizeof(float));
            std::memcpy(&k[t * KD], &y[t * CD + KD], KD * sizeof(float));
            std::memcpy(&v[t * VD], &y[t * CD + 2 * KD], VD * sizeof(float));
        }
        ref::l2_norm(q.data(), T * p.Hk, p.Dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(p.Dk)));
        ref::l2_norm(k.data(), T * p.Hk, p.Dk, 1e-6f, 1.0f);
        std::vector<float> g(T * p.Hv), beta(T * p.Hv);
        ref::gdn_gating(a.data(), b.data(), T, p.Hv, p.neg_exp_A, p.dt_bias, g.data(), beta.data());
        round_inplace(beta.data(), T * p.Hv, bf16);
        float* o = core.data() + s.t0 * VD;
        if (p.chunked_reference && T >= 64)
            ref::gated_delta_rule_chunked(q.data(), k.data(), v.data(), g.data(), beta.data(), T, p.Hk, p.Hv,
                                          p.Dk, p.Dv, s.ssm, o, p.v_tiled);
        else
            ref::gated_delta_rule_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), T, p.Hk,
                                            p.Hv, p.Dk, p.Dv, s.ssm, o, p.v_tiled);
    }
    for (const GdnSeq& s : seqs) {
        float* o = core.data() + s.t0 * VD;
        round_inplace(o, s.T * VD, bf16);
        ref::gated_rms_norm(o, z.data() + s.t0 * VD, s.T * p.Hv, p.Dv, p.norm, p.eps, out + s.t0 * VD, bf16);
        round_inplace(out + s.t0 * VD, s.T * VD, bf16);
    }
}

// Decode steps, speculative verification and commits (GdnSeq::stepwise): one pass per (sequence, key
// head) — the conv of the head's q, k and v channels, the L2 norms, the gates, the delta-rule step of its
// value heads and their gated norm — so a head's conv state, delta-rule state and outputs are touched
// while they are in cache, and the mixer takes one barrier instead of four. Same kernels and per-element
// arithmetic as the prefill path below (bitwise equal; the test runs both). A sequence's tokens run one
// after the other in its unit, each reading the state the previous token left: each token is exactly a
// decode step. y [N, CD] and core [N, VD] are the unit's scratch rows; out null: the states only (a
// commit), no gated norm.
// A verified sequence's states after each token: the running thread's private copy of the unit's part
// (its conv channels, its value heads' states), cache-resident and never written back. Writing them to
// per-draft slots instead cost a verify of 4 tokens 3.7x a decode step's GDN time (measured).
struct GdnStepBuffers {
    std::vector<float> own;
};

void gdn_stepwise_unit(const float* proj, int64_t ldp, const GdnSeq& s, int64_t hk, const GdnParams& p,
                       float* y, float* core, float* out, Isa isa, bool bf16, ThreadScratch& scratch) {
    const int64_t Hk = p.Hk, Hv = p.Hv, Dk = p.Dk, Dv = p.Dv, r = Hv / Hk;
    const int64_t KD = Hk * Dk, VD = Hv * Dv, CD = 2 * KD + VD;
    const float qscale = 1.0f / std::sqrt(static_cast<float>(Dk));
    const int64_t conv_n = (p.K - 1) * CD, head_n = Dk * Dv;
    float* own = nullptr;  // only verifications have one (a decode step's workers touch no scratch)
    if (s.keep_state) {
        std::vector<float>& buf = scratch.get<GdnStepBuffers>().own;
        if (buf.size() < static_cast<size_t>(conv_n + r * head_n)) buf.resize(conv_n + r * head_n);
        own = buf.data();
    }
    // The unit's channels: its key head's q and k, and its value heads' v (one run when grouped, r apart
    // when tiled).
    int64_t chans[2 + kMaxValueHeadsPerKey][2] = {{hk * Dk, Dk}, {KD + hk * Dk, Dk}};
    int64_t n_chans = 2;
    if (p.v_tiled) {
        for (int64_t j = 0; j < r; ++j) {
            chans[n_chans][0] = 2 * KD + gdn_value_head(p, hk, j) * Dv;
            chans[n_chans++][1] = Dv;
        }
    } else {
        chans[n_chans][0] = 2 * KD + hk * r * Dv;
        chans[n_chans++][1] = r * Dv;
    }
    // Where token i leaves the states: in place, in its outputs, or (verification) in the private copy,
    // which holds the whole conv window (only this unit's channels are used) and this unit's r value heads.
    auto conv_of = [&](int64_t i) { return s.keep_state ? own : s.conv_out ? s.conv_out[i] : s.conv; };
    auto head_of = [&](int64_t i, int64_t h) {
        if (s.keep_state) return own + conv_n + (p.v_tiled ? h / Hk : h - hk * r) * head_n;
        return (s.ssm_out ? s.ssm_out[i] : s.ssm) + h * head_n;
    };
    for (int64_t i = 0; i < s.T; ++i) {
        const int64_t t = s.t0 + i;
        const float* conv_in = i == 0 ? s.conv : conv_of(i - 1);
        float* conv = conv_of(i);
        if (conv != conv_in)  // this unit's channels of the window, then the conv runs in place
            for (int64_t j = 0; j < p.K - 1; ++j)
                for (int64_t ci = 0; ci < n_chans; ++ci)
                    std::memcpy(conv + j * CD + chans[ci][0], conv_in + j * CD + chans[ci][0],
                                chans[ci][1] * sizeof(float));
        const float* x = proj + t * ldp;
        float* yt = y + t * CD;
        float* q = yt + hk * Dk;
        float* k = yt + KD + hk * Dk;
        for (int64_t ci = 0; ci < n_chans; ++ci)
            kernels(isa).conv1d_silu(x, ldp, 1, CD, p.conv_wT, p.K, conv, yt, CD, chans[ci][0],
                                     chans[ci][0] + chans[ci][1], bf16);
        kernels(isa).l2_norm_scale(q, Dk, 1e-6f, qscale);
        kernels(isa).l2_norm_scale(k, Dk, 1e-6f, 1.0f);
        const float kq = kernels(isa).dot(q, k, Dk);
        for (int64_t j = 0; j < r; ++j) {
            const int64_t h = gdn_value_head(p, hk, j);
            const GdnGates gates = gdn_gates(p, x + CD + VD, h, bf16);
            float* o = core + t * VD + h * Dv;
            const float* ssm_in = i == 0 ? s.ssm + h * head_n : head_of(i - 1, h);
            kernels(isa).gdn_step(ssm_in, head_of(i, h), q, k, yt + 2 * KD + h * Dv,
                                  std::exp(gates.log_decay), gates.beta, kq, Dk, Dv, o);
            if (!out) continue;
            if (bf16) ref::round_activations(o, Dv, true);
            kernels(isa).gated_norm_row(o, x + CD + h * Dv, Dv, p.norm, p.eps, out + t * VD + h * Dv, bf16);
        }
    }
}

void gdn_stepwise_fused(const ExecContext& ctx, const float* proj, int64_t ldp,
                        const std::vector<GdnSeq>& seqs, const GdnParams& p, float* y, float* core,
                        float* out, Isa isa, bool bf16) {
    const int64_t Hk = p.Hk;
    // Balanced: a unit streams 64 KiB+ of state from DRAM, and with fixed halves the thread on the
    // slower vCPU kept the other waiting ~30 us of a ~45 us step (measured).
    ctx.pool().parallel_for_balanced(
        static_cast<int64_t>(seqs.size()) * Hk, 1, [&](int, int64_t u0, int64_t u1) {
            ThreadScratch& scratch = ctx.pool().scratch();  // this thread's
            for (int64_t u = u0; u < u1; ++u)
                gdn_stepwise_unit(proj, ldp, seqs[u / Hk], u % Hk, p, y, core, out, isa, bf16, scratch);
        });
}

}  // namespace

void gdn_commit(const ExecContext& ctx, const std::vector<GdnCommitLayer>& layers, Scratch& sc, bool bf16) {
    GDN_PROFILE(ctx, "gdn commit");
    if (layers.empty()) return;
    const Isa conv_isa = op_isa(OpId::CONV1D), prep_isa = op_isa(OpId::GDN_PREP),
              rule_isa = op_isa(OpId::GDN_RULE), norm_isa = op_isa(OpId::GATED_NORM);
    if (conv_isa == Isa::REF || prep_isa == Isa::REF || rule_isa == Isa::REF || norm_isa == Isa::REF) {
        // The reference: each layer through the reference mixer (its outputs are dropped).
        for (const GdnCommitLayer& l : layers) {
            int64_t N = 0;
            for (const GdnSeq& s : *l.seqs) N = std::max(N, s.t0 + s.T);
            std::vector<float> out(N * l.p->Hv * l.p->Dv);
            gdn_mixer_ref(l.proj, l.ldp, *l.seqs, *l.p, out.data(), bf16);
        }
        return;
    }
    // Every layer's units in one parallel pass (a commit is a few tokens: one barrier, not one per layer).
    // Each layer has its own y/core scratch rows: units of different layers share token rows.
    const GdnParams& p0 = *layers[0].p;
    const int64_t Hk = p0.Hk, CD = 2 * Hk * p0.Dk + p0.Hv * p0.Dv, VD = p0.Hv * p0.Dv;
    int64_t N = 0;
    std::vector<int64_t>& first = sc.gdn_commit_units;  // the first unit of each layer, then the total
    first.clear();
    int64_t units = 0;
    for (const GdnCommitLayer& l : layers) {
        GDN_CHECK(l.p->Hk == Hk && l.p->Hv * l.p->Dv == VD, "gdn_commit: layers of different shapes");
        for (const GdnSeq& s : *l.seqs) {
            GDN_CHECK(s.ssm_out && !s.keep_state, "gdn_commit: a sequence without per-token state outputs");
            N = std::max(N, s.t0 + s.T);
        }
        first.push_back(units);
        units += static_cast<int64_t>(l.seqs->size()) * Hk;
    }
    first.push_back(units);
    const int64_t L = static_cast<int64_t>(layers.size());
    float* y = sc.f32(ctx, GDN_QKV, L * N * CD);
    float* core = sc.f32(ctx, GDN_CORE, L * N * VD);
    const Isa isa = conv_isa;
    ctx.pool().parallel_for_balanced(units, 1, [&](int, int64_t u0, int64_t u1) {
        ThreadScratch& scratch = ctx.pool().scratch();  // this thread's
        for (int64_t u = u0; u < u1; ++u) {
            const int64_t li = std::upper_bound(first.begin(), first.end(), u) - first.begin() - 1;
            const GdnCommitLayer& l = layers[li];
            const int64_t v = u - first[li];
            gdn_stepwise_unit(l.proj, l.ldp, (*l.seqs)[v / Hk], v % Hk, *l.p, y + li * N * CD,
                              core + li * N * VD, nullptr, isa, bf16, scratch);
        }
    });
}

void gdn_mixer(const ExecContext& ctx, const float* proj, int64_t ldp, const std::vector<GdnSeq>& all_seqs,
               const GdnParams& p, float* out, Scratch& sc, bool bf16) {
    GDN_PROFILE(ctx, "gdn_mixer");
    const Isa conv_isa = op_isa(OpId::CONV1D), prep_isa = op_isa(OpId::GDN_PREP),
              rule_isa = op_isa(OpId::GDN_RULE), norm_isa = op_isa(OpId::GATED_NORM);
    if (conv_isa == Isa::REF || prep_isa == Isa::REF || rule_isa == Isa::REF || norm_isa == Isa::REF) {
        // The GDN stages share intermediate layouts; forcing any one of them to the reference runs the
        // whole mixer on the reference composition (A/B granularity: the mixer).
        gdn_mixer_ref(proj, ldp, all_seqs, p, out, bf16);
        return;
    }
    const Isa isa = conv_isa;
    const int64_t Hk = p.Hk, Hv = p.Hv, Dk = p.Dk, Dv = p.Dv, r = Hv / Hk;
    const int64_t KD = Hk * Dk, VD = Hv * Dv, CD = 2 * KD + VD;
    ThreadPool& pool = ctx.pool();
    // Decode steps and verified drafts run token by token; prefill chunks in token blocks below.
    std::vector<GdnSeq>& stepwise = sc.gdn_step_seqs;
    std::vector<GdnSeq>& seqs = sc.gdn_staged_seqs;
    stepwise.clear();
    seqs.clear();
    for (const GdnSeq& s : all_seqs) {
        if (s.ssm_out || s.keep_state || (s.T == 1 && !sc.gdn_staged_decode))
            stepwise.push_back(s);
        else
            seqs.push_back(s);
    }
    if (!stepwise.empty()) {
        GDN_PROFILE(ctx, "gdn.decode");
        int64_t N = 0;
        for (const GdnSeq& s : stepwise) N = std::max(N, s.t0 + s.T);
        float* y = sc.f32(ctx, GDN_QKV, N * CD);      // conv output: q | k | v per token
        float* core = sc.f32(ctx, GDN_CORE, N * VD);  // delta-rule output
        gdn_stepwise_fused(ctx, proj, ldp, stepwise, p, y, core, out, isa, bf16);
    }
    if (seqs.empty()) return;
    // Prefill: one pass per (sequence, key head), tokens in blocks of kBlock. A block's conv output of the
    // head's q, k and v channels goes straight into per-thread head-contiguous rows (the kernel then
    // streams q, k, v sequentially), gets its L2 norms and gates there, runs the delta rule of each value
    // head, and leaves through the gated norm into `out`: no [N, CD] conv output, no second pass over it
    // for the norms and none over the rule's output for the gated norm (at 4096 tokens those three passes
    // moved ~0.5 GB per layer). Same kernels and per-element arithmetic as the fused decode unit above.
    {
        GDN_PROFILE(ctx, "gdn.prefill");
        // Decided here, on the calling thread (a forced-but-unsupported form is counted once per call).
        std::vector<uint8_t>& chunked = sc.gdn_chunked;
        chunked.clear();
        for (const GdnSeq& s : seqs) chunked.push_back(s.T > 1 && use_chunked_delta_rule(s.T, Dk, Dv));
        const float qscale = 1.0f / std::sqrt(static_cast<float>(Dk));
        pool.parallel_for(static_cast<int64_t>(seqs.size()) * Hk, [&](int64_t u0, int64_t u1) {
            constexpr int64_t kBlock = 256;  // a multiple of the chunk size
            static_assert(kBlock % cpu::kGdnChunk == 0);
            // The unit reads a few hundred floats of projection rows ~ldp floats apart, a stride the hardware
            // prefetchers do not follow: rows kRowsAhead tokens on are asked for in the loops below.
            constexpr int64_t kRowsAhead = 8;
            // This thread's blocks, grown to the largest block it has met (never shrunk).
            GdnBlockBuffers& bufs = pool.scratch().get<GdnBlockBuffers>();
            std::vector<float>&qb = bufs.q, &kb = bufs.k, &vb = bufs.v, &ob = bufs.o, &gb = bufs.gates,
            &chunk_scratch = bufs.chunk;
            for (int64_t u = u0; u < u1; ++u) {
                const GdnSeq& s = seqs[u / Hk];
                const int64_t hk = u % Hk;
                const float* x = proj + s.t0 * ldp;  // the sequence's projection rows
                // Tokens [0, Tc) go through the chunked form one full chunk at a time, the rest recurrently.
                // Chunks start at the segment's first token; the scheduler cuts prompts on multiples of 64.
                const int64_t Tc = chunked[u / Hk] ? s.T / cpu::kGdnChunk * cpu::kGdnChunk : 0;
                const int64_t nb = std::min(kBlock, s.T);
                qb.resize(std::max<int64_t>(nb * Dk, qb.size()));
                kb.resize(std::max<int64_t>(nb * Dk, kb.size()));
                vb.resize(std::max<int64_t>(nb * Dv, vb.size()));
                ob.resize(std::max<int64_t>(nb * Dv, ob.size()));
                gb.resize(std::max<int64_t>(4 * kBlock, gb.size()));  // decay | beta | k.q | log decay
                if (Tc > 0) chunk_scratch.resize(kernels(isa).gdn_chunk_scratch_floats(Dk, Dv));
                for (int64_t b0 = 0; b0 < s.T; b0 += kBlock) {
                    const int64_t n = std::min(kBlock, s.T - b0), b1 = b0 + n;
                    kernels(isa).conv1d_silu_rows(x, ldp, b0, b1, CD, p.conv_wT, p.K, s.conv, qb.data(), Dk,
                                                  hk * Dk, (hk + 1) * Dk, bf16);
                    kernels(isa).conv1d_silu_rows(x, ldp, b0, b1, CD, p.conv_wT, p.K, s.conv, kb.data(), Dk,
                                                  KD + hk * Dk, KD + (hk + 1) * Dk, bf16);
                    for (int64_t i = 0; i < n; ++i) {
                        kernels(isa).l2_norm_scale(&qb[i * Dk], Dk, 1e-6f, qscale);
                        kernels(isa).l2_norm_scale(&kb[i * Dk], Dk, 1e-6f, 1.0f);
                        gb[2 * kBlock + i] = kernels(isa).dot(&qb[i * Dk], &kb[i * Dk], Dk);
                    }
                    for (int64_t j = 0; j < r; ++j) {  // the value heads that read key head hk
                        const int64_t h = gdn_value_head(p, hk, j);
                        float* S = s.ssm + h * Dk * Dv;
                        kernels(isa).conv1d_silu_rows(x, ldp, b0, b1, CD, p.conv_wT, p.K, s.conv, vb.data(),
                                                      Dv, 2 * KD + h * Dv, 2 * KD + (h + 1) * Dv, bf16);
                        for (int64_t i = 0; i < n; ++i) {
                            if (i + kRowsAhead < n)
                                __builtin_prefetch(x + (b0 + i + kRowsAhead) * ldp + CD + VD + h);
                            const GdnGates gates = gdn_gates(p, x + (b0 + i) * ldp + CD + VD, h, bf16);
                            gb[i] = std::exp(gates.log_decay);
                            gb[kBlock + i] = gates.beta;
                            gb[3 * kBlock + i] = gates.log_decay;
                        }
                        if (s.T == 1) {
                            kernels(isa).gdn_step(S, S, qb.data(), kb.data(), vb.data(), gb[0], gb[kBlock],
                                                  gb[2 * kBlock], Dk, Dv, ob.data());
                        } else {
                            const int64_t nc = std::clamp<int64_t>(Tc - b0, 0, n);  // a multiple of the chunk
                            for (int64_t c = 0; c < nc; c += cpu::kGdnChunk)
                                kernels(isa).gdn_chunk(S, &qb[c * Dk], &kb[c * Dk], &vb[c * Dv],
                                                       &gb[3 * kBlock + c], &gb[kBlock + c], Dk, Dv,
                                                       &ob[c * Dv], chunk_scratch.data());
                            if (nc < n)
                                kernels(isa).gdn_slab(S, &qb[nc * Dk], &kb[nc * Dk], Dk, &vb[nc * Dv], Dv,
                                                      &ob[nc * Dv], Dv, &gb[nc], &gb[kBlock + nc], 1,
                                                      &gb[2 * kBlock + nc], 1, n - nc, Dk, Dv, 0, Dv);
                        }
                        // The gated RMSNorm with silu(z), per token.
                        for (int64_t i = 0; i < n; ++i) {
                            if (i + kRowsAhead < n)
                                prefetch_floats(x + (b0 + i + kRowsAhead) * ldp + CD + h * Dv, Dv);
                            float* o = &ob[i * Dv];
                            if (bf16) ref::round_activations(o, Dv, true);
                            kernels(isa).gated_norm_row(o, x + (b0 + i) * ldp + CD + h * Dv, Dv, p.norm,
                                                        p.eps, out + (s.t0 + b0 + i) * VD + h * Dv, bf16);
                        }
                    }
                }
                // The conv state after the sequence: this unit's channels only (no other unit reads them).
                kernels(isa).conv1d_state_update(x, ldp, s.T, CD, p.K, s.conv, hk * Dk, (hk + 1) * Dk);
                kernels(isa).conv1d_state_update(x, ldp, s.T, CD, p.K, s.conv, KD + hk * Dk,
                                                 KD + (hk + 1) * Dk);
                for (int64_t j = 0; j < r; ++j) {
                    const int64_t v0 = 2 * KD + gdn_value_head(p, hk, j) * Dv;
                    kernels(isa).conv1d_state_update(x, ldp, s.T, CD, p.K, s.conv, v0, v0 + Dv);
                }
            }
        });
    }
}

// ------------------------------------------------------------------------------------------------
// Attention

namespace {

// Decode attention splits a row's keys into units of this many (flash-decoding over the threads). A row
// with at most this many keys is one unit, and the f32 prefill kernel gives it the decode step's bits:
// so prefill rows up to here stay on the f32 kernels even where AMX runs the rest (a prefill of decoded
// tokens then equals their decode, the prefix cache's exactness for generated tokens).
constexpr int64_t kKeysPerUnit = 256;

// Prefill in bf16 (ops/cpu/attention_bf16.h): per sequence, every KV head's keys are packed once (in
// parallel over 256-key ranges), then the blocks of query rows run on AMX tiles where the CPU has them,
// else on vdpbf16ps, dealt round-robin (later blocks see more keys, so contiguous ranges would be
// unbalanced) one KV head after the other: the threads stream the same head's packed K/V at once (16
// MiB at 16k keys), not one head each, which would need both heads' in the L3 together.
void attention_prefill_bf16(const ExecContext& ctx, const float* q, const float* gate, int64_t ldq,
                            const std::vector<AttnSeq>& pre, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                            float* out, Scratch& sc) {
    const int64_t group = Hq / Hkv, tokens_per_block = 32 / group;
    constexpr int64_t kPackKeys = 256;
    for (const AttnSeq& s : pre) {
        const int64_t n_keys = s.n_past + s.T, nk = (n_keys + 31) / 32 * 32;
        const int64_t per_head = D / 2 * nk;  // uint32 words of one head's kt, and of its vp
        uint32_t* kt =
            reinterpret_cast<uint32_t*>(sc.f32(ctx, ATTN_PACKED_KV, static_cast<size_t>(2 * Hkv * per_head)));
        uint32_t* vp = kt + Hkv * per_head;
        const int64_t ranges = (nk + kPackKeys - 1) / kPackKeys;
        const bool amx = has_amx_bf16();
        const int64_t key_chunk = amx ? nk : cpu::avx512::kDotKeyChunk;
        ctx.pool().parallel_for(Hkv * ranges, [&](int64_t u0, int64_t u1) {
            for (int64_t u = u0; u < u1; ++u) {
                const int64_t g = u / ranges, j0 = (u % ranges) * kPackKeys;
                cpu::avx512::attention_bf16_pack(s.kv, g * D, D, n_keys, j0, std::min(nk, j0 + kPackKeys),
                                                 kt + g * per_head, vp + g * per_head, nk, key_chunk);
            }
        });
        const int64_t n_blocks = (s.T + tokens_per_block - 1) / tokens_per_block;
        const auto block = amx ? cpu::avx512::attention_amx_block : cpu::avx512::attention_dot_block;
        ctx.pool().run([&](int ith, int nth) {
            for (int64_t u = ith; u < Hkv * n_blocks; u += nth) {
                const int64_t blk = u % n_blocks, g = u / n_blocks, tb = blk * tokens_per_block;
                const int64_t off = s.t0 * ldq + g * group * D;
                block(q + off, gate ? gate + off : nullptr, ldq, group, D, s.n_past, tb,
                      std::min(tokens_per_block, s.T - tb), kt + g * per_head, vp + g * per_head, nk, scale,
                      out + (s.t0 * Hq + g * group) * D, Hq * D);
            }
        });
    }
}

}  // namespace

bool uses_bf16_attention(int64_t Hq, int64_t Hkv, int64_t D, bool bf16) {
    return bf16 && op_isa(OpId::ATTENTION) == Isa::AVX512 && has_bf16_dot() &&
           cpu::avx512::attention_bf16_supported(D, Hq / Hkv);
}

void attention(const ExecContext& ctx, const float* q, const float* gate, int64_t ldq,
               const std::vector<AttnSeq>& seqs, int64_t Hq, int64_t Hkv, int64_t D, float* out, Scratch& sc,
               bool bf16) {
    GDN_PROFILE(ctx, "attention");
    const Isa isa = op_isa(OpId::ATTENTION);
    const int64_t group = Hq / Hkv;
    if (isa == Isa::REF) {
        for (const AttnSeq& s : seqs) {
            const int64_t nk = s.n_past + s.T;
            std::vector<float> k(nk * Hkv * D), v(nk * Hkv * D), qq(s.T * Hq * D), gg(s.T * Hq * D);
            for (int64_t j = 0; j < nk; ++j) {
                if (s.kv.bf16) {
                    convert_to_f32(DType::BF16, s.kv.k<uint16_t>(j), &k[j * Hkv * D], Hkv * D);
                    convert_to_f32(DType::BF16, s.kv.v<uint16_t>(j), &v[j * Hkv * D], Hkv * D);
                } else {
                    std::memcpy(&k[j * Hkv * D], s.kv.k<float>(j), Hkv * D * sizeof(float));
                    std::memcpy(&v[j * Hkv * D], s.kv.v<float>(j), Hkv * D * sizeof(float));
                }
            }
            for (int64_t t = 0; t < s.T; ++t) {
                std::memcpy(&qq[t * Hq * D], q + (s.t0 + t) * ldq, Hq * D * sizeof(float));
                if (gate) std::memcpy(&gg[t * Hq * D], gate + (s.t0 + t) * ldq, Hq * D * sizeof(float));
            }
            ref::attention(qq.data(), gate ? gg.data() : nullptr, k.data(), v.data(), s.T, s.n_past, Hq, Hkv,
                           D, out + s.t0 * Hq * D);
        }
        return;
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int nth = ctx.pool().size();
    // One-token rows (decode steps, and each row of a verified draft, which the forward passes as its own
    // one-token sequence) take the decode kernel; prefill chunks the tiled one below.
    std::vector<AttnSeq>& dec = sc.attn_decode_seqs;
    std::vector<AttnSeq>& pre = sc.attn_prefill_seqs;
    dec.clear();
    pre.clear();
    const bool decode_kernel =
        kernels(isa).attention_decode_supported(D);  // other head sizes: the path below
    for (const AttnSeq& s : seqs) (decode_kernel && s.T == 1 && !s.prefill_row ? dec : pre).push_back(s);
    if (!dec.empty()) {
        // Decode: each unit is (sequence, key range) over all KV heads, reading whole K/V rows in order;
        // long contexts are split over the threads (flash-decoding), then merged per head. The ranges
        // are fixed blocks of keys, so a row's sums never depend on the batch or the thread count (a
        // verified draft row gives the bits of the decode step it replaces).
        const int64_t n_seqs = static_cast<int64_t>(dec.size());
        std::vector<int64_t>& first = sc.attn_units;  // first unit of each sequence, then the total
        first.clear();
        int64_t n_units = 0;
        for (const AttnSeq& s : dec) {
            first.push_back(n_units);
            n_units += (s.n_past + kKeysPerUnit) / kKeysPerUnit;  // ceil((n_past + 1) / kKeysPerUnit)
        }
        first.push_back(n_units);
        float* part = sc.f32(ctx, ATTN_PART, n_units * Hq * D);
        float* mx = sc.f32(ctx, ATTN_MAX, n_units * Hq);
        float* sum = sc.f32(ctx, ATTN_SUM, n_units * Hq);
        ctx.pool().parallel_for_balanced(n_units, 1, [&](int, int64_t u0, int64_t u1) {
            int64_t si = std::upper_bound(first.begin(), first.end() - 1, u0) - first.begin() - 1;
            for (int64_t u = u0; u < u1; ++u) {
                while (u >= first[si + 1]) ++si;
                const AttnSeq& s = dec[si];
                const int64_t j0 = (u - first[si]) * kKeysPerUnit;
                const int64_t j1 = std::min(s.n_past + 1, j0 + kKeysPerUnit);
                const bool done =
                    kernels(isa).attention_decode_range(q + s.t0 * ldq, Hkv, group, D, s.kv, j0, j1, scale,
                                                        part + u * Hq * D, mx + u * Hq, sum + u * Hq);
                GDN_CHECK(done, "attention decode kernel has no instance for D = %lld", (long long)D);
            }
        });
        // A merge reads D values per unit of its row and gates them (~2 D floats of work per unit): a few
        // hundred ns for short contexts, less than waking the other threads, so small merges run on the
        // caller.
        const int64_t merge_grain = row_grain(2 * D * std::max<int64_t>(1, n_units / n_seqs));
        ctx.pool().parallel_for(
            n_seqs * Hq,
            [&](int64_t i0, int64_t i1) {
                for (int64_t i = i0; i < i1; ++i) {
                    const int64_t si = i / Hq, h = i % Hq, u = first[si];
                    const AttnSeq& s = dec[si];
                    kernels(isa).attention_merge(
                        part + (u * Hq + h) * D, mx + u * Hq + h, sum + u * Hq + h, first[si + 1] - u, Hq, D,
                        gate ? gate + s.t0 * ldq + h * D : nullptr, out + (s.t0 * Hq + h) * D);
                }
            },
            merge_grain);
    }
    if (pre.empty()) return;
    if (bf16 && isa == Isa::AVX512 && has_bf16_dot() && !uses_bf16_attention(Hq, Hkv, D, bf16) &&
        std::any_of(pre.begin(), pre.end(), [](const AttnSeq& s) { return s.n_past + s.T > kKeysPerUnit; }))
        count_fallback(OpId::ATTENTION,
                       "prefill stays on f32 FMA: the bf16 kernels need D % 32 == 0, D <= 512 and "
                       "at most 32 query heads per KV head");
    if (uses_bf16_attention(Hq, Hkv, D, bf16)) {
        // Rows past kKeysPerUnit keys to the bf16 kernels, the first ones stay below (see kKeysPerUnit).
        std::vector<AttnSeq>& late = sc.attn_bf16_seqs;
        late.clear();
        size_t n_f32 = 0;
        for (const AttnSeq& s : pre) {
            const int64_t t_split = std::clamp<int64_t>(kKeysPerUnit - s.n_past, 0, s.T);
            if (t_split < s.T)
                late.push_back({s.t0 + t_split, s.T - t_split, s.n_past + t_split, s.kv, s.prefill_row});
            if (t_split > 0) pre[n_f32++] = {s.t0, t_split, s.n_past, s.kv, s.prefill_row};
        }
        pre.resize(n_f32);
        if (!late.empty()) attention_prefill_bf16(ctx, q, gate, ldq, late, Hq, Hkv, D, scale, out, sc);
        if (pre.empty()) return;
    }
    // Units: (sequence, query token, kv head); each covers its `group` query heads.
    int64_t n_units = 0;
    for (const AttnSeq& s : pre) n_units += s.T * Hkv;
    float* scratch = sc.f32(ctx, ATTN_ROW_SCRATCH, static_cast<size_t>(nth) * 64);
    // Units are dealt round-robin: later queries see more keys, so contiguous ranges would be unbalanced.
    ctx.pool().run([&](int ith, int nt) {
        int64_t base = 0;
        for (const AttnSeq& s : pre) {
            const int64_t cnt = s.T * Hkv;
            for (int64_t u = (ith - base % nt + nt) % nt; u < cnt; u += nt) {
                const int64_t t = u / Hkv, g = u % Hkv;
                const int64_t row = s.t0 + t;
                kernels(isa).attention_group(q + row * ldq + g * group * D,
                                             gate ? gate + row * ldq + g * group * D : nullptr, group, D,
                                             s.kv, g * D, s.n_past + t + 1, scale,
                                             out + (row * Hq + g * group) * D, scratch + ith * 64);
            }
            base += cnt;
        }
    });
}

}  // namespace gdn::ops
