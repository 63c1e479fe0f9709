#include "model/weights.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/log.h"
#include "model/packed_checkpoint.h"
#include "model/quant_scheme.h"
#include "ops/argmax_screen.h"
#include "ops/dispatch.h"
#include "ops/quant/ggml_repack.h"

namespace gdn {

namespace {

std::string shape_str(std::initializer_list<int64_t> dims) {
    std::string s = "[";
    bool first = true;
    for (int64_t d : dims) {
        if (!first) s += ", ";
        s += std::to_string(d);
        first = false;
    }
    return s + "]";
}

using Quant = std::optional<WeightFormat>;

class Loader {
  public:
    // prepacked: the checkpoint was written by `gdn quantize` (model/packed_checkpoint.h): the matrices
    // of the quantized linears are not in it, their packed forms are.
    Loader(const ExecContext& ctx, const ModelConfig& c, std::shared_ptr<Checkpoint> ck, ModelWeights* w,
           Quant q, bool prepacked)
        : ctx_(ctx),
          c_(c),
          ck_(std::move(ck)),
          w_(w),
          q_(q),
          prepacked_(prepacked),
          gguf_(ck_->layout() == Checkpoint::Layout::GGUF) {}

    // A tensor that must exist with exactly this shape.
    Result<TensorView> get(const std::string& name, std::initializer_list<int64_t> dims) {
        const TensorView* t = ck_->find(name);
        if (!t)
            return Status::error(strprintf("%s: missing tensor '%s' (needed by the %s config)",
                                           ck_->dir().c_str(), name.c_str(), family_name(c_.family)));
        if (t->dtype == DType::U8)
            return Status::error(
                strprintf("%s: tensor '%s' has dtype U8; it must be a float tensor (F32, BF16, F16)",
                          ck_->dir().c_str(), name.c_str()));
        const char* from = gguf_ ? "the GGUF metadata" : "config.json";
        bool ok = t->rank == static_cast<int>(dims.size());
        int i = 0;
        for (int64_t d : dims) ok = ok && i < t->rank && t->shape[i++] == d;
        if (!ok)
            return Status::error(strprintf("%s: tensor '%s' has shape %s, expected %s from %s",
                                           ck_->dir().c_str(), name.c_str(), t->shape_str().c_str(),
                                           shape_str(dims).c_str(), from));
        used_.insert(name);
        taken_.push_back(*t);
        return *t;
    }
    // The source matrix of a linear that will be packed (quantized when q is set). From a pre-quantized
    // checkpoint: a view with the expected shape and no data (the packed form is read by linear()).
    Result<TensorView> matrix(const std::string& name, std::initializer_list<int64_t> dims) {
        if (prepacked_) return TensorView::contiguous(nullptr, DType::BF16, dims);
        GDN_ASSIGN_OR_RETURN(TensorView t, get(name, dims));
        if (q_) quantized_sources_.insert(name);
        return t;
    }
    // A packed linear named as for_each_linear names it, stacked from `parts` ([N_i, K], one K): packed
    // (quantized to `format`) from the parts, or read from a pre-quantized checkpoint.
    Result<LinearWeight> linear(const std::string& name, const std::vector<TensorView>& parts, Quant format,
                                const std::function<void(int64_t, int64_t)>& rows_done = nullptr) {
        if (!prepacked_) return tally(parts, make_linear(ctx_, parts, format_of(name, format), rows_done));
        int64_t N = 0;
        for (const TensorView& t : parts) N += t.shape[0];
        LinearWeight lw;
        GDN_ASSIGN_OR_RETURN(lw.packed, read_packed_weight(*ck_, name, N, parts[0].shape[1]));
        used_.insert(kPackedPrefix + name);
        return lw;
    }
    Result<LinearWeight> swiglu_linear(const std::string& name, const TensorView& gate,
                                       const TensorView& up) {
        if (!prepacked_) return tally({gate, up}, make_swiglu_linear(ctx_, gate, up, format_of(name, q_)));
        return linear(name, {gate, up}, q_);
    }
    Quant quantization() const { return q_; }
    bool gguf() const { return gguf_; }
    // Only the packed weights make the layer (no float view kept for the reference path): quantized at
    // load, or a GGUF file's (its ggml rows are no float views; their packed form is exact).
    bool packed_only() const { return q_.has_value() || gguf_; }
    // The MTP layer may be packed in another format than the rest (LoadOptions::mtp_layer).
    void set_quantization(Quant q) { q_ = q; }
    // The tensors read in float form and kept so (norms, conv taps, gates, router...): what a
    // pre-quantized checkpoint must carry beside the packed weights.
    std::vector<std::string> float_tensors() const {
        std::vector<std::string> v;
        for (const std::string& n : used_)
            if (!quantized_sources_.count(n) && n.rfind(kPackedPrefix, 0) != 0) v.push_back(n);
        return v;
    }
    // Drops the resident pages of every tensor taken since the last call (quantized loads: their
    // values now live in the packed copies; the mapping re-reads from the file if ever touched again).
    void release_taken() {
        for (const TensorView& t : taken_) ck_->release(t);
        taken_.clear();
    }
    // A small tensor converted to f32, optionally transformed elementwise.
    template <typename F>
    Result<const float*> get_f32(const std::string& name, std::initializer_list<int64_t> dims, F transform) {
        GDN_ASSIGN_OR_RETURN(TensorView t, get(name, dims));
        float* p = w_->small.alloc_f32(t.numel());
        const int64_t K = t.shape[t.rank - 1];
        for (int64_t r = 0; r < t.numel() / K; ++r) row_to_f32(t, r, p + r * K);
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = transform(p[i]);
        return p;
    }
    // A zero-centred RMSNorm weight as (1 + w): a GGUF file stores it so already.
    Result<const float*> get_norm1p(const std::string& name, int64_t n) {
        if (gguf_) return get_plain(name, {n});
        return get_f32(name, {n}, [](float x) { return 1.0f + x; });
    }
    Result<const float*> get_plain(const std::string& name, std::initializer_list<int64_t> dims) {
        return get_f32(name, dims, [](float x) { return x; });
    }
    // Allocates an owned matrix of `rows` rows like those of the 2-D view t (its dtype, ggml type, row
    // bytes).
    TensorView alloc_rows_like(const TensorView& t, int64_t rows) {
        Buffer b(rows * t.stride[0] * static_cast<int64_t>(dtype_size(t.dtype)));
        TensorView v = t;
        v.shape[0] = rows;
        v.data = b.data();
        w_->owned.push_back(std::move(b));
        return v;
    }
    Result<MlpWeights> mlp(const std::string& p, int64_t inter) {
        MlpWeights m;
        GDN_ASSIGN_OR_RETURN(m.gate, matrix(p + "gate_proj.weight", {inter, c_.hidden}));
        GDN_ASSIGN_OR_RETURN(m.up, matrix(p + "up_proj.weight", {inter, c_.hidden}));
        GDN_ASSIGN_OR_RETURN(m.down, matrix(p + "down_proj.weight", {c_.hidden, inter}));
        return m;
    }
    Status load_attention(const std::string& p, AttentionWeights* a);
    Status load_gdn(const std::string& p, GdnWeights* g);
    Status load_moe(const std::string& p, MoeWeights* m);
    const std::set<std::string>& used() const { return used_; }

