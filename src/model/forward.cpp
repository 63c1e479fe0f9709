// The reference forward pass (model_spec.md §4). Linear layers run over all tokens of the batch at once;
// sequence-dependent parts (conv, delta rule, attention) run per sequence on that sequence's caches.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/checkpoint.h"
#include "model/model.h"
#include "ops/ref/ref_ops.h"

namespace gdn {

Result<std::unique_ptr<Model>> Model::load(const std::string& dir) {
    auto m = std::unique_ptr<Model>(new Model());
    GDN_ASSIGN_OR_RETURN(m->config_, load_model_config(dir));
    GDN_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::open(dir));
    GDN_ASSIGN_OR_RETURN(m->weights_, load_weights(m->config_, std::make_shared<Checkpoint>(std::move(ck))));
    return m;
}

namespace {

using Vec = std::vector<float>;

struct SeqSpan {
    int64_t t0, T;     // token rows [t0, t0 + T) of the batch
    SequenceState* st;
};

class ForwardPass {
public:
    ForwardPass(const ModelConfig& c, const ModelWeights& w, const ForwardOptions& o) : c_(c), w_(w), o_(o) {}

    void round(float* x, int64_t n) const { ref::round_activations(x, n, o_.bf16_activations); }
    void round(Vec& v) const { round(v.data(), static_cast<int64_t>(v.size())); }

    // y [N, out] = x [N, in] @ W^T, rounded to the activation precision
    Vec linear(const Vec& x, int64_t N, const TensorView& W) const {
        Vec y(N * W.shape[0]);
        ref::linear(x.data(), N, W, y.data());
        round(y);
        return y;
    }

    Vec gdn_block(const LayerWeights& L, int gdn_idx, const Vec& h, int64_t N, const std::vector<SeqSpan>& seqs) const;
    Vec attention_block(const LayerWeights& L, int attn_idx, const Vec& h, int64_t N,
                        const std::vector<SeqSpan>& seqs, const std::vector<int64_t>& pos) const;
    Vec ffn(const LayerWeights& L, const Vec& h, int64_t N) const {
        Vec out(h.size());
        if (L.is_moe)
            ref::moe(L.moe, h.data(), N, c_.n_experts_per_tok, c_.norm_topk_prob, out.data(), o_.bf16_activations);
        else
            ref::swiglu_mlp(L.mlp, h.data(), N, out.data(), o_.bf16_activations);
        return out;
    }

private:
    const ModelConfig& c_;
    const ModelWeights& w_;
    const ForwardOptions& o_;
};

Vec ForwardPass::gdn_block(const LayerWeights& L, int gi, const Vec& h, int64_t N,
                           const std::vector<SeqSpan>& seqs) const {
    const GdnWeights& g = L.gdn;
    const int64_t Hk = c_.gdn_k_heads, Hv = c_.gdn_v_heads, Dk = c_.gdn_k_dim, Dv = c_.gdn_v_dim;
    const int64_t KD = Hk * Dk, VD = Hv * Dv, CD = 2 * KD + VD, K = c_.conv_kernel;
    Vec qkv = linear(h, N, g.in_qkv);  // [N, CD]
    Vec z = linear(h, N, g.in_z);      // [N, Hv, Dv]
    Vec b = linear(h, N, g.in_b);      // [N, Hv]
    Vec a = linear(h, N, g.in_a);      // [N, Hv]
    Vec core(N * VD);                  // [N, Hv, Dv]
    for (const SeqSpan& s : seqs) {
        const int64_t T = s.T;
        Vec y(T * CD);
        ref::causal_conv1d(qkv.data() + s.t0 * CD, T, CD, g.conv, K, s.st->conv[gi].data(), y.data(), true);
        round(y);
        Vec q(T * KD), k(T * KD), v(T * VD);  // [T, Hk, Dk], [T, Hk, Dk], [T, Hv, Dv]
        for (int64_t t = 0; t < T; ++t) {
            std::memcpy(&q[t * KD], &y[t * CD], KD * sizeof(float));
            std::memcpy(&k[t * KD], &y[t * CD + KD], KD * sizeof(float));
            std::memcpy(&v[t * VD], &y[t * CD + 2 * KD], VD * sizeof(float));
        }
        ref::l2_norm(q.data(), T * Hk, Dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(Dk)));
        ref::l2_norm(k.data(), T * Hk, Dk, 1e-6f, 1.0f);
        Vec gate(T * Hv), beta(T * Hv);
        ref::gdn_gating(a.data() + s.t0 * Hv, b.data() + s.t0 * Hv, T, Hv, g.neg_exp_A, g.dt_bias, gate.data(),
                        beta.data());
        round(beta);
        const bool chunked = o_.gdn_form == GdnForm::CHUNKED || (o_.gdn_form == GdnForm::AUTO && T >= 64);
        float* out = core.data() + s.t0 * VD;
        if (chunked)
            ref::gated_delta_rule_chunked(q.data(), k.data(), v.data(), gate.data(), beta.data(), T, Hk, Hv, Dk, Dv,
                                          s.st->ssm[gi].data(), out);
        else
            ref::gated_delta_rule_recurrent(q.data(), k.data(), v.data(), gate.data(), beta.data(), T, Hk, Hv, Dk,
                                            Dv, s.st->ssm[gi].data(), out);
    }
    round(core);
    Vec normed(N * VD);
    ref::gated_rms_norm(core.data(), z.data(), N * Hv, Dv, g.norm, c_.rms_eps, normed.data(), o_.bf16_activations);
    round(normed);
    return linear(normed, N, g.out_proj);
}

