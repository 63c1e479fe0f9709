// The forward pass (model_spec.md §4) over a batch of sequences. Linear layers run over all tokens of
// the batch at once; conv, delta rule and attention run per sequence on that sequence's caches. Every
// step goes through the op API (ops/layers.h, ops/linear.h), so the same code is the fast path and,
// with GDN_FORCE_REFERENCE=all, the reference path.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>

#include "cache/kv_cache.h"
#include "cache/state_slots.h"
#include "core/profiler.h"
#include "core/thread_pool.h"
#include "model/checkpoint.h"
#include "model/gguf_checkpoint.h"
#include "model/gguf_config.h"
#include "model/model.h"
#include "ops/dispatch.h"
#include "ops/ffn.h"
#include "ops/layers.h"
#include "ops/linear.h"
#include "ops/scratch_slots.h"

namespace gdn {

using enum ops::ScratchSlot;  // the forward's buffers in the ops' Scratch, by name

Result<std::unique_ptr<Model>> Model::load(const ExecContext& ctx, const std::string& dir,
                                           const LoadProgress& progress, const LoadOptions& options) {
    auto m = std::unique_ptr<Model>(new Model(ctx));
    std::optional<Checkpoint> source;
    if (is_gguf_path(dir)) {  // a GGUF file (or a split set's first part): config and tensors from it
        GDN_ASSIGN_OR_RETURN(auto parts, open_gguf_parts(dir));
        GDN_ASSIGN_OR_RETURN(m->config_, gguf_model_config(*parts[0]));
        GDN_ASSIGN_OR_RETURN(source, gguf_checkpoint(std::move(parts), m->config_));
    } else {
        GDN_ASSIGN_OR_RETURN(m->config_, load_model_config(dir));
        GDN_ASSIGN_OR_RETURN(source, Checkpoint::open(dir));
    }
    Checkpoint ck = std::move(*source);
    GDN_ASSIGN_OR_RETURN(
        m->weights_,
        load_weights(ctx, m->config_, std::make_shared<Checkpoint>(std::move(ck)), progress, options));
    return m;
}

namespace {
struct SeqSpan {
    int64_t t0, T, n_past;
};

// A plan's sequences as row spans (the first position of each is its n_past).
void spans_of(const BatchPlan& plan, std::vector<SeqSpan>* spans) {
    spans->clear();
    for (int64_t s = 0; s < plan.n_seqs(); ++s) {
        const int64_t t0 = plan.cu_seqlens[s];
        spans->push_back({t0, plan.cu_seqlens[s + 1] - t0, plan.positions[t0]});
    }
}

}  // namespace

// Where a forward finds each sequence's caches: a standalone SequenceState, or the engine's KV block
// pool and state slots addressed by a BatchPlan.
class CacheAccess {
  public:
    virtual ~CacheAccess() = default;
    virtual float* conv(int seq, int gdn_layer) = 0;
    virtual float* ssm(int seq, int gdn_layer) = 0;
    virtual bool fresh(int seq) = 0;  // no initial state: its GDN state is zeroed before use
    // Where token t's GDN states go (null: in place, the sequence's usual case).
    virtual float* conv_out(int, int, int64_t) { return nullptr; }
    virtual float* ssm_out(int, int, int64_t) { return nullptr; }
    virtual bool has_state_outputs(int) { return false; }
    // Speculative verification: the sequence's GDN state is only read, and its GDN input rows
    // ([T, ldp] per layer) are staged at verify_rows for the commit.
    virtual bool verified(int) { return false; }
    virtual float* verify_rows(int, int) { return nullptr; }
    // Makes room for T new K/V rows of sequence seq, so that write_kv of distinct rows may then run
    // on several threads at once.
    virtual void reserve_kv(int seq, int attn_layer, int64_t T) {}
    // Stores the K/V rows of new token t of sequence seq (t counted within this step).
    virtual void write_kv(int seq, int attn_layer, int64_t t, const float* k, const float* v) = 0;
    virtual KvRows rows(int seq, int attn_layer) = 0;
};

namespace {

class SequenceStateAccess final : public CacheAccess {
  public:
    // spans[s].n_past: the first KV row this step writes (the sequence's n_past, or its mtp_past).
    SequenceStateAccess(const std::vector<SequenceInput>& b, const std::vector<SeqSpan>& spans, int64_t row)
        : b_(b), spans_(spans), row_(row) {}
    float* conv(int s, int gi) override { return b_[s].state->conv(gi); }
    float* ssm(int s, int gi) override { return b_[s].state->ssm(gi); }
    bool fresh(int) override { return false; }  // a new SequenceState is zero-initialised
    void reserve_kv(int s, int ai, int64_t T) override {
        SequenceState& st = *b_[s].state;
        const size_t end = (spans_[s].n_past + T) * st.kv_row_bytes();
        if (st.k_cache[ai].size() < end) {  // no allocation within reserved capacity
            st.k_cache[ai].resize(end);
            st.v_cache[ai].resize(end);
        }
    }
    void write_kv(int s, int ai, int64_t t, const float* k, const float* v) override {
        SequenceState& st = *b_[s].state;
        const size_t rb = st.kv_row_bytes(), off = (spans_[s].n_past + t) * rb;
        GDN_CHECK(st.k_cache[ai].size() >= off + rb, "write_kv: row %lld past the reserved rows",
                  (long long)t);
        convert_from_f32(k, st.kv_dtype, st.k_cache[ai].data() + off, row_);
        convert_from_f32(v, st.kv_dtype, st.v_cache[ai].data() + off, row_);
    }
    KvRows rows(int s, int ai) override {
        const SequenceState& st = *b_[s].state;
        return {st.k_cache[ai].data(), st.v_cache[ai].data(), row_, nullptr, 0, st.kv_dtype == DType::BF16};
    }

