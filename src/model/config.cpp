#include "model/config.h"

#include "ops/layers.h"

#include <algorithm>
#include <cmath>

#include "core/log.h"
#include "ops/layers.h"
#include "util/json_file.h"

namespace gdn {

const char* family_name(ModelFamily f) {
    switch (f) {
        case ModelFamily::QWEN3_NEXT:
            return "qwen3_next";
        case ModelFamily::QWEN3_5:
            return "qwen3_5";
        case ModelFamily::QWEN3_5_MOE:
            return "qwen3_5_moe";
    }
    return "?";
}

bool ModelConfig::is_moe_layer(int layer) const {
    if (n_experts <= 0) return false;
    if (family == ModelFamily::QWEN3_5_MOE) return true;
    if (family == ModelFamily::QWEN3_5) return false;
    // Qwen3-Next rule (model_spec.md §4.7).
    if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end())
        return false;
    return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

int ModelConfig::n_attention_layers() const {
    return static_cast<int>(std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::FULL_ATTENTION));
}

std::string ModelConfig::summary() const {
    std::string s = strprintf(
        "%s: L=%d (GDN %d, attention %d) H=%d V=%d | GDN Hk=%d Hv=%d Dk=%d Dv=%d K=%d | attention Hq=%d "
        "Hkv=%d D=%d rot=%d theta=%g",
        family_name(family), n_layers, n_gdn_layers(), n_attention_layers(), hidden, vocab, gdn_k_heads,
        gdn_v_heads, gdn_k_dim, gdn_v_dim, conv_kernel, attn_heads, attn_kv_heads, head_dim, rotary_dim,
        rope_theta);
    if (n_experts > 0)
        s += strprintf(" | MoE E=%d top-%d Ie=%d Is=%d", n_experts, n_experts_per_tok, moe_intermediate,
                       shared_intermediate);
    else
        s += strprintf(" | MLP I=%d", intermediate);
    if (tie_embeddings) s += " | tied";
    return s;
}

namespace {

// Reads keys from the decoder-level object, with errors that name the key and the file.
class KeyReader {
  public:
    KeyReader(const Json& obj, const Json& top, std::string path, std::string prefix)
        : obj_(obj), top_(top), path_(std::move(path)), prefix_(std::move(prefix)) {}

    const Json* find(const char* key) const {
        auto it = obj_.find(key);
        return (it == obj_.end() || it->is_null()) ? nullptr : &*it;
    }
    Status missing(const char* key) const {
        return Status::error(
            strprintf("%s: missing required key '%s%s'", path_.c_str(), prefix_.c_str(), key));
    }
    Status wrong_type(const char* key, const char* want) const {
        return Status::error(
            strprintf("%s: key '%s%s' must be %s", path_.c_str(), prefix_.c_str(), key, want));
    }
    Status get_int(const char* key, int* out, bool required, int def = 0) const {
        const Json* v = find(key);
        if (!v) {
            if (required) return missing(key);
            *out = def;
            return Status::ok();
        }
        if (!v->is_number_integer()) return wrong_type(key, "an integer");
        int64_t x = v->get<int64_t>();
        if (x < 0 || x > (1ll << 31) - 1) return wrong_type(key, "a non-negative 32-bit integer");
        *out = static_cast<int>(x);
        return Status::ok();
    }
    Status get_float(const char* key, float* out, float def) const {
        const Json* v = find(key);
        if (!v) {
            *out = def;
            return Status::ok();
        }
        if (!v->is_number()) return wrong_type(key, "a number");
        *out = v->get<float>();
        return Status::ok();
    }
    Status get_bool(const char* key, bool* out, bool def) const {
        const Json* v = find(key);
        if (!v) {
            *out = def;
            return Status::ok();
        }
        if (!v->is_boolean()) return wrong_type(key, "true or false");
        *out = v->get<bool>();
        return Status::ok();
    }
    const std::string& path() const { return path_; }
    const std::string& prefix() const { return prefix_; }

