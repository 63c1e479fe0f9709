#include "model/gguf_checkpoint.h"

#include <cstring>
#include <map>
#include <regex>

#include "core/log.h"

namespace gdn {

namespace {

// blk.N.<suffix> -> <canonical suffix> inside layer N (llama.cpp's LLM_TENSOR names for qwen35,
// qwen35moe and qwen3next).
const std::map<std::string, std::string>& layer_names() {
    static const std::map<std::string, std::string> m = {
        {"attn_norm.weight", "input_layernorm.weight"},
        {"post_attention_norm.weight", "post_attention_layernorm.weight"},
        {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight"},
        {"attn_gate.weight", "linear_attn.in_proj_z.weight"},
        {"ssm_conv1d.weight", "linear_attn.conv1d.weight"},
        {"ssm_dt.bias", "linear_attn.dt_bias"},
        {"ssm_a", "linear_attn.neg_exp_A"},
        {"ssm_alpha.weight", "linear_attn.in_proj_a.weight"},
        {"ssm_beta.weight", "linear_attn.in_proj_b.weight"},
        {"ssm_ba.weight", "linear_attn.in_proj_ba.weight"},
        {"ssm_norm.weight", "linear_attn.norm.weight"},
        {"ssm_out.weight", "linear_attn.out_proj.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_output.weight", "self_attn.o_proj.weight"},
        {"attn_q_norm.weight", "self_attn.q_norm.weight"},
        {"attn_k_norm.weight", "self_attn.k_norm.weight"},
        {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"},
        {"ffn_down.weight", "mlp.down_proj.weight"},
        {"ffn_gate_inp.weight", "mlp.gate.weight"},
        {"ffn_gate_exps.weight", "mlp.experts.gate_proj"},
        {"ffn_up_exps.weight", "mlp.experts.up_proj"},
        {"ffn_gate_up_exps.weight", "mlp.experts.gate_up_proj"},
        {"ffn_down_exps.weight", "mlp.experts.down_proj"},
        {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
        {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
        {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
        {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
    };
    return m;
}

// The MTP block's own tensors (blk.{n_layers}.nextn.*), at the top of mtp.*.
const std::map<std::string, std::string>& nextn_names() {
    static const std::map<std::string, std::string> m = {
        {"nextn.eh_proj.weight", "mtp.fc.weight"},
        {"nextn.enorm.weight", "mtp.pre_fc_norm_embedding.weight"},
        {"nextn.hnorm.weight", "mtp.pre_fc_norm_hidden.weight"},
        {"nextn.shared_head_norm.weight", "mtp.norm.weight"},
    };
    return m;
}

// The view of one tensor: dims reversed into row-major order; float types as they are, quantized ones as
// ggml rows with byte strides.
Result<TensorView> tensor_view(const GgufFile& f, const GgufFile::Tensor& t) {
    const GgmlType type = t.type->type;
    auto fail = [&](const std::string& what) {
        return Status::error(strprintf("%s: tensor '%s' %s", f.path().c_str(), t.name.c_str(), what.c_str()));
    };
    if (t.dims.empty() || t.dims.size() > 4) return fail("must have 1 to 4 dimensions");
    TensorView v;
    v.rank = static_cast<int>(t.dims.size());
    for (int i = 0; i < v.rank; ++i) v.shape[i] = t.dims[v.rank - 1 - i];
    v.data = const_cast<uint8_t*>(t.data);
    if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) {
        v.dtype = type == GgmlType::F32 ? DType::F32 : type == GgmlType::F16 ? DType::F16 : DType::BF16;
        if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(v.dtype) != 0)
            return fail("is not aligned to its element size");
        int64_t s = 1;
        for (int d = v.rank - 1; d >= 0; --d) {
            v.stride[d] = s;
            s *= v.shape[d];
        }
        return v;
    }
    if (!ggml_type_dequantizable(type))
        return fail(
            strprintf("has type %s, which gdn does not read (it reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, "
                      "Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4)",
                      t.type->name));
    if (v.rank < 2)
        return fail(strprintf("is a %s vector (a quantized tensor must be a matrix)", t.type->name));
    v.dtype = DType::GGML;
    v.ggml_type = static_cast<uint32_t>(type);
    v.stride[v.rank - 1] = 1;
    v.stride[v.rank - 2] = t.dims[0] / t.type->block_elems * t.type->block_bytes;  // one row's bytes
    for (int d = v.rank - 3; d >= 0; --d) v.stride[d] = v.stride[d + 1] * v.shape[d + 1];
    return v;
}

}  // namespace

std::string gguf_canonical_name(const std::string& name, int n_layers) {
    if (name == "token_embd.weight") return "embed_tokens.weight";
    if (name == "output_norm.weight") return "norm.weight";
    if (name == "output.weight") return "lm_head.weight";
    if (name.rfind("blk.", 0) != 0) return "";
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos || dot == 4 || dot > 14) return "";
    for (size_t i = 4; i < dot; ++i)
        if (name[i] < '0' || name[i] > '9') return "";
    const long long layer = std::stoll(name.substr(4, dot - 4));
    const std::string suffix = name.substr(dot + 1);
    if (layer == n_layers) {  // the MTP block
        if (auto it = nextn_names().find(suffix); it != nextn_names().end()) return it->second;
        if (auto it = layer_names().find(suffix); it != layer_names().end())
            return "mtp.layers.0." + it->second;
        return "";
    }
    if (layer > n_layers) return "";
    auto it = layer_names().find(suffix);
    return it == layer_names().end() ? "" : "layers." + std::to_string(layer) + "." + it->second;
}

Result<std::vector<std::shared_ptr<const GgufFile>>> open_gguf_parts(const std::string& path) {
    GDN_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> first, GgufFile::open(path));
    std::vector<std::shared_ptr<const GgufFile>> parts;
    int64_t count = 1;
    if (first->find("split.count")) {
        GDN_ASSIGN_OR_RETURN(count, first->get_int("split.count"));
    }
    parts.push_back(std::move(first));
    if (count == 1) return parts;
    // NAME-00001-of-00003.gguf: the other parts' names differ in the first number only.
    const std::regex split_name(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
    std::smatch m;
    if (count < 1 || count > 9999 || !std::regex_match(path, m, split_name) || std::stoll(m[2]) != 1 ||
        std::stoll(m[3]) != count)
        return Status::error(
            strprintf("%s: split.count is %lld, but the name is not that of the first part "
                      "(NAME-00001-of-%05lld.gguf)",
                      path.c_str(), static_cast<long long>(count), static_cast<long long>(count)));
    for (int64_t i = 2; i <= count; ++i) {
        const std::string part = strprintf("%s-%05lld-of-%05lld.gguf", m[1].str().c_str(),
                                           static_cast<long long>(i), static_cast<long long>(count));
        if (!is_gguf_path(part))
            return Status::error(
                strprintf("%s: part %lld of %lld of the split model is missing or not a GGUF file",
                          part.c_str(), static_cast<long long>(i), static_cast<long long>(count)));
        GDN_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::open(part));
        int64_t no = -1, n = -1;
        if (f->find("split.no")) {
            GDN_ASSIGN_OR_RETURN(no, f->get_int("split.no"));
        }
        if (f->find("split.count")) {
            GDN_ASSIGN_OR_RETURN(n, f->get_int("split.count"));
        }
        if (no != i - 1 || n != count)
            return Status::error(
                strprintf("%s: split.no / split.count say part %lld of %lld, expected %lld of %lld",
                          part.c_str(), static_cast<long long>(no + 1), static_cast<long long>(n),
                          static_cast<long long>(i), static_cast<long long>(count)));
        parts.push_back(std::move(f));
    }
    return parts;
}

Result<Checkpoint> gguf_checkpoint(std::vector<std::shared_ptr<const GgufFile>> parts,
                                   const ModelConfig& config) {
    std::map<std::string, TensorView> tensors;
    for (const auto& file : parts)
        for (const GgufFile::Tensor& t : file->tensors()) {
            std::string name = gguf_canonical_name(t.name, config.n_layers);
            if (name.empty()) name = t.name;  // kept under its own name: reported unused by the loader
            GDN_ASSIGN_OR_RETURN(TensorView v, tensor_view(*file, t));
            // The shared-expert gate is [1, H] (ne {H, 1}); llama-quantize drops the trailing 1.
            const std::string gate = "shared_expert_gate.weight";
            if (v.rank == 1 && name.size() >= gate.size() &&
                name.compare(name.size() - gate.size(), gate.size(), gate) == 0)
                v = TensorView::contiguous(v.data, v.dtype, {1, v.shape[0]});
            if (!tensors.emplace(name, v).second)
                return Status::error(strprintf("%s: tensor '%s' appears twice (or two tensors map to '%s')",
                                               file->path().c_str(), t.name.c_str(), name.c_str()));
        }
    return Checkpoint::from_gguf(std::move(parts), std::move(tensors));
}

}  // namespace gdn