  private:
    const std::vector<SequenceInput>& b_;
    const std::vector<SeqSpan>& spans_;
    int64_t row_;
};

class PlanAccess final : public CacheAccess {
  public:
    // slots: null for the MTP layer (no GDN state).
    PlanAccess(const BatchPlan& p, KvCache& kv, StateSlots* slots) : p_(p), kv_(kv), slots_(slots) {}
    float* conv(int s, int gi) override { return slots_->conv(gi, p_.state_slot[s]); }
    float* ssm(int s, int gi) override { return slots_->ssm(gi, p_.state_slot[s]); }
    bool fresh(int s) override { return !p_.has_initial_state[s]; }
    bool has_state_outputs(int s) override { return out_slot(s, 0) >= 0; }
    bool verified(int s) override { return !p_.gdn_verify.empty() && p_.gdn_verify[s]; }
    float* verify_rows(int s, int gi) override { return slots_->verify_rows(gi, s); }
    float* conv_out(int s, int gi, int64_t t) override {
        const int32_t slot = out_slot(s, t);
        return slot < 0 ? nullptr : slots_->conv(gi, slot);
    }
    float* ssm_out(int s, int gi, int64_t t) override {
        const int32_t slot = out_slot(s, t);
        return slot < 0 ? nullptr : slots_->ssm(gi, slot);
    }
    void write_kv(int s, int ai, int64_t t, const float* k, const float* v) override {
        kv_.write_row(ai, p_.slot_mapping[p_.cu_seqlens[s] + t], k, v);
    }
    KvRows rows(int s, int ai) override {
        return {kv_.k(ai),        kv_.v(ai),
                kv_.row_elems(),  p_.block_tables.data() + s * p_.max_blocks,
                kv_.block_size(), kv_.dtype() == DType::BF16};
    }

  private:
    int32_t out_slot(int s, int64_t t) const {
        if (p_.gdn_out_offset.empty()) return -1;
        const int64_t o = p_.gdn_out_offset[s];
        return o + t < p_.gdn_out_offset[s + 1] ? p_.gdn_out_slot[o + t] : -1;
    }
    const BatchPlan& p_;
    KvCache& kv_;
    StateSlots* slots_;
};
}  // namespace

// Everything a forward needs besides weights and caches, kept across calls so that a decode step does
// not allocate once warm (buffers only grow). Owned by the caller (model/forward_workspace.h).
struct ForwardWorkspace {
    explicit ForwardWorkspace(const ExecContext& c) : ctx(c) {}
    ExecContext ctx;  // where the forwards run (model/forward_workspace.h)
    ops::Scratch sc;
    std::vector<int32_t> ids;
    std::vector<int64_t> pos, logit_rows;
    std::vector<int64_t> head_rows;  // first_rows: 0 .. R - 1, when the last layer kept only R rows
    std::vector<SeqSpan> spans;
    std::vector<ops::GdnSeq> gdn_seqs;
    std::vector<float*> gdn_out;  // sequences' per-token state pointers (conv, then ssm)
    std::vector<std::vector<ops::GdnSeq>> commit_seqs;  // commit_verified: per GDN layer
    std::vector<ops::GdnCommitLayer> commit_layers;
    std::vector<ops::GdnParams> commit_params;
    std::vector<ops::AttnSeq> attn_seqs;
    ops::MoeWorkspace moe;
};

void ForwardWorkspaceDeleter::operator()(ForwardWorkspace* ws) const {
    delete ws;
}
ForwardWorkspacePtr new_forward_workspace(const ExecContext& ctx) {
    return ForwardWorkspacePtr(new ForwardWorkspace(ctx));
}

Model::Model(const ExecContext& ctx) : ctx_(ctx) {}
Model::~Model() = default;

namespace {

ops::GdnParams gdn_params(const ModelConfig& c, const GdnWeights& g, GdnForm form) {
    return {c.gdn_k_heads, c.gdn_v_heads, c.gdn_k_dim, c.gdn_v_dim, c.conv_kernel, c.rms_eps,
            g.conv,        g.conv_T,      g.neg_exp_A, g.dt_bias,   g.norm,        form != GdnForm::RECURRENT,
            c.gdn_v_tiled};
}

// Moves rows `rows` (ascending) of x [*, width] to rows 0, 1, ... in that order, in place (row r's source
// is at or after r, and after every earlier row's); returns their count.
int64_t pack_rows(float* x, int64_t width, const std::vector<int64_t>& rows) {
    for (size_t r = 0; r < rows.size(); ++r)
        if (rows[r] != static_cast<int64_t>(r))
            std::memmove(x + r * width, x + rows[r] * width, width * sizeof(float));
    return static_cast<int64_t>(rows.size());
}

// The rows a last layer keeps past its mixer: &logit_rows when they are fewer than the batch's N and come
// in batch order, each once (the engine's), else null (every row goes on).
const std::vector<int64_t>* rows_to_keep(const std::vector<int64_t>& logit_rows, int64_t N) {
    const bool ascending = std::adjacent_find(logit_rows.begin(), logit_rows.end(),
                                              std::greater_equal<int64_t>()) == logit_rows.end();
    return static_cast<int64_t>(logit_rows.size()) < N && ascending ? &logit_rows : nullptr;
}

// 0, 1, ..., n - 1 in the workspace: the head's rows once a layer kept only n rows.
const std::vector<int64_t>& first_rows(ForwardWorkspace& ws, int64_t n) {
    ws.head_rows.resize(n);
    std::iota(ws.head_rows.begin(), ws.head_rows.end(), int64_t{0});
    return ws.head_rows;
}

class ForwardPass {
  public:
    ForwardPass(const ModelConfig& c, const ModelWeights& w, const ForwardOptions& o, ForwardWorkspace& ws,
                CacheAccess& cache)
        : ctx_(ws.ctx),
          c_(c),
          w_(w),
          bf16_(o.bf16_activations),
          hf_(o.bf16_activations && o.hf_rounding),
          form_(o.gdn_form),
          ws_(ws),
          sc_(ws.sc),
          cache_(cache) {}

