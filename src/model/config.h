// ModelConfig: the decoder geometry of a Qwen3-Next / Qwen3.5 / Qwen3.5-MoE checkpoint, parsed from
// config.json (model_spec.md §2). Everything downstream reads this, never the JSON.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace gdn {

enum class ModelFamily { QWEN3_NEXT, QWEN3_5, QWEN3_5_MOE };
const char* family_name(ModelFamily f);

enum class LayerKind { LINEAR_ATTENTION, FULL_ATTENTION };

struct ModelConfig {
    ModelFamily family = ModelFamily::QWEN3_5;
    std::string model_type;  // as written in config.json (top level)

    int hidden = 0;    // H
    int n_layers = 0;  // L (main stack; excludes MTP)
    int vocab = 0;     // V (embedding rows, padded)
    float rms_eps = 1e-6f;
    bool tie_embeddings = false;
    DType weight_dtype = DType::BF16;  // "dtype"/"torch_dtype"
    int max_position = 0;
    std::vector<LayerKind> layer_kinds;  // [L]

    // Gated DeltaNet ("linear attention")
    int gdn_k_heads = 0;  // Hk
    int gdn_v_heads = 0;  // Hv
    int gdn_k_dim = 0;    // Dk
    int gdn_v_dim = 0;    // Dv
    int conv_kernel = 0;  // K
    // The value heads' order in every V-sized weight and state: grouped (HF: key head g's value heads are
    // g * r .. g * r + r - 1) or tiled (g, g + Hk, ...: a GGUF Qwen3.5 file, whose converter reorders them
    // so that ggml can broadcast q and k; out_proj's input columns cannot be reordered back exactly inside
    // quantized blocks, so the GDN layer runs in the file's order: ops/layers.h GdnParams::v_tiled).
    bool gdn_v_tiled = false;

    // Gated full attention
    int attn_heads = 0;     // Hq
    int attn_kv_heads = 0;  // Hkv
    int head_dim = 0;       // D (explicit; never H / Hq)
    int rotary_dim = 0;     // int(D * partial_rotary_factor)
    float rope_theta = 10000.0f;
    bool attn_output_gate = true;

    // MLP / MoE
    int intermediate = 0;         // dense MLP width (0 if no dense layer exists)
    int n_experts = 0;            // E (0: dense model)
    int n_experts_per_tok = 0;    // top-k
    int moe_intermediate = 0;     // Ie
    int shared_intermediate = 0;  // Is
    bool norm_topk_prob = true;
    int decoder_sparse_step = 1;
    std::vector<int> mlp_only_layers;

    int mtp_layers = 0;
    std::vector<int> eos_token_ids;  // from config.json; generation_config.json may add more

    // Derived sizes
    int gdn_key_dim() const { return gdn_k_heads * gdn_k_dim; }               // KD
    int gdn_value_dim() const { return gdn_v_heads * gdn_v_dim; }             // VD
    int gdn_conv_dim() const { return 2 * gdn_key_dim() + gdn_value_dim(); }  // CD
    // One GDN layer's state of one sequence, in floats: the conv window [K-1, CD] and the recurrent state
    // [Hv, Dk, Dv] (StateSlots, SequenceState and the memory plan all size from these).
    int64_t gdn_conv_state_floats() const { return static_cast<int64_t>(conv_kernel - 1) * gdn_conv_dim(); }
    int64_t gdn_ssm_state_floats() const { return static_cast<int64_t>(gdn_v_heads) * gdn_k_dim * gdn_v_dim; }
    // One token's GDN input row: the fused in_proj output q|k|v (CD) | z (VD) | b (Hv) | a (Hv).
    int64_t gdn_in_proj_floats() const {
        return int64_t{gdn_conv_dim()} + gdn_value_dim() + 2 * int64_t{gdn_v_heads};
    }
    bool is_attention(int layer) const { return layer_kinds[layer] == LayerKind::FULL_ATTENTION; }
    bool is_moe_layer(int layer) const;
    int n_attention_layers() const;
    int n_gdn_layers() const { return n_layers - n_attention_layers(); }
    std::string summary() const;
};

// Parses config.json text. `path` is used in error messages only.
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& path);
// The checks across fields every config must pass, whatever file it came from (sizes positive, heads
// that divide, top-k within the experts, ...): an error names the field as `prefix` + its config.json key.
Status check_model_config(const ModelConfig& c, const std::string& path, const std::string& prefix = "");
// Reads DIR/config.json, then DIR/generation_config.json (if present) for eos ids.
Result<ModelConfig> load_model_config(const std::string& dir);

}  // namespace gdn