  private:
    const Json& obj_;
    const Json& top_;
    std::string path_;
    std::string prefix_;
};

Status parse_int_list(const Json& v, std::vector<int>* out) {
    out->clear();
    if (v.is_number_integer()) {
        out->push_back(v.get<int>());
        return Status::ok();
    }
    if (!v.is_array()) return Status::error("expected an integer or a list of integers");
    for (const auto& e : v) {
        if (!e.is_number_integer()) return Status::error("expected a list of integers");
        out->push_back(e.get<int>());
    }
    return Status::ok();
}

// rope value X: rope_parameters.X -> rope_scaling.X -> decoder-level X -> default (model_spec.md §2.1).
Status rope_value(const Json& dec, const char* key, float def, float* out, const std::string& path) {
    for (const char* holder : {"rope_parameters", "rope_scaling"}) {
        auto it = dec.find(holder);
        if (it != dec.end() && it->is_object()) {
            auto v = it->find(key);
            if (v != it->end() && !v->is_null()) {
                if (!v->is_number())
                    return Status::error(
                        strprintf("%s: key '%s.%s' must be a number", path.c_str(), holder, key));
                *out = v->get<float>();
                return Status::ok();
            }
        }
    }
    auto v = dec.find(key);
    if (v != dec.end() && !v->is_null()) {
        if (!v->is_number())
            return Status::error(strprintf("%s: key '%s' must be a number", path.c_str(), key));
        *out = v->get<float>();
        return Status::ok();
    }
    *out = def;
    return Status::ok();
}

}  // namespace