    // Weight matmul: bf16 inputs in bf16 mode; outputs rounded only when emulating HF.
    void lin(const float* x, int64_t M, const LinearWeight& w, float* y) const {
        linear(ctx_, x, M, w, y, bf16_, hf_);
    }

    // A mixer over the batch's N rows (caches and states advance for all of them); out [N, H], or with
    // keep (ascending rows of the batch) [R, H]: only those rows' outputs, packed in that order (the last
    // layer, when only the head reads its output).
    void gdn_block(const LayerWeights& L, int gi, const float* h, int64_t N, const std::vector<SeqSpan>& seqs,
                   float* out, const std::vector<int64_t>* keep = nullptr);
    void attention_block(const LayerWeights& L, int ai, const float* h, int64_t N,
                         const std::vector<SeqSpan>& seqs, const int64_t* pos, float* out,
                         const std::vector<int64_t>* keep = nullptr);
    void ffn(const LayerWeights& L, const float* h, int64_t N, float* out);

  private:
    const ExecContext& ctx_;
    const ModelConfig& c_;
    const ModelWeights& w_;
    const bool bf16_;
    const bool hf_;  // round at HF's rounding points (all ops' bf16 flags)
    const GdnForm form_;
    ForwardWorkspace& ws_;
    ops::Scratch& sc_;
    CacheAccess& cache_;
};

void ForwardPass::gdn_block(const LayerWeights& L, int gi, const float* h, int64_t N,
                            const std::vector<SeqSpan>& seqs, float* out, const std::vector<int64_t>* keep) {
    const GdnWeights& g = L.gdn;
    const int64_t VD = c_.gdn_value_dim();
    const int64_t ldp = g.in_proj.N();  // q|k|v (CD) | z (VD) | b (Hv) | a (Hv)
    GDN_CHECK(ldp == c_.gdn_in_proj_floats(), "GDN in_proj width %lld", (long long)ldp);
    float* proj = sc_.f32(ctx_, PROJ, N * ldp);
    lin(h, N, g.in_proj, proj);
    std::vector<ops::GdnSeq>& gs = ws_.gdn_seqs;
    gs.clear();
    std::vector<float*>& outs = ws_.gdn_out;
    outs.clear();
    outs.reserve(2 * N);  // pointers into it are kept below: no reallocation
    for (int i = 0; i < static_cast<int>(seqs.size()); ++i) {
        float* conv = cache_.conv(i, gi);
        float* ssm = cache_.ssm(i, gi);
        if (cache_.fresh(i)) {  // a new sequence: zero exactly its own state (no pass over other slots)
            std::memset(conv, 0, c_.gdn_conv_state_floats() * sizeof(float));
            std::memset(ssm, 0, c_.gdn_ssm_state_floats() * sizeof(float));
        }
        ops::GdnSeq g{seqs[i].t0, seqs[i].T, conv, ssm};
        if (cache_.verified(i)) {
            g.keep_state = true;
            std::memcpy(cache_.verify_rows(i, gi), proj + seqs[i].t0 * ldp, seqs[i].T * ldp * sizeof(float));
        } else if (cache_.has_state_outputs(i)) {
            const size_t o = outs.size();
            for (int64_t t = 0; t < seqs[i].T; ++t) outs.push_back(cache_.conv_out(i, gi, t));
            for (int64_t t = 0; t < seqs[i].T; ++t) outs.push_back(cache_.ssm_out(i, gi, t));
            g.conv_out = outs.data() + o;
            g.ssm_out = outs.data() + o + seqs[i].T;
        }
        gs.push_back(g);
    }
    const ops::GdnParams p = gdn_params(c_, g, form_);
    float* normed = sc_.f32(ctx_, ACT, N * VD);
    ops::gdn_mixer(ctx_, proj, ldp, gs, p, normed, sc_, hf_);
    lin(normed, keep ? pack_rows(normed, VD, *keep) : N, g.out, out);
}

void ForwardPass::attention_block(const LayerWeights& L, int ai, const float* h, int64_t N,
                                  const std::vector<SeqSpan>& seqs, const int64_t* pos, float* out,
                                  const std::vector<int64_t>* keep) {
    const AttentionWeights& A = L.attn;
    const int64_t Hq = c_.attn_heads, Hkv = c_.attn_kv_heads, D = c_.head_dim;
    const int64_t ld = A.qkv.N();  // per token: Hq x [query D | gate D], then k (Hkv*D), then v (Hkv*D)
    float* qkv = sc_.f32(ctx_, PROJ, N * ld);
    lin(h, N, A.qkv, qkv);
    // q heads sit at stride 2D inside a token row (interleaved with their gates), then the k heads at D:
    // both normed and roped in place.
    ops::qk_norm_rope(ctx_, qkv, ld, N, {{0, Hq, 2 * D, A.q_norm}, {Hq * 2 * D, Hkv, D, A.k_norm}}, D,
                      c_.rms_eps, c_.rotary_dim, c_.rope_theta, pos, hf_);
    // Each token's [query | gate] heads split into q and gate [N, Hq, D], and its K/V rows appended to
    // its sequence's cache: one pass over the pool, tokens being independent (on the calling thread,
    // 8192 head copies and 512 rows took 0.35 ms a layer of a 512-token prefill).
    const int64_t row = Hkv * D;
    float* q = sc_.f32(ctx_, Q, N * Hq * D);
    float* gate = sc_.f32(ctx_, GATE, N * Hq * D);
    for (int i = 0; i < static_cast<int>(seqs.size()); ++i) cache_.reserve_kv(i, ai, seqs[i].T);
    ctx_.pool().parallel_for(
        N,
        [&](int64_t t0, int64_t t1) {
            size_t i = 0;
            for (int64_t t = t0; t < t1; ++t) {
                for (int64_t hh = 0; hh < Hq; ++hh) {
                    std::memcpy(q + (t * Hq + hh) * D, qkv + t * ld + hh * 2 * D, D * sizeof(float));
                    std::memcpy(gate + (t * Hq + hh) * D, qkv + t * ld + hh * 2 * D + D, D * sizeof(float));
                }
                while (t >= seqs[i].t0 + seqs[i].T) ++i;
                const float* kt = qkv + t * ld + Hq * 2 * D;
                cache_.write_kv(static_cast<int>(i), ai, t - seqs[i].t0, kt, kt + row);
            }
        },
        row_grain(2 * ld));
    std::vector<ops::AttnSeq>& as = ws_.attn_seqs;
    as.clear();
    size_t k = 0;  // keep: the first kept row not yet placed
    for (int i = 0; i < static_cast<int>(seqs.size()); ++i) {
        const SeqSpan& s = seqs[i];
        if (keep) {
            // Only the sequence's kept rows attend: each as its own query, a row of a longer prefill on the
            // prefill kernels (its bits are those it gets among all its rows); all rows kept: as below.
            const size_t k0 = k;
            while (k < keep->size() && (*keep)[k] < s.t0 + s.T) ++k;
            if (static_cast<int64_t>(k - k0) < s.T) {
                for (size_t j = k0; j < k; ++j) {
                    const int64_t t = (*keep)[j] - s.t0;
                    const bool prefill_row = s.T > 1 && !cache_.verified(i);
                    as.push_back({s.t0 + t, 1, s.n_past + t, cache_.rows(i, ai), prefill_row});
                }
                continue;
            }
        }
        if (cache_.verified(
                i)) {  // each verified row as the decode step it stands for (same kernel, same bits)
            for (int64_t t = 0; t < s.T; ++t) as.push_back({s.t0 + t, 1, s.n_past + t, cache_.rows(i, ai)});
        } else {
            as.push_back({s.t0, s.T, s.n_past, cache_.rows(i, ai)});
        }
    }
    float* o = sc_.f32(ctx_, ACT, N * Hq * D);
    if (!as.empty()) ops::attention(ctx_, q, gate, Hq * D, as, Hq, Hkv, D, o, sc_, bf16_);
    const int64_t R = keep ? pack_rows(o, Hq * D, *keep) : N;
    ref::round_activations(o, R * Hq * D, hf_);
    lin(o, R, A.o, out);
}

void ForwardPass::ffn(const LayerWeights& L, const float* h, int64_t N, float* out) {
    if (L.is_moe) {
        const ops::MoeShape shape{c_.hidden, c_.n_experts, c_.n_experts_per_tok, c_.norm_topk_prob,
                                  c_.shared_intermediate > 0};
        ops::moe(ctx_, L.moe, shape, h, N, out, bf16_, hf_, sc_, ws_.moe);
    } else {
        ops::mlp(ctx_, L.mlp, h, N, out, bf16_, hf_, sc_, PROJ, ACT);
    }
}

}  // namespace

Status Model::forward(const std::vector<SequenceInput>& batch, const ForwardOptions& opt,
                      std::vector<float>* logits, std::vector<int32_t>* greedy_ids,
                      std::vector<float>* hidden) const {
    if (batch.empty() || !batch[0].state)
        return forward(*new_forward_workspace(ctx_), batch, opt, logits, greedy_ids, hidden);
    if (!batch[0].state->workspace) batch[0].state->workspace = new_forward_workspace(ctx_);
    return forward(*batch[0].state->workspace, batch, opt, logits, greedy_ids, hidden);
}

Status Model::forward(ForwardWorkspace& ws, const std::vector<SequenceInput>& batch,
                      const ForwardOptions& opt, std::vector<float>* logits, std::vector<int32_t>* greedy_ids,
                      std::vector<float>* hidden) const {
    const int64_t V = config_.vocab;
    // Validate everything before touching any state.
    for (const auto& s : batch) {
        if (!s.state || s.n_tokens <= 0)
            return Status::error("forward: every sequence needs a state and >= 1 token");
        for (int64_t i = 0; i < s.n_tokens; ++i)
            if (s.tokens[i] < 0 || s.tokens[i] >= V)
                return Status::error(
                    strprintf("token id %d is out of range [0, %lld)", s.tokens[i], (long long)V));
        for (const auto& o : batch)
            if (&o != &s && o.state == s.state)
                return Status::error("forward: a sequence appears twice in one batch");
        if (s.state->kv_dtype == DType::BF16 && !opt.bf16_activations)
            return Status::error("forward: a bf16 KV cache holds K/V exactly only with bf16 activations");
    }
    if (batch.empty()) return Status::ok();
    ws.ids.clear();
    ws.pos.clear();
    ws.spans.clear();
    ws.logit_rows.clear();
    for (const auto& s : batch) {
        ws.spans.push_back({static_cast<int64_t>(ws.ids.size()), s.n_tokens, s.state->n_past});
        for (int64_t i = 0; i < s.n_tokens; ++i) {
            if (s.all_logits || i == s.n_tokens - 1)
                ws.logit_rows.push_back(static_cast<int64_t>(ws.ids.size()));
            ws.ids.push_back(s.tokens[i]);
            ws.pos.push_back(s.state->n_past + i);  // M-RoPE with text-only positions == 1-D RoPE
        }
    }
    SequenceStateAccess access(batch, ws.spans,
                               static_cast<int64_t>(config_.attn_kv_heads) * config_.head_dim);
    run(ws, ws.ids.data(), ws.pos.data(), ws.logit_rows, access, opt, logits, greedy_ids, hidden);
    for (const auto& s : batch) s.state->n_past += s.n_tokens;
    return Status::ok();
}

Status Model::forward(ForwardWorkspace& ws, const BatchPlan& plan, KvCache& kv, StateSlots& slots,
                      const ForwardOptions& opt, std::vector<float>* logits, std::vector<int32_t>* greedy_ids,
                      std::vector<float>* hidden) const {
    const int64_t V = config_.vocab;
    if (kv.dtype() == DType::BF16 && !opt.bf16_activations)
        return Status::error("forward: a bf16 KV cache holds K/V exactly only with bf16 activations");
    for (int32_t t : plan.token_ids)
        if (t < 0 || t >= V)
            return Status::error(strprintf("token id %d is out of range [0, %lld)", t, (long long)V));
    if (plan.n_tokens() == 0) return Status::ok();
    if (!plan.gdn_verify.empty()) {
        if (static_cast<int64_t>(plan.gdn_verify.size()) != plan.n_seqs())
            return Status::error("forward: gdn_verify must have one entry per sequence");
        for (int64_t s = 0; s < plan.n_seqs(); ++s)
            if (plan.gdn_verify[s] &&
                (s >= slots.verify_seqs() ||
                 plan.cu_seqlens[s + 1] - plan.cu_seqlens[s] > slots.verify_tokens_per_seq() ||
                 slots.verify_row_floats() != config_.gdn_in_proj_floats()))
                return Status::error(
                    strprintf("forward: verified sequence %lld does not fit the verify staging rows "
                              "(%d sequences of %lld tokens)",
                              (long long)s, slots.verify_seqs(), (long long)slots.verify_tokens_per_seq()));
    }
    spans_of(plan, &ws.spans);
    PlanAccess access(plan, kv, &slots);
    run(ws, plan.token_ids.data(), plan.positions.data(), plan.logits_rows, access, opt, logits, greedy_ids,
        hidden);
    return Status::ok();
}

Status Model::commit_verified(ForwardWorkspace& ws, const std::vector<GdnCommit>& commits, StateSlots& slots,
                              const ForwardOptions& opt) const {
    const ModelConfig& c = config_;
    const int64_t ldp = c.gdn_in_proj_floats(), tmax = slots.verify_tokens_per_seq();
    for (const GdnCommit& m : commits)
        if (m.seq < 0 || m.seq >= slots.verify_seqs() || m.n_tokens < 1 || m.n_tokens > tmax ||
            m.from_slot < 0 || m.from_slot >= slots.n_slots() || m.to_slot < 0 ||
            m.to_slot >= slots.n_slots() || slots.verify_row_floats() != ldp)
            return Status::error(
                strprintf("commit_verified: bad commit (sequence %d, %lld tokens, slots %d -> %d)", m.seq,
                          (long long)m.n_tokens, m.from_slot, m.to_slot));
    if (commits.empty() || c.n_gdn_layers() == 0) return Status::ok();
    // Sequence s's rows of a layer are rows [s * tmax, s * tmax + n) of that layer's staging area. Every
    // token's state goes to to_slot (the first one reads from_slot): the last accepted token's state
    // ends there, with the arithmetic of the verify (and of a decode step) that computed it before.
    // One sequence list per layer, and all layers in one parallel pass.
    const int L = c.n_gdn_layers();
    if (ws.commit_seqs.size() < static_cast<size_t>(L)) ws.commit_seqs.resize(L);
    std::vector<float*>& outs = ws.gdn_out;
    outs.clear();
    outs.reserve(2 * L * commits.size() * tmax);  // pointers into it are kept: no reallocation
    std::vector<ops::GdnCommitLayer>& layers = ws.commit_layers;
    layers.clear();
    std::vector<ops::GdnParams>& params = ws.commit_params;
    params.clear();
    params.reserve(L);
    int gi = 0;
    for (const LayerWeights& Lw : weights_->layers) {
        if (Lw.kind == LayerKind::FULL_ATTENTION) continue;
        std::vector<ops::GdnSeq>& gs = ws.commit_seqs[gi];
        gs.clear();
        for (const GdnCommit& m : commits) {
            ops::GdnSeq g{m.seq * tmax, m.n_tokens, slots.conv(gi, m.from_slot), slots.ssm(gi, m.from_slot)};
            const size_t o = outs.size();
            outs.insert(outs.end(), m.n_tokens, slots.conv(gi, m.to_slot));
            outs.insert(outs.end(), m.n_tokens, slots.ssm(gi, m.to_slot));
            g.conv_out = outs.data() + o;
            g.ssm_out = outs.data() + o + m.n_tokens;
            gs.push_back(g);
        }
        params.push_back(gdn_params(c, Lw.gdn, opt.gdn_form));
        layers.push_back({slots.verify_rows(gi, 0), ldp, &gs, &params.back()});
        ++gi;
    }
    ops::gdn_commit(ws.ctx, layers, ws.sc, opt.bf16_activations && opt.hf_rounding);
    return Status::ok();
}

Status Model::mtp_forward(ForwardWorkspace& ws, const BatchPlan& plan, const float* hidden, KvCache& kv,
                          const ForwardOptions& opt, std::vector<float>* logits,
                          std::vector<int32_t>* greedy_ids, std::vector<float>* hidden_out) const {
    if (!weights_->mtp) return Status::error("mtp_forward: the model was loaded without its MTP layer");
    const int64_t V = config_.vocab;
    if (kv.n_layers() != config_.n_attention_layers() + 1)
        return Status::error("mtp_forward: the KV cache has no layer for the MTP draft layer");
    for (int32_t t : plan.token_ids)
        if (t < 0 || t >= V)
            return Status::error(strprintf("token id %d is out of range [0, %lld)", t, (long long)V));
    if (plan.n_tokens() == 0) return Status::ok();
    spans_of(plan, &ws.spans);
    PlanAccess access(plan, kv, nullptr);  // the MTP layer has no GDN state
    run_mtp(ws, plan.token_ids.data(), plan.positions.data(), hidden, plan.logits_rows, access, opt, logits,
            greedy_ids, hidden_out);
    return Status::ok();
}

Status Model::mtp_forward(SequenceState& st, const int32_t* next_tokens, const float* hidden, int64_t n,
                          const ForwardOptions& opt, std::vector<float>* logits,
                          std::vector<float>* hidden_out) const {
    if (!weights_->mtp) return Status::error("mtp_forward: the model was loaded without its MTP layer");
    if (static_cast<int>(st.k_cache.size()) != config_.n_attention_layers() + 1)
        return Status::error(
            "mtp_forward: the sequence state has no MTP KV cache (Model::new_state of an MTP model)");
    if (n <= 0) return Status::ok();
    for (int64_t i = 0; i < n; ++i)
        if (next_tokens[i] < 0 || next_tokens[i] >= config_.vocab)
            return Status::error(
                strprintf("token id %d is out of range [0, %d)", next_tokens[i], config_.vocab));
    if (!st.workspace) st.workspace = new_forward_workspace(ctx_);
    ForwardWorkspace& ws = *st.workspace;
    ws.spans.assign(1, {0, n, st.mtp_past});
    ws.pos.clear();
    ws.logit_rows.clear();
    for (int64_t i = 0; i < n; ++i) {
        ws.pos.push_back(st.mtp_past + i);
        ws.logit_rows.push_back(i);
    }
    std::vector<SequenceInput> one{{&st, next_tokens, n, true}};
    SequenceStateAccess access(one, ws.spans, static_cast<int64_t>(config_.attn_kv_heads) * config_.head_dim);
    run_mtp(ws, next_tokens, ws.pos.data(), hidden, ws.logit_rows, access, opt, logits, nullptr, hidden_out);
    st.mtp_past += n;
    return Status::ok();
}

void Model::head(ForwardWorkspace& ws, const float* h, const std::vector<int64_t>& rows,
                 const ForwardOptions& opt, std::vector<float>* logits, std::vector<int32_t>* greedy_ids,
                 const LinearWeight* argmax_head) const {
    const int64_t H = config_.hidden, V = config_.vocab;
    const int64_t R = static_cast<int64_t>(rows.size());
    float* last = ws.sc.f32(ws.ctx, LAST_ROWS, R * H);
    for (int64_t r = 0; r < R; ++r) std::memcpy(last + r * H, h + rows[r] * H, H * sizeof(float));
    if (greedy_ids) {
        const size_t off = greedy_ids->size();
        greedy_ids->resize(off + R);
        linear_argmax(ws.ctx, last, R, argmax_head ? *argmax_head : weights_->lm_head_packed,
                      greedy_ids->data() + off, opt.bf16_activations);
    } else {
        const size_t off = logits->size();
        logits->resize(off + R * V);
        linear(ws.ctx, last, R, weights_->lm_head_packed, logits->data() + off, opt.bf16_activations,
               opt.bf16_activations && opt.hf_rounding);
    }
}

void Model::run(ForwardWorkspace& ws, const int32_t* ids, const int64_t* pos,
                const std::vector<int64_t>& logit_rows, CacheAccess& cache, const ForwardOptions& opt,
                std::vector<float>* logits, std::vector<int32_t>* greedy_ids,
                std::vector<float>* hidden) const {
    // Decode GEMVs steal claims from descheduled workers; the scope's end waits for those workers.
    ThreadPool::StealScope steal(ws.ctx.pool());
    const ModelConfig& c = config_;
    const ModelWeights& w = *weights_;
    const int64_t H = c.hidden;
    int64_t N = 0;
    bool all_decode = true, verify = false;  // profiler tables: decode steps, verifications, the rest
    for (size_t i = 0; i < ws.spans.size(); ++i) {
        const SeqSpan& s = ws.spans[i];
        N += s.T;
        const bool verified = cache.verified(static_cast<int>(i));
        verify |= verified;
        all_decode &= s.T == 1 || verified;
    }
    ProfiledStep step(ws.ctx.profiler(), all_decode ? verify ? "verify" : "decode" : "prefill");
    ops::Scratch& sc = ws.sc;
    ForwardPass fp(c, w, opt, ws, cache);
    const bool bf16 = opt.bf16_activations && opt.hf_rounding;  // rounding outside the matmuls
    float* x = sc.f32(ws.ctx, X, N * H);                        // residual stream [N, H]
    float* hm = sc.f32(ws.ctx, H_MIX, N * H);                   // mixer input: x normed by input_layernorm
    float* hf = sc.f32(ws.ctx, H_FFN, N * H);  // FFN input: x normed by post_attention_layernorm
    float* mix = sc.f32(ws.ctx, MIX, N * H);
    float* ffn = sc.f32(ws.ctx, FFN, N * H);
    ops::embedding(ws.ctx, w.embed, w.embed_packed, ids, N, x, bf16);
    ops::rms_norm(ws.ctx, x, N, H, w.layers[0].input_norm, c.rms_eps, hm, bf16);
    // After the last layer's mixer only the rows the head reads matter, unless every row's hidden state
    // is returned: that layer's attention queries, output projection and FFN and the final norm run on
    // those rows only (a prompt's last row; none for a prompt chunk that is not its last). Every op's
    // row does not depend on the other rows of its batch, so the logits are bitwise those of the full
    // pass (Presets.OutputRowsOnlyMatchTheFullPass in test_model.cpp).
    const std::vector<int64_t>* keep = hidden ? nullptr : rows_to_keep(logit_rows, N);
    int gi = 0, ai = 0;
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights& L = w.layers[l];
        const bool last = l + 1 == c.n_layers;
        const std::vector<int64_t>* out_rows = last ? keep : nullptr;
        if (L.kind == LayerKind::FULL_ATTENTION)
            fp.attention_block(L, ai++, hm, N, ws.spans, pos, mix, out_rows);
        else
            fp.gdn_block(L, gi++, hm, N, ws.spans, mix, out_rows);
        if (out_rows) {
            N = pack_rows(x, H, *out_rows);  // the residual rows that go on, as the mixer's output
            if (N == 0) break;               // no row reaches the head
        }
        ops::add_rms_norm(ws.ctx, x, mix, N, H, L.post_norm, c.rms_eps, hf,
                          bf16);  // x += mixer; hf = post norm
        fp.ffn(L, hf, N, ffn);
        // x += FFN; hm = next layer's input norm, or the final norm after the last layer
        const float* next_norm = last ? w.final_norm : w.layers[l + 1].input_norm;
        ops::add_rms_norm(ws.ctx, x, ffn, N, H, next_norm, c.rms_eps, hm, bf16);
    }
    if (hidden) hidden->insert(hidden->end(), hm, hm + N * H);
    if (!logit_rows.empty()) head(ws, hm, keep ? first_rows(ws, N) : logit_rows, opt, logits, greedy_ids);
}