Vec ForwardPass::attention_block(const LayerWeights& L, int ai, const Vec& h, int64_t N,
                                 const std::vector<SeqSpan>& seqs, const std::vector<int64_t>& pos) const {
    const AttentionWeights& A = L.attn;
    const int64_t Hq = c_.attn_heads, Hkv = c_.attn_kv_heads, D = c_.head_dim;
    Vec qg = linear(h, N, A.q_proj);  // [N, Hq, 2D]: per head [query | gate]
    Vec k = linear(h, N, A.k_proj);   // [N, Hkv, D]
    Vec v = linear(h, N, A.v_proj);   // [N, Hkv, D]
    Vec q(N * Hq * D), gate(N * Hq * D);  // [N, Hq, D]
    for (int64_t t = 0; t < N; ++t)
        for (int64_t hh = 0; hh < Hq; ++hh) {
            std::memcpy(&q[(t * Hq + hh) * D], &qg[(t * Hq + hh) * 2 * D], D * sizeof(float));
            std::memcpy(&gate[(t * Hq + hh) * D], &qg[(t * Hq + hh) * 2 * D + D], D * sizeof(float));
        }
    ref::rms_norm(q.data(), N * Hq, D, A.q_norm, c_.rms_eps, q.data());
    ref::rms_norm(k.data(), N * Hkv, D, A.k_norm, c_.rms_eps, k.data());
    round(q);
    round(k);
    ref::rope_neox(q.data(), N, Hq, D, c_.rotary_dim, pos.data(), c_.rope_theta, o_.bf16_activations);
    ref::rope_neox(k.data(), N, Hkv, D, c_.rotary_dim, pos.data(), c_.rope_theta, o_.bf16_activations);
    Vec o(N * Hq * D);
    const int64_t row = Hkv * D;
    for (const SeqSpan& s : seqs) {
        Vec& kc = s.st->k_cache[ai];
        Vec& vc = s.st->v_cache[ai];
        const int64_t n_past = s.st->n_past;
        GDN_CHECK(static_cast<int64_t>(kc.size()) == n_past * row);
        kc.insert(kc.end(), k.begin() + s.t0 * row, k.begin() + (s.t0 + s.T) * row);
        vc.insert(vc.end(), v.begin() + s.t0 * row, v.begin() + (s.t0 + s.T) * row);
        ref::attention(q.data() + s.t0 * Hq * D, gate.data() + s.t0 * Hq * D, kc.data(), vc.data(), s.T, n_past, Hq,
                       Hkv, D, o.data() + s.t0 * Hq * D);
    }
    round(o);
    return linear(o, N, A.o_proj);
}

}  // namespace

Status Model::forward(const std::vector<SequenceInput>& batch, const ForwardOptions& opt, Vec* logits) const {
    const ModelConfig& c = config_;
    const ModelWeights& w = *weights_;
    const int64_t H = c.hidden, V = c.vocab;
    // Validate everything before touching any state.
    int64_t N = 0;
    for (const auto& s : batch) {
        if (!s.state || s.n_tokens <= 0) return Status::error("forward: every sequence needs a state and >= 1 token");
        for (int64_t i = 0; i < s.n_tokens; ++i)
            if (s.tokens[i] < 0 || s.tokens[i] >= V)
                return Status::error(strprintf("token id %d is out of range [0, %lld)", s.tokens[i], (long long)V));
        for (const auto& o : batch)
            if (&o != &s && o.state == s.state) return Status::error("forward: a sequence appears twice in one batch");
        N += s.n_tokens;
    }
    if (N == 0) return Status::ok();

    std::vector<int32_t> ids;
    std::vector<int64_t> pos;
    std::vector<SeqSpan> spans;
    std::vector<int64_t> logit_rows;
    for (const auto& s : batch) {
        spans.push_back({static_cast<int64_t>(ids.size()), s.n_tokens, s.state});
        for (int64_t i = 0; i < s.n_tokens; ++i) {
            if (s.all_logits || i == s.n_tokens - 1) logit_rows.push_back(static_cast<int64_t>(ids.size()));
            ids.push_back(s.tokens[i]);
            pos.push_back(s.state->n_past + i);  // M-RoPE with text-only positions == 1-D RoPE
        }
    }

    ForwardPass fp(c, w, opt);
    Vec x(N * H);  // residual stream [N, H]
    ref::embedding(w.embed, ids.data(), N, x.data());
    fp.round(x);
    Vec h(N * H);
    int gi = 0, ai = 0;
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights& L = w.layers[l];
        ref::rms_norm(x.data(), N, H, L.input_norm, c.rms_eps, h.data());
        fp.round(h);
        Vec mix = L.kind == LayerKind::FULL_ATTENTION ? fp.attention_block(L, ai++, h, N, spans, pos)
                                                      : fp.gdn_block(L, gi++, h, N, spans);
        for (int64_t i = 0; i < N * H; ++i) x[i] += mix[i];
        fp.round(x);
        ref::rms_norm(x.data(), N, H, L.post_norm, c.rms_eps, h.data());
        fp.round(h);
        Vec f = fp.ffn(L, h, N);
        for (int64_t i = 0; i < N * H; ++i) x[i] += f[i];
        fp.round(x);
    }
    for (const auto& s : batch) s.state->n_past += s.n_tokens;

    const int64_t R = static_cast<int64_t>(logit_rows.size());
    Vec hf(R * H);
    for (int64_t r = 0; r < R; ++r)
        ref::rms_norm(x.data() + logit_rows[r] * H, 1, H, w.final_norm, c.rms_eps, hf.data() + r * H);
    fp.round(hf);
    const size_t off = logits->size();
    logits->resize(off + R * V);
    ref::linear(hf.data(), R, w.lm_head, logits->data() + off);
    return Status::ok();
}

}  // namespace gdn