namespace {

// The decoder's sizes and flags: hidden size, layer count, vocabulary, head shapes, norm eps, the MLP
// activation, tied embeddings.
Status read_shapes(const KeyReader& r, const Json& top, const Json* dec, const std::string& path,
                   const std::string& prefix, ModelConfig& c) {
    GDN_RETURN_IF_ERROR(r.get_int("hidden_size", &c.hidden, true));
    GDN_RETURN_IF_ERROR(r.get_int("num_hidden_layers", &c.n_layers, true));
    GDN_RETURN_IF_ERROR(r.get_int("vocab_size", &c.vocab, true));
    GDN_RETURN_IF_ERROR(r.get_int("linear_num_key_heads", &c.gdn_k_heads, true));
    GDN_RETURN_IF_ERROR(r.get_int("linear_num_value_heads", &c.gdn_v_heads, true));
    GDN_RETURN_IF_ERROR(r.get_int("linear_key_head_dim", &c.gdn_k_dim, true));
    GDN_RETURN_IF_ERROR(r.get_int("linear_value_head_dim", &c.gdn_v_dim, true));
    GDN_RETURN_IF_ERROR(r.get_int("linear_conv_kernel_dim", &c.conv_kernel, true));
    GDN_RETURN_IF_ERROR(r.get_int("num_attention_heads", &c.attn_heads, true));
    GDN_RETURN_IF_ERROR(r.get_int("num_key_value_heads", &c.attn_kv_heads, true));
    GDN_RETURN_IF_ERROR(r.get_int("head_dim", &c.head_dim, true));
    GDN_RETURN_IF_ERROR(r.get_float("rms_norm_eps", &c.rms_eps, 1e-6f));
    GDN_RETURN_IF_ERROR(r.get_int("max_position_embeddings", &c.max_position, false, 0));
    GDN_RETURN_IF_ERROR(r.get_bool("attn_output_gate", &c.attn_output_gate, true));
    // The MLP / expert activation: only SiLU is implemented, so anything else is refused by name
    // rather than run as SiLU.
    if (const Json* act = r.find("hidden_act")) {
        if (!act->is_string()) return r.wrong_type("hidden_act", "a string");
        const std::string a = act->get<std::string>();
        if (a != "silu" && a != "swish")
            return Status::error(strprintf("%s: unsupported '%shidden_act' '%s' (implemented: silu)",
                                           path.c_str(), prefix.c_str(), a.c_str()));
    }

    // tie_word_embeddings: decoder level first, then top level (both appear in real Qwen3.5 configs).
    {
        const Json* v = r.find("tie_word_embeddings");
        if (!v) {
            auto it = top.find("tie_word_embeddings");
            if (it != top.end() && !it->is_null()) v = &*it;
        }
        if (v && !v->is_boolean())
            return Status::error(path + ": key 'tie_word_embeddings' must be true or false");
        c.tie_embeddings = v ? v->get<bool>() : false;
    }
    return Status::ok();
}

// The weights' dtype: dtype or torch_dtype, decoder level first, the first string found.
Status read_weight_dtype(const Json& top, const Json* dec, const std::string& path, ModelConfig& c) {
    for (const Json* holder : std::initializer_list<const Json*>{dec, &top})
        for (const char* key : {"dtype", "torch_dtype"}) {
            auto it = holder->find(key);
            if (it == holder->end() || !it->is_string()) continue;
            if (!parse_dtype(it->get<std::string>(), &c.weight_dtype))
                return Status::error(
                    strprintf("%s: unsupported %s '%s' (supported: float32, bfloat16, float16)", path.c_str(),
                              key, it->get<std::string>().c_str()));
            return Status::ok();
        }
    return Status::ok();
}

// Layer schedule: layer_types, else full_attention_interval.
Status read_layer_schedule(const KeyReader& r, const std::string& path, const std::string& prefix,
                           ModelConfig& c) {
    if (const Json* lt = r.find("layer_types")) {
        if (!lt->is_array()) return r.wrong_type("layer_types", "a list of strings");
        if (static_cast<int>(lt->size()) < c.n_layers)
            return Status::error(strprintf("%s: '%slayer_types' has %zu entries but num_hidden_layers is %d",
                                           path.c_str(), prefix.c_str(), lt->size(), c.n_layers));
        for (int i = 0; i < c.n_layers; ++i) {
            const Json& e = (*lt)[i];
            std::string s = e.is_string() ? e.get<std::string>() : "";
            if (s == "linear_attention")
                c.layer_kinds.push_back(LayerKind::LINEAR_ATTENTION);
            else if (s == "full_attention")
                c.layer_kinds.push_back(LayerKind::FULL_ATTENTION);
            else
                return Status::error(
                    strprintf("%s: '%slayer_types[%d]' is '%s' (expected linear_attention or "
                              "full_attention)",
                              path.c_str(), prefix.c_str(), i, s.c_str()));
        }
    } else {
        int interval = 4;
        GDN_RETURN_IF_ERROR(r.get_int("full_attention_interval", &interval, false, 4));
        if (interval <= 0) return r.wrong_type("full_attention_interval", "a positive integer");
        for (int i = 0; i < c.n_layers; ++i)
            c.layer_kinds.push_back((i + 1) % interval == 0 ? LayerKind::FULL_ATTENTION
                                                            : LayerKind::LINEAR_ATTENTION);
    }
    return Status::ok();
}

// RoPE, the MLP / MoE sizes, the MTP layer count and the end-of-sequence ids.
Status read_ffn_and_rope(const KeyReader& r, const Json* dec, const std::string& path, ModelConfig& c) {
    // RoPE.
    float prf = 0.25f;
    GDN_RETURN_IF_ERROR(rope_value(*dec, "rope_theta", 10000.0f, &c.rope_theta, path));
    GDN_RETURN_IF_ERROR(rope_value(*dec, "partial_rotary_factor", 0.25f, &prf, path));
    c.rotary_dim = static_cast<int>(c.head_dim * prf);

    // MLP / MoE.
    bool moe_family = c.family == ModelFamily::QWEN3_5_MOE;
    int experts = 0;
    GDN_RETURN_IF_ERROR(r.get_int("num_experts", &experts, moe_family));
    if (c.family == ModelFamily::QWEN3_5) experts = 0;  // dense family: no routed experts
    c.n_experts = experts;
    if (c.n_experts > 0) {
        GDN_RETURN_IF_ERROR(r.get_int("num_experts_per_tok", &c.n_experts_per_tok, true));
        GDN_RETURN_IF_ERROR(r.get_int("moe_intermediate_size", &c.moe_intermediate, true));
        GDN_RETURN_IF_ERROR(r.get_int("shared_expert_intermediate_size", &c.shared_intermediate, true));
        if (c.family == ModelFamily::QWEN3_NEXT) {
            GDN_RETURN_IF_ERROR(r.get_bool("norm_topk_prob", &c.norm_topk_prob, true));
            GDN_RETURN_IF_ERROR(r.get_int("decoder_sparse_step", &c.decoder_sparse_step, false, 1));
            if (const Json* m = r.find("mlp_only_layers")) {
                Status st = parse_int_list(*m, &c.mlp_only_layers);
                if (!st) return r.wrong_type("mlp_only_layers", "a list of integers");
            }
        } else {
            c.norm_topk_prob = true;  // Qwen3.5-MoE always renormalises
        }
    }
    bool needs_dense = false;
    for (int i = 0; i < c.n_layers; ++i) needs_dense |= !c.is_moe_layer(i);
    GDN_RETURN_IF_ERROR(r.get_int("intermediate_size", &c.intermediate, needs_dense));

    if (const Json* m = r.find("mtp_num_hidden_layers")) {
        if (!m->is_number_integer()) return r.wrong_type("mtp_num_hidden_layers", "an integer");
        c.mtp_layers = m->get<int>();
    } else if (const Json* m2 = r.find("num_nextn_predict_layers")) {
        if (!m2->is_number_integer()) return r.wrong_type("num_nextn_predict_layers", "an integer");
        c.mtp_layers = m2->get<int>();
    }
    if (const Json* e = r.find("eos_token_id")) {
        if (!parse_int_list(*e, &c.eos_token_ids))
            return r.wrong_type("eos_token_id", "an integer or a list");
    }

    return Status::ok();
}

}  // namespace

