#include "model/gguf_config.h"

#include "core/log.h"

namespace gdn {

namespace {

// Reads `{arch}.key` into *out when present; an error when it must be there and is not, or does not fit.
struct ArchReader {
    const GgufFile& f;
    std::string arch;
    Status get(const char* key, int* out, bool required = true) const {
        const std::string k = arch + "." + key;
        if (!f.find(k))
            return required ? Status::error(f.path() + ": metadata '" + k + "' is missing") : Status::ok();
        GDN_ASSIGN_OR_RETURN(int64_t v, f.get_int(k));
        if (v < 0 || v > (1 << 30))
            return Status::error(strprintf("%s: metadata '%s' = %lld is out of range", f.path().c_str(),
                                           k.c_str(), static_cast<long long>(v)));
        *out = static_cast<int>(v);
        return Status::ok();
    }
    Status get(const char* key, float* out) const {
        GDN_ASSIGN_OR_RETURN(double v, f.get_float(arch + "." + key));
        *out = static_cast<float>(v);
        return Status::ok();
    }
};

}  // namespace

Result<ModelConfig> gguf_model_config(const GgufFile& f) {
    GDN_ASSIGN_OR_RETURN(std::string arch, f.get_string("general.architecture"));
    ModelConfig c;
    if (arch == "qwen35") {
        c.family = ModelFamily::QWEN3_5, c.model_type = "qwen3_5";
    } else if (arch == "qwen35moe") {
        c.family = ModelFamily::QWEN3_5_MOE, c.model_type = "qwen3_5_moe";
    } else if (arch == "qwen3next") {
        c.family = ModelFamily::QWEN3_NEXT, c.model_type = "qwen3_next";
    } else {
        return Status::error(f.path() + ": architecture '" + arch +
                             "' is not one this engine runs (qwen35, qwen35moe, qwen3next)");
    }
    const ArchReader r{f, arch};
    int blocks = 0, interval = 0, inner = 0;
    GDN_RETURN_IF_ERROR(r.get("block_count", &blocks));
    GDN_RETURN_IF_ERROR(r.get("nextn_predict_layers", &c.mtp_layers, false));
    if (c.mtp_layers > blocks)
        return Status::error(f.path() + ": " + arch + ".nextn_predict_layers exceeds block_count");
    c.n_layers = blocks - c.mtp_layers;
    GDN_RETURN_IF_ERROR(r.get("embedding_length", &c.hidden));
    GDN_RETURN_IF_ERROR(r.get("context_length", &c.max_position, false));
    GDN_RETURN_IF_ERROR(r.get("attention.layer_norm_rms_epsilon", &c.rms_eps));
    GDN_RETURN_IF_ERROR(r.get("full_attention_interval", &interval));
    if (interval < 1)
        return Status::error(f.path() + ": " + arch + ".full_attention_interval must be positive");
    for (int i = 0; i < c.n_layers; ++i)
        c.layer_kinds.push_back((i + 1) % interval == 0 ? LayerKind::FULL_ATTENTION
                                                        : LayerKind::LINEAR_ATTENTION);
    // Gated DeltaNet: group_count key heads of state_size, time_step_rank value heads sharing inner_size.
    GDN_RETURN_IF_ERROR(r.get("ssm.group_count", &c.gdn_k_heads));
    GDN_RETURN_IF_ERROR(r.get("ssm.time_step_rank", &c.gdn_v_heads));
    GDN_RETURN_IF_ERROR(r.get("ssm.state_size", &c.gdn_k_dim));
    GDN_RETURN_IF_ERROR(r.get("ssm.inner_size", &inner));
    GDN_RETURN_IF_ERROR(r.get("ssm.conv_kernel", &c.conv_kernel));
    if (c.gdn_v_heads <= 0 || inner % c.gdn_v_heads != 0)
        return Status::error(f.path() + ": " + arch +
                             ".ssm.inner_size must be a multiple of ssm.time_step_rank");
    c.gdn_v_dim = inner / c.gdn_v_heads;
    GDN_RETURN_IF_ERROR(r.get("attention.head_count", &c.attn_heads));
    GDN_RETURN_IF_ERROR(r.get("attention.head_count_kv", &c.attn_kv_heads));
    GDN_RETURN_IF_ERROR(r.get("attention.key_length", &c.head_dim));
    int value_length = 0;
    GDN_RETURN_IF_ERROR(r.get("attention.value_length", &value_length, false));
    if (value_length != 0 && value_length != c.head_dim)
        return Status::error(f.path() + ": " + arch + ".attention.value_length must equal key_length");
    GDN_RETURN_IF_ERROR(r.get("rope.dimension_count", &c.rotary_dim));
    GDN_RETURN_IF_ERROR(r.get("rope.freq_base", &c.rope_theta));
    c.attn_output_gate = true;
    const bool moe = arch != "qwen35";
    GDN_RETURN_IF_ERROR(r.get("feed_forward_length", &c.intermediate, !moe));
    if (moe) {
        GDN_RETURN_IF_ERROR(r.get("expert_count", &c.n_experts));
        GDN_RETURN_IF_ERROR(r.get("expert_used_count", &c.n_experts_per_tok));
        GDN_RETURN_IF_ERROR(r.get("expert_feed_forward_length", &c.moe_intermediate));
        GDN_RETURN_IF_ERROR(r.get("expert_shared_feed_forward_length", &c.shared_intermediate, false));
        c.norm_topk_prob = true;  // llama.cpp's qwen35moe and qwen3next renormalise the top-k weights
        c.decoder_sparse_step = 1;
    }
    const GgufFile::Tensor* embd = f.tensor("token_embd.weight");
    if (!embd || embd->dims.size() != 2 || embd->dims[0] != c.hidden)
        return Status::error(f.path() + ": token_embd.weight must be a [" + std::to_string(c.hidden) +
                             ", vocab] tensor");
    if (embd->dims[1] > (1 << 30)) return Status::error(f.path() + ": token_embd.weight has too many rows");
    c.vocab = static_cast<int>(embd->dims[1]);
    c.tie_embeddings = f.tensor("output.weight") == nullptr;
    // llama.cpp's converter tiles Qwen3.5's value heads (model/config.h gdn_v_tiled); Qwen3-Next's
    // de-interleaved in_proj keeps them grouped.
    c.gdn_v_tiled = c.family != ModelFamily::QWEN3_NEXT && c.gdn_v_heads != c.gdn_k_heads;
    if (f.find("tokenizer.ggml.eos_token_id")) {
        GDN_ASSIGN_OR_RETURN(int64_t eos, f.get_int("tokenizer.ggml.eos_token_id"));
        if (eos < 0 || eos >= c.vocab)
            return Status::error(f.path() + ": tokenizer.ggml.eos_token_id is outside the vocabulary");
        c.eos_token_ids.push_back(static_cast<int>(eos));
    }
    GDN_RETURN_IF_ERROR(check_model_config(c, f.path(), arch + " "));
    return c;
}

}  // namespace gdn