void Model::run_mtp(ForwardWorkspace& ws, const int32_t* ids, const int64_t* pos, const float* hidden,
                    const std::vector<int64_t>& logit_rows, CacheAccess& cache, const ForwardOptions& opt,
                    std::vector<float>* logits, std::vector<int32_t>* greedy_ids,
                    std::vector<float>* hidden_out) const {
    ThreadPool::StealScope steal(ws.ctx.pool());  // as run()
    const ModelConfig& c = config_;
    const ModelWeights& w = *weights_;
    const MtpWeights& m = *w.mtp;
    const int64_t H = c.hidden;
    int64_t N = 0;
    for (const SeqSpan& s : ws.spans) N += s.T;
    ProfiledStep step(ws.ctx.profiler(), "mtp draft");
    ops::Scratch& sc = ws.sc;
    ForwardPass fp(c, w, opt, ws, cache);
    const bool bf16 = opt.bf16_activations && opt.hf_rounding;
    // u = [RMSNorm1p(e_{t+1}) | RMSNorm1p(h_t)]  [N, 2H], the embedding half first; x = fc(u)  [N, H]
    float* emb = sc.f32(ws.ctx, MTP_EMB, N * H);
    float* en = sc.f32(ws.ctx, H_FFN, N * H);
    float* hn = sc.f32(ws.ctx, MIX, N * H);
    ops::embedding(ws.ctx, w.embed, w.embed_packed, ids, N, emb, bf16);
    ops::rms_norm(ws.ctx, emb, N, H, m.pre_fc_norm_embedding, c.rms_eps, en, bf16);
    ops::rms_norm(ws.ctx, hidden, N, H, m.pre_fc_norm_hidden, c.rms_eps, hn, bf16);
    float* u = sc.f32(ws.ctx, MTP_CAT, N * 2 * H);
    for (int64_t t = 0; t < N; ++t) {
        std::memcpy(u + t * 2 * H, en + t * H, H * sizeof(float));
        std::memcpy(u + t * 2 * H + H, hn + t * H, H * sizeof(float));
    }
    float* x = sc.f32(ws.ctx, X, N * H);
    fp.lin(u, N, m.fc, x);
    // One decoder layer (full attention on the MTP layer's own KV cache: the cache's last layer).
    const LayerWeights& L = m.layer;
    float* hm = sc.f32(ws.ctx, H_MIX, N * H);
    float* hf = sc.f32(ws.ctx, H_FFN, N * H);
    float* mix = sc.f32(ws.ctx, MIX, N * H);
    float* ffn = sc.f32(ws.ctx, FFN, N * H);
    ops::rms_norm(ws.ctx, x, N, H, L.input_norm, c.rms_eps, hm, bf16);
    // Past its attention mixer the layer runs on the logit rows only (as the main model's last layer;
    // a catch-up row that drafts nothing only writes the layer's K/V).
    const std::vector<int64_t>* keep = rows_to_keep(logit_rows, N);
    fp.attention_block(L, c.n_attention_layers(), hm, N, ws.spans, pos, mix, keep);
    if (keep) N = pack_rows(x, H, *keep);
    if (N > 0) {
        ops::add_rms_norm(ws.ctx, x, mix, N, H, L.post_norm, c.rms_eps, hf, bf16);
        fp.ffn(L, hf, N, ffn);
        ops::add_rms_norm(ws.ctx, x, ffn, N, H, m.norm, c.rms_eps, hm,
                          bf16);  // hm = mtp.norm(x): the draft hidden
    }
    const std::vector<int64_t>& rows = keep ? first_rows(ws, N) : logit_rows;  // hm's rows of the logit rows
    if (hidden_out)
        for (int64_t r : rows) hidden_out->insert(hidden_out->end(), hm + r * H, hm + (r + 1) * H);
    // Draft ids come from the quantized copy of the lm_head when there is one (a draft needs no exact
    // argmax: verification decides); logits (the reference checks) from the lm_head itself.
    if (!rows.empty())
        head(ws, hm, rows, opt, logits, greedy_ids, m.draft_head.packed.N ? &m.draft_head : nullptr);
}

}  // namespace gdn