// The checks across keys that every config must pass, whatever file it came from.
Status check_model_config(const ModelConfig& c, const std::string& path, const std::string& prefix) {
    bool needs_dense = false;
    for (int i = 0; i < c.n_layers; ++i) needs_dense |= !c.is_moe_layer(i);
    // Consistency.
    auto bad = [&](const std::string& what) {
        return Status::error(path + ": inconsistent config: " + what);
    };
    for (auto [name, v] : {std::pair{"hidden_size", c.hidden},
                           {"num_hidden_layers", c.n_layers},
                           {"vocab_size", c.vocab},
                           {"linear_num_key_heads", c.gdn_k_heads},
                           {"linear_num_value_heads", c.gdn_v_heads},
                           {"linear_key_head_dim", c.gdn_k_dim},
                           {"linear_value_head_dim", c.gdn_v_dim},
                           {"linear_conv_kernel_dim", c.conv_kernel},
                           {"num_attention_heads", c.attn_heads},
                           {"num_key_value_heads", c.attn_kv_heads},
                           {"head_dim", c.head_dim}})
        if (v <= 0) return bad(strprintf("'%s%s' must be positive", prefix.c_str(), name));
    if (c.conv_kernel > 8)  // the conv kernels keep the window's rows in a fixed array (Qwen models use 4)
        return bad(strprintf("linear_conv_kernel_dim (%d) must be at most 8", c.conv_kernel));
    if (c.gdn_v_heads % c.gdn_k_heads != 0)
        return bad(strprintf("linear_num_value_heads (%d) must be a multiple of linear_num_key_heads (%d)",
                             c.gdn_v_heads, c.gdn_k_heads));
    if (c.gdn_v_heads / c.gdn_k_heads > ops::kMaxValueHeadsPerKey)
        return bad(strprintf("linear_num_value_heads / linear_num_key_heads (%d) must be at most %d",
                             c.gdn_v_heads / c.gdn_k_heads, static_cast<int>(ops::kMaxValueHeadsPerKey)));
    if (c.attn_heads % c.attn_kv_heads != 0)
        return bad(strprintf("num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)",
                             c.attn_heads, c.attn_kv_heads));
    if (c.rotary_dim < 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
        return bad(strprintf("rotary dim head_dim*partial_rotary_factor = %d must be even and <= head_dim %d",
                             c.rotary_dim, c.head_dim));
    if (c.n_experts > 0 && (c.n_experts_per_tok <= 0 || c.n_experts_per_tok > c.n_experts))
        return bad(strprintf("num_experts_per_tok (%d) must be in 1..num_experts (%d)", c.n_experts_per_tok,
                             c.n_experts));
    if (c.n_experts > 0 && (c.moe_intermediate <= 0 || c.shared_intermediate < 0))
        return bad("moe_intermediate_size must be positive");
    if (needs_dense && c.intermediate <= 0) return bad("intermediate_size must be positive");
    if (!(c.rms_eps > 0.0f)) return bad("rms_norm_eps must be positive");
    if (!(c.rope_theta > 0.0f)) return bad("rope_theta must be positive");
    if (c.n_attention_layers() == 0 && c.n_gdn_layers() == 0) return bad("no layers");
    return Status::ok();
}

namespace {
Result<ModelConfig> parse_model_config_checked(const std::string& json_text, const std::string& path);
}  // namespace

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& path) {
    // Typed reads check their types first; this catches any nlohmann type_error / out_of_range a
    // hostile file still finds, so a corrupt config is an error message, never an abort.
    try {
        return parse_model_config_checked(json_text, path);
    } catch (const Json::exception& e) {
        return Status::error(path + ": unexpected JSON value: " + printable(e.what()));
    }
}