  private:
    // A GGUF file's linear: counted under its source types and what they became (ModelWeights::gguf_packing).
    LinearWeight tally(const std::vector<TensorView>& parts, LinearWeight lw) {
        if (!gguf_) return lw;
        std::set<std::string> types;
        for (const TensorView& t : parts)
            types.insert(t.dtype == DType::GGML ? ggml_type_info(t.ggml_type)->name : dtype_name(t.dtype));
        std::string key;
        for (const std::string& t : types) key += (key.empty() ? "" : "+") + t;
        const bool mixed = types.size() > 1;
        key += strprintf(" -> %s (%s)", weight_format_name(lw.packed.format),
                         is_quantized(lw.packed.format) ? "native"
                         : mixed                        ? "widened: a fused group of mixed types"
                                                        : "widened");
        w_->gguf_packing[key]++;
        return lw;
    }

    // The format the scheme (--quantization) gives the linear `name` (model/quant_scheme.h); none stays none.
    Quant format_of(const std::string& name, Quant scheme) const {
        return scheme ? Quant(scheme_format(*scheme, name, c_.n_layers)) : scheme;
    }

    const ExecContext& ctx_;
    const ModelConfig& c_;
    std::shared_ptr<Checkpoint> ck_;
    ModelWeights* w_;
    Quant q_;
    bool prepacked_;
    bool gguf_;
    std::set<std::string> used_, quantized_sources_;
    std::vector<TensorView> taken_;
};

// Slice rows [r0, r0+n) of a 2-D view, or the e-th matrix of a 3-D view.
TensorView rows_of(const TensorView& t, int64_t r0, int64_t n) {
    TensorView v = t;
    v.shape[0] = n;
    v.data = static_cast<char*>(t.data) + r0 * t.stride[0] * static_cast<int64_t>(dtype_size(t.dtype));
    return v;
}
TensorView matrix_of(const TensorView& t3, int64_t e) {
    TensorView v = t3;  // dtype, ggml type and the inner strides as they are
    v.rank = 2;
    v.shape[0] = t3.shape[1], v.shape[1] = t3.shape[2], v.shape[2] = 1;
    v.stride[0] = t3.stride[1], v.stride[1] = t3.stride[2], v.stride[2] = 0;
    v.data = static_cast<char*>(t3.data) + e * t3.stride[0] * static_cast<int64_t>(dtype_size(t3.dtype));
    return v;
}

// Copies one row of a contiguous-row matrix (float elements or ggml blocks) into another like it.
void copy_row(const TensorView& src, int64_t src_row, const TensorView& dst, int64_t dst_row) {
    const size_t bytes = src.stride[0] * dtype_size(src.dtype);
    std::memcpy(dst.row(dst_row), src.row(src_row), bytes);
}

Status Loader::load_attention(const std::string& p, AttentionWeights* a) {
    const int64_t H = c_.hidden, D = c_.head_dim, Hq = c_.attn_heads, Hkv = c_.attn_kv_heads;
    if (!c_.attn_output_gate)
        return Status::error(ck_->dir() +
                             ": attn_output_gate=false is not supported (all released checkpoints "
                             "use the gated q_proj)");
    GDN_ASSIGN_OR_RETURN(a->q_proj, matrix(p + "q_proj.weight", {Hq * 2 * D, H}));
    GDN_ASSIGN_OR_RETURN(a->k_proj, matrix(p + "k_proj.weight", {Hkv * D, H}));
    GDN_ASSIGN_OR_RETURN(a->v_proj, matrix(p + "v_proj.weight", {Hkv * D, H}));
    GDN_ASSIGN_OR_RETURN(a->o_proj, matrix(p + "o_proj.weight", {H, Hq * D}));
    GDN_ASSIGN_OR_RETURN(a->q_norm, get_norm1p(p + "q_norm.weight", D));
    GDN_ASSIGN_OR_RETURN(a->k_norm, get_norm1p(p + "k_norm.weight", D));
    return Status::ok();
}

Status Loader::load_gdn(const std::string& p, GdnWeights* g) {
    const int64_t H = c_.hidden, Hk = c_.gdn_k_heads, Hv = c_.gdn_v_heads, Dk = c_.gdn_k_dim,
                  Dv = c_.gdn_v_dim;
    const int64_t KD = Hk * Dk, VD = Hv * Dv, CD = 2 * KD + VD, K = c_.conv_kernel, r = Hv / Hk;
    // A pre-quantized checkpoint holds the packed in_proj already in the flat order, a GGUF file the q|k|v
    // and z rows (its in_proj_ba is HF's: per key-head group, r b rows then r a rows).
    if (c_.family == ModelFamily::QWEN3_NEXT && gguf_) {
        GDN_ASSIGN_OR_RETURN(g->in_qkv, matrix(p + "in_proj_qkv.weight", {CD, H}));
        GDN_ASSIGN_OR_RETURN(g->in_z, matrix(p + "in_proj_z.weight", {VD, H}));
        GDN_ASSIGN_OR_RETURN(TensorView ba, matrix(p + "in_proj_ba.weight", {2 * Hv, H}));
        g->in_b = alloc_rows_like(ba, Hv);
        g->in_a = alloc_rows_like(ba, Hv);
        for (int64_t grp = 0; grp < Hk; ++grp)
            for (int64_t j = 0; j < r; ++j) {
                copy_row(ba, grp * 2 * r + j, g->in_b, grp * r + j);
                copy_row(ba, grp * 2 * r + r + j, g->in_a, grp * r + j);
            }
    } else if (c_.family == ModelFamily::QWEN3_NEXT && !prepacked_) {
        // Regroup the per-key-head interleaved rows into the flat Qwen3.5 order (model_spec.md §4.5.1).
        GDN_ASSIGN_OR_RETURN(TensorView qkvz, matrix(p + "in_proj_qkvz.weight", {2 * KD + 2 * VD, H}));
        GDN_ASSIGN_OR_RETURN(TensorView ba, matrix(p + "in_proj_ba.weight", {2 * Hv, H}));
        g->in_qkv = alloc_rows_like(qkvz, CD);
        g->in_z = alloc_rows_like(qkvz, VD);
        g->in_b = alloc_rows_like(ba, Hv);
        g->in_a = alloc_rows_like(ba, Hv);
        const int64_t S = 2 * Dk + 2 * r * Dv;  // rows per key-head group
        for (int64_t grp = 0; grp < Hk; ++grp) {
            const int64_t base = grp * S;
            for (int64_t i = 0; i < Dk; ++i) copy_row(qkvz, base + i, g->in_qkv, grp * Dk + i);
            for (int64_t i = 0; i < Dk; ++i) copy_row(qkvz, base + Dk + i, g->in_qkv, KD + grp * Dk + i);
            for (int64_t m = 0; m < r * Dv; ++m)
                copy_row(qkvz, base + 2 * Dk + m, g->in_qkv, 2 * KD + grp * r * Dv + m);
            for (int64_t m = 0; m < r * Dv; ++m)
                copy_row(qkvz, base + 2 * Dk + r * Dv + m, g->in_z, grp * r * Dv + m);
            for (int64_t j = 0; j < r; ++j) {
                copy_row(ba, grp * 2 * r + j, g->in_b, grp * r + j);
                copy_row(ba, grp * 2 * r + r + j, g->in_a, grp * r + j);
            }
        }
    } else {
        GDN_ASSIGN_OR_RETURN(g->in_qkv, matrix(p + "in_proj_qkv.weight", {CD, H}));
        GDN_ASSIGN_OR_RETURN(g->in_z, matrix(p + "in_proj_z.weight", {VD, H}));
        GDN_ASSIGN_OR_RETURN(g->in_b, matrix(p + "in_proj_b.weight", {Hv, H}));
        GDN_ASSIGN_OR_RETURN(g->in_a, matrix(p + "in_proj_a.weight", {Hv, H}));
    }
    if (gguf_) {  // conv1d squeezed to [C, K] (the same bytes); -exp(A_log) computed by the converter
        GDN_ASSIGN_OR_RETURN(g->conv, get_plain(p + "conv1d.weight", {CD, K}));
        GDN_ASSIGN_OR_RETURN(g->neg_exp_A, get_plain(p + "neg_exp_A", {Hv}));
    } else {
        GDN_ASSIGN_OR_RETURN(g->conv, get_plain(p + "conv1d.weight", {CD, 1, K}));
        GDN_ASSIGN_OR_RETURN(g->neg_exp_A, get_f32(p + "A_log", {Hv}, [](float x) { return -std::exp(x); }));
    }
    GDN_ASSIGN_OR_RETURN(g->dt_bias, get_plain(p + "dt_bias", {Hv}));
    GDN_ASSIGN_OR_RETURN(g->norm, get_plain(p + "norm.weight", {Dv}));
    GDN_ASSIGN_OR_RETURN(g->out_proj, matrix(p + "out_proj.weight", {H, VD}));
    return Status::ok();
}

Status Loader::load_moe(const std::string& p, MoeWeights* m) {
    const int64_t H = c_.hidden, E = c_.n_experts, Ie = c_.moe_intermediate, Is = c_.shared_intermediate;
    GDN_ASSIGN_OR_RETURN(m->router, get(p + "gate.weight", {E, H}));
    m->experts.resize(E);
    if (ck_->find(p + "experts.gate_up_proj")) {
        // Packed 3-D experts (Qwen3.5-MoE): gate rows [0, Ie), up rows [Ie, 2Ie).
        GDN_ASSIGN_OR_RETURN(TensorView gate_up, matrix(p + "experts.gate_up_proj", {E, 2 * Ie, H}));
        GDN_ASSIGN_OR_RETURN(TensorView down, matrix(p + "experts.down_proj", {E, H, Ie}));
        for (int64_t e = 0; e < E; ++e) {
            TensorView gu = matrix_of(gate_up, e);
            m->experts[e].gate = rows_of(gu, 0, Ie);
            m->experts[e].up = rows_of(gu, Ie, Ie);
            m->experts[e].down = matrix_of(down, e);
        }
    } else if (ck_->find(p + "experts.gate_proj")) {
        // Stacked 3-D experts with gate and up apart (a GGUF file's ffn_{gate,up,down}_exps).
        GDN_ASSIGN_OR_RETURN(TensorView gate, matrix(p + "experts.gate_proj", {E, Ie, H}));
        GDN_ASSIGN_OR_RETURN(TensorView up, matrix(p + "experts.up_proj", {E, Ie, H}));
        GDN_ASSIGN_OR_RETURN(TensorView down, matrix(p + "experts.down_proj", {E, H, Ie}));
        for (int64_t e = 0; e < E; ++e) {
            m->experts[e].gate = matrix_of(gate, e);
            m->experts[e].up = matrix_of(up, e);
            m->experts[e].down = matrix_of(down, e);
        }
    } else {
        for (int64_t e = 0; e < E; ++e) {
            GDN_ASSIGN_OR_RETURN(m->experts[e], mlp(p + "experts." + std::to_string(e) + ".", Ie));
        }
    }
    if (Is > 0) {
        GDN_ASSIGN_OR_RETURN(m->shared, mlp(p + "shared_expert.", Is));
        GDN_ASSIGN_OR_RETURN(m->shared_gate, get(p + "shared_expert_gate.weight", {1, H}));
        m->has_shared = true;
    }
    return Status::ok();
}

Result<Mlp> pack_mlp(Loader& ld, const std::string& name, const MlpWeights& v) {
    Mlp m;
    if (!ld.packed_only())
        m.views = v;  // quantized or GGUF: the packed weights are the layer (no view into the checkpoint)
    m.fused = v.gate.shape[0] % 16 == 0;
    if (m.fused) {
        GDN_ASSIGN_OR_RETURN(m.gate_up, ld.swiglu_linear(name + "gate_up", v.gate, v.up));
    } else {
        GDN_ASSIGN_OR_RETURN(m.gate_up, ld.linear(name + "gate_up", {v.gate, v.up}, ld.quantization()));
    }
    GDN_ASSIGN_OR_RETURN(m.down, ld.linear(name + "down", {v.down}, ld.quantization()));
    return m;
}

// Packs every matrix of a layer (prefix p, for_each_linear's names) into the kernels' layout, fusing
// projections that share an input.
Status pack_layer(Loader& ld, const ModelConfig& c, const std::string& p, LayerWeights* L,
                  HugePageArena* small) {
    const Quant q = ld.quantization();
    if (L->kind == LayerKind::FULL_ATTENTION) {
        GDN_ASSIGN_OR_RETURN(
            L->attn.qkv, ld.linear(p + "self_attn.qkv", {L->attn.q_proj, L->attn.k_proj, L->attn.v_proj}, q));
        GDN_ASSIGN_OR_RETURN(L->attn.o, ld.linear(p + "self_attn.o", {L->attn.o_proj}, q));
        if (ld.packed_only())
            L->attn.q_proj = L->attn.k_proj = L->attn.v_proj = L->attn.o_proj = TensorView();
    } else {
        GdnWeights& g = L->gdn;
        GDN_ASSIGN_OR_RETURN(g.in_proj,
                             ld.linear(p + "linear_attn.in_proj", {g.in_qkv, g.in_z, g.in_b, g.in_a}, q));
        GDN_ASSIGN_OR_RETURN(g.out, ld.linear(p + "linear_attn.out", {g.out_proj}, q));
        if (ld.packed_only()) g.in_qkv = g.in_z = g.in_b = g.in_a = g.out_proj = TensorView();
        const int64_t CD = c.gdn_conv_dim(), K = c.conv_kernel;
        float* t = small->alloc_f32(CD * K);
        for (int64_t ch = 0; ch < CD; ++ch)
            for (int64_t j = 0; j < K; ++j) t[j * CD + ch] = g.conv[ch * K + j];
        g.conv_T = t;
    }
    return Status::ok();
}

// One decoder layer (the main stack's, or the MTP layer's: full attention, the family's FFN) with the
// prefix p ("layers.3.", "mtp.layers.0."). With quantization, its source pages are released once packed.
Status load_layer(const ExecContext& ctx, Loader& ld, const ModelConfig& c, Checkpoint& ck, ModelWeights* w,
                  const std::string& p, LayerKind kind, bool is_moe, LayerWeights& L) {
    const size_t owned_before = w->owned.size();
    L.kind = kind;
    GDN_ASSIGN_OR_RETURN(L.input_norm, ld.get_norm1p(p + "input_layernorm.weight", c.hidden));
    GDN_ASSIGN_OR_RETURN(L.post_norm, ld.get_norm1p(p + "post_attention_layernorm.weight", c.hidden));
    if (L.kind == LayerKind::FULL_ATTENTION) {
        GDN_RETURN_IF_ERROR(ld.load_attention(p + "self_attn.", &L.attn));
    } else {
        GDN_RETURN_IF_ERROR(ld.load_gdn(p + "linear_attn.", &L.gdn));
    }
    L.is_moe = is_moe;
    if (L.is_moe) {
        GDN_RETURN_IF_ERROR(ld.load_moe(p + "mlp.", &L.moe.views));
        const MoeWeights& v = L.moe.views;
        L.moe.router = make_linear(ctx, {v.router});  // stays in its float format (LoadOptions::quantization)
        for (size_t e = 0; e < v.experts.size(); ++e) {
            GDN_ASSIGN_OR_RETURN(Mlp m,
                                 pack_mlp(ld, p + "mlp.experts." + std::to_string(e) + ".", v.experts[e]));
            L.moe.experts.push_back(std::move(m));
            // Quantized: each expert's source pages go as soon as it is packed, not with the layer (a
            // Qwen3-Next layer's 512 experts are 3.2 GB of bf16: peak RSS was quantized size + that).
            if (ld.packed_only())
                for (const TensorView* t : {&v.experts[e].gate, &v.experts[e].up, &v.experts[e].down})
                    ck.release(*t);
        }
        if (v.has_shared) {
            GDN_ASSIGN_OR_RETURN(L.moe.shared, pack_mlp(ld, p + "mlp.shared_expert.", v.shared));
            L.moe.shared_gate = make_linear(ctx, {v.shared_gate});
        }
        // Quantized (this layer's format: the MTP layer may differ from the rest): the forward composes
        // the MoE from the packed weights.
        if (ld.packed_only()) L.moe.views = MoeWeights();
    } else {
        MlpWeights mv;
        GDN_ASSIGN_OR_RETURN(mv, ld.mlp(p + "mlp.", c.intermediate));
        GDN_ASSIGN_OR_RETURN(L.mlp, pack_mlp(ld, p + "mlp.", mv));
    }
    GDN_RETURN_IF_ERROR(pack_layer(ld, c, p, &L, &w->small));
    if (ld.packed_only()) {  // the layer's source bytes are no longer needed: memory at packed size + one
                             // layer
        ld.release_taken();
        w->owned.erase(w->owned.begin() + static_cast<std::ptrdiff_t>(owned_before), w->owned.end());
    }
    return Status::ok();
}

// The MTP draft layer (model_spec.md §3.7: mtp.* at the top level for every family; one full-attention
// layer whose FFN is the family's, MoE for Qwen3-Next and Qwen3.5-MoE).
Status load_mtp(const ExecContext& ctx, Loader& ld, const ModelConfig& c, Checkpoint& ck, ModelWeights* w,
                const LoadOptions& opt) {
    const Quant q = w->quantization;
    if (!ck.find(w->prepacked ? std::string(kPackedPrefix) + "mtp.fc" : std::string("mtp.fc.weight")))
        return Status::error(ck.dir() +
                             ": this checkpoint has no MTP layer (no 'mtp.fc.weight' tensor): use "
                             "n-gram speculation (\"method\": \"ngram\") or none");
    if (c.mtp_layers > 1)
        GDN_LOG_WARN("%s: %d MTP layers in config.json; the drafts use mtp.layers.0 only", ck.dir().c_str(),
                     c.mtp_layers);
    auto m = std::make_unique<MtpWeights>();
    GDN_ASSIGN_OR_RETURN(m->pre_fc_norm_embedding,
                         ld.get_norm1p("mtp.pre_fc_norm_embedding.weight", c.hidden));
    GDN_ASSIGN_OR_RETURN(m->pre_fc_norm_hidden, ld.get_norm1p("mtp.pre_fc_norm_hidden.weight", c.hidden));
    GDN_ASSIGN_OR_RETURN(m->norm, ld.get_norm1p("mtp.norm.weight", c.hidden));
    // A float model may pack the MTP layer for drafting (LoadOptions::mtp_layer); a quantized one keeps
    // its own format, a pre-quantized checkpoint the format it was written in.
    const Quant q_mtp = q || w->prepacked || ld.gguf() ? q : opt.mtp_layer;
    ld.set_quantization(q_mtp);
    GDN_ASSIGN_OR_RETURN(TensorView fc, ld.matrix("mtp.fc.weight", {c.hidden, 2 * int64_t{c.hidden}}));
    GDN_ASSIGN_OR_RETURN(m->fc, ld.linear("mtp.fc", {fc}, q_mtp));
    GDN_RETURN_IF_ERROR(
        load_layer(ctx, ld, c, ck, w, "mtp.layers.0.", LayerKind::FULL_ATTENTION, c.n_experts > 0, m->layer));
    ld.set_quantization(q);
    w->mtp = std::move(m);
    return Status::ok();
}

// The lm_head packed (quantized: its source rows dropped every 256 rows, so the largest tensor never
// sits in memory whole), a quantized untied embedding, and the int8 screen of a bf16 lm_head.
Status load_vocabulary_matrices(const ExecContext& ctx, Loader& ld, Checkpoint& ck, ModelWeights* w,
                                bool tied) {
    const Quant q = w->quantization;
    auto drop_rows = [&](const TensorView& t) -> std::function<void(int64_t, int64_t)> {
        return [&ck, t](int64_t n0, int64_t n1) { ck.release(t, n0, n1); };
    };
    // Quantized at load or moved from a GGUF file: the packed copy is all that is read again.
    const bool packed_only = q || ld.gguf();
    GDN_ASSIGN_OR_RETURN(w->lm_head_packed, ld.linear("lm_head", {w->lm_head}, q,
                                                      packed_only ? drop_rows(w->lm_head) : nullptr));
    if (q) {
        // The lm_head's format (and so a tied embedding's) and an untied embedding's, which is only
        // gathered (its error never meets the logits directly), come from the scheme (model/quant_scheme.h).
        if (!tied) {
            GDN_ASSIGN_OR_RETURN(LinearWeight e,
                                 ld.linear("embed_tokens", {w->embed}, q, drop_rows(w->embed)));
            w->embed_quantized = std::move(e.packed);
        }
        w->embed_packed = tied ? &w->lm_head_packed.packed : &w->embed_quantized;
        ld.release_taken();
        w->lm_head.data = w->embed.data = nullptr;  // shapes stay for reports; the rows are the packed ones
    }
    // The exact greedy argmax streams an int8 copy of the lm_head (half its bytes; +50% of its memory)
    // on AVX-512 VNNI and AVX2 CPUs (ops/argmax_screen.h).
    if (argmax_screen_supported_by_cpu() && w->lm_head_packed.packed.format == WeightFormat::BF16)
        w->lm_head_packed.screen = make_int8_screen(ctx, w->lm_head_packed.packed);
    // Tied: the embedding rows come from the packed copy (huge pages) at no extra memory. Untied tables
    // stay on the checkpoint mapping (a packed copy would cost V x H more memory for ~10-50 us a step).
    if (tied && !q) w->embed_packed = &w->lm_head_packed.packed;
    return Status::ok();
}

// A float checkpoint may carry NaN / inf (the float path would just propagate them): quantizing them is
// an error that names the first such linear.
Status check_quantized_finite(const Checkpoint& ck, const ModelWeights& w) {
    std::string bad;
    for_each_linear(w, [&](const std::string& name, const PackedWeight& p) {
        if (p.nonfinite_blocks && bad.empty())
            bad = strprintf("%s (in %lld quantization block%s)", name.c_str(), (long long)p.nonfinite_blocks,
                            p.nonfinite_blocks == 1 ? "" : "s");
    });
    if (bad.empty()) return Status::ok();
    return Status::error(ck.dir() + ": cannot quantize: non-finite weights (NaN or infinity) in " + bad);
}

void warn_unused_tensors(const Checkpoint& ck, const Loader& ld, bool mtp) {
    int unused = 0;
    const std::string packed_mtp = std::string(kPackedPrefix) + "mtp.";
    for (const auto& [name, t] : ck.tensors()) {
        if (ld.used().count(name) || (!mtp && (name.rfind("mtp.", 0) == 0 || name.rfind(packed_mtp, 0) == 0)))
            continue;
        if (++unused <= 5)
            GDN_LOG_WARN("%s: tensor '%s' is not used by the model", ck.dir().c_str(), name.c_str());
    }
    if (unused > 5) GDN_LOG_WARN("%s: %d tensors in total are not used", ck.dir().c_str(), unused);
}

}  // namespace

Result<std::unique_ptr<ModelWeights>> load_weights(const ExecContext& ctx, const ModelConfig& c,
                                                   std::shared_ptr<Checkpoint> ck,
                                                   const LoadProgress& progress, const LoadOptions& opt) {
    auto w = std::make_unique<ModelWeights>();
    w->checkpoint = ck;
    GDN_ASSIGN_OR_RETURN(const Quant packed, packed_checkpoint_format(*ck));
    if (packed && opt.quantization && *opt.quantization != *packed)
        return Status::error(
            strprintf("%s was quantized to %s by gdn quantize and loads only as that: drop "
                      "--quantization %s (or pass %s)",
                      ck->dir().c_str(), quantization_name(*packed), quantization_name(*opt.quantization),
                      quantization_name(*packed)));
    if (ck->layout() == Checkpoint::Layout::GGUF && opt.quantization)
        return Status::error(
            strprintf("%s is a GGUF file: its tensors load in their own types (drop --quantization %s)",
                      ck->dir().c_str(), quantization_name(*opt.quantization)));
    const Quant q = packed ? packed : opt.quantization;
    w->quantization = q;
    w->prepacked = packed.has_value();
    Loader ld(ctx, c, ck, w.get(), q, packed.has_value());
    // A pre-quantized checkpoint holds the lm_head packed, and the embedding too when it is not tied.
    const bool tied =
        packed ? !ck->find(std::string(kPackedPrefix) + "embed_tokens") : !ck->find("lm_head.weight");
    GDN_ASSIGN_OR_RETURN(w->embed, ld.matrix("embed_tokens.weight", {c.vocab, c.hidden}));
    GDN_ASSIGN_OR_RETURN(w->final_norm, ld.get_norm1p("norm.weight", c.hidden));
    if (!tied) {
        GDN_ASSIGN_OR_RETURN(w->lm_head, ld.matrix("lm_head.weight", {c.vocab, c.hidden}));
    } else if (packed || c.tie_embeddings) {
        w->lm_head = w->embed;
    } else {
        return Status::error(ck->dir() +
                             ": missing tensor 'lm_head.weight' and tie_word_embeddings is false");
    }
    const int n_steps = c.n_layers + 1 + (opt.mtp ? 1 : 0);
    w->layers.resize(c.n_layers);
    for (int i = 0; i < c.n_layers; ++i) {
        GDN_RETURN_IF_ERROR(load_layer(ctx, ld, c, *ck, w.get(), "layers." + std::to_string(i) + ".",
                                       c.layer_kinds[i], c.is_moe_layer(i), w->layers[i]));
        if (progress) progress(i + 1, n_steps);
    }
    if (opt.mtp) {
        GDN_RETURN_IF_ERROR(load_mtp(ctx, ld, c, *ck, w.get(), opt));
        if (progress) progress(c.n_layers + 1, n_steps);
    }
    GDN_RETURN_IF_ERROR(load_vocabulary_matrices(ctx, ld, *ck, w.get(), tied));
    if (q) GDN_RETURN_IF_ERROR(check_quantized_finite(*ck, *w));
    if (w->mtp && opt.mtp_draft_head && !q && w->lm_head.data &&
        !is_quantized(w->lm_head_packed.packed.format))
        w->mtp->draft_head = make_linear(ctx, {w->lm_head}, opt.mtp_draft_head);
    if (progress) progress(n_steps, n_steps);
    w->float_tensors = ld.float_tensors();
    warn_unused_tensors(*ck, ld, opt.mtp);
    return w;
}

void for_each_linear(const ModelWeights& w,
                     const std::function<void(const std::string&, const PackedWeight&)>& fn) {
    auto mlp = [&](const std::string& p, const Mlp& m) {
        fn(p + "gate_up", m.gate_up.packed);
        fn(p + "down", m.down.packed);
    };
    auto layer = [&](const std::string& p, const LayerWeights& L) {
        if (L.kind == LayerKind::FULL_ATTENTION) {
            fn(p + "self_attn.qkv", L.attn.qkv.packed);
            fn(p + "self_attn.o", L.attn.o.packed);
        } else {
            fn(p + "linear_attn.in_proj", L.gdn.in_proj.packed);
            fn(p + "linear_attn.out", L.gdn.out.packed);
        }
        if (L.is_moe) {
            fn(p + "mlp.router", L.moe.router.packed);
            for (size_t e = 0; e < L.moe.experts.size(); ++e)
                mlp(p + "mlp.experts." + std::to_string(e) + ".", L.moe.experts[e]);
            if (L.moe.shared.gate_up.packed.N) {
                mlp(p + "mlp.shared_expert.", L.moe.shared);
                fn(p + "mlp.shared_expert_gate", L.moe.shared_gate.packed);
            }
        } else {
            mlp(p + "mlp.", L.mlp);
        }
    };
    for (size_t i = 0; i < w.layers.size(); ++i) layer("layers." + std::to_string(i) + ".", w.layers[i]);
    if (w.mtp) {
        fn("mtp.fc", w.mtp->fc.packed);
        layer("mtp.layers.0.", w.mtp->layer);
        if (w.mtp->draft_head.packed.N) fn("mtp.draft_head", w.mtp->draft_head.packed);
    }
    fn("lm_head", w.lm_head_packed.packed);
    if (w.embed_quantized.N) fn("embed_tokens", w.embed_quantized);
}

std::string weights_summary(const ModelWeights& w) {
    struct Tally {
        int64_t bytes = 0, params = 0;
        int count = 0;
    };
    std::map<WeightFormat, Tally> by;
    for_each_linear(w, [&](const std::string&, const PackedWeight& p) {
        Tally& t = by[p.format];
        t.bytes += p.bytes();
        t.params += p.N * p.K;
        ++t.count;
    });
    std::string s = "weights:";
    bool first = true;
    for (const auto& [f, t] : by) {
        s += strprintf("%s %.1f MB %s (%d matrices, %.2f bits/weight)", first ? "" : ",", t.bytes / 1e6,
                       weight_format_name(f), t.count, t.params ? 8.0 * t.bytes / t.params : 0.0);
        first = false;
    }
    if (w.embed_packed == nullptr && w.embed.data)
        s += strprintf(", embedding %.1f MB on the checkpoint mapping",
                       w.embed.numel() * dtype_size(w.embed.dtype) / 1e6);
    return s;
}

}  // namespace gdn