namespace {
Result<ModelConfig> parse_model_config_checked(const std::string& json_text, const std::string& path) {
    GDN_ASSIGN_OR_RETURN(Json top, parse_json(json_text, path));
    if (!top.is_object()) return Status::error(path + ": top level must be a JSON object");
    auto mt = top.find("model_type");
    if (mt == top.end() || !mt->is_string())
        return Status::error(path + ": missing required key 'model_type'");

    ModelConfig c;
    c.model_type = mt->get<std::string>();
    const Json* dec = &top;
    std::string prefix;
    if (c.model_type == "qwen3_next") {
        c.family = ModelFamily::QWEN3_NEXT;
    } else if (c.model_type == "qwen3_5" || c.model_type == "qwen3_5_moe") {
        c.family = c.model_type == "qwen3_5" ? ModelFamily::QWEN3_5 : ModelFamily::QWEN3_5_MOE;
        auto tc = top.find("text_config");
        if (tc == top.end() || !tc->is_object())
            return Status::error(path + ": missing required key 'text_config' (model_type " + c.model_type +
                                 ")");
        dec = &*tc;
        prefix = "text_config.";
    } else if (c.model_type == "qwen3_5_text") {
        c.family = ModelFamily::QWEN3_5;
    } else if (c.model_type == "qwen3_5_moe_text") {
        c.family = ModelFamily::QWEN3_5_MOE;
    } else {
        return Status::error(strprintf(
            "%s: unsupported model_type '%s' (supported: qwen3_next, qwen3_5, qwen3_5_moe, qwen3_5_text, "
            "qwen3_5_moe_text)",
            path.c_str(), c.model_type.c_str()));
    }
    KeyReader r(*dec, top, path, prefix);
    GDN_RETURN_IF_ERROR(read_shapes(r, top, dec, path, prefix, c));
    GDN_RETURN_IF_ERROR(read_weight_dtype(top, dec, path, c));
    GDN_RETURN_IF_ERROR(read_layer_schedule(r, path, prefix, c));
    GDN_RETURN_IF_ERROR(read_ffn_and_rope(r, dec, path, c));
    GDN_RETURN_IF_ERROR(check_model_config(c, path, prefix));
    return c;
}

}  // namespace

Result<ModelConfig> load_model_config(const std::string& dir) {
    std::string path = dir + "/config.json";
    GDN_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
    GDN_ASSIGN_OR_RETURN(ModelConfig c, parse_model_config(text, path));
    std::string gen_path = dir + "/generation_config.json";
    if (file_exists(gen_path)) {
        GDN_ASSIGN_OR_RETURN(Json gen, read_json_file(gen_path));
        auto it = gen.find("eos_token_id");
        if (it != gen.end() && !it->is_null()) {
            std::vector<int> ids;
            if (!parse_int_list(*it, &ids))
                return Status::error(gen_path +
                                     ": key 'eos_token_id' must be an integer or a list of integers");
            // generation_config.json's ids come first (they are what HF's generate() stops on).
            for (int id : c.eos_token_ids)
                if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
            c.eos_token_ids = ids;
        }
    }
    return c;
}

}  // namespace gdn
