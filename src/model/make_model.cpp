#include "model/make_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "core/log.h"
#include "model/safetensors_writer.h"
#include "util/json_file.h"

namespace gdn {

namespace {

struct Geometry {
    std::string family;  // qwen3_next | qwen3_5 | qwen3_5_moe
    int H, L, V, Hk, Hv, Dk, Dv, K, Hq, Hkv, D, I, E, topk, Ie, Is;
    bool tied;
    int interval = 4;
    double theta = 1e7;
    int max_pos = 4096;
};

const std::map<std::string, std::pair<Geometry, std::string>>& presets() {
    static const std::map<std::string, std::pair<Geometry, std::string>> p = {
        {"qwen3_5-tiny",
         {{"qwen3_5", 64, 4, 1024, 2, 4, 16, 16, 4, 4, 2, 32, 128, 0, 0, 0, 0, true},
          "Qwen3.5 dense, 4 layers, hidden 64 (unit tests)"}},
        {"qwen3_5_moe-tiny",
         {{"qwen3_5_moe", 64, 4, 1024, 2, 4, 16, 16, 4, 4, 2, 32, 0, 8, 2, 32, 32, false},
          "Qwen3.5-MoE, 4 layers, hidden 64, 8 experts top-2, packed experts (unit tests)"}},
        {"qwen3_next-tiny",
         {{"qwen3_next", 64, 4, 1024, 2, 4, 16, 16, 4, 4, 2, 32, 128, 8, 2, 32, 32, false},
          "Qwen3-Next, 4 layers, hidden 64, fused qkvz/ba, per-expert tensors (unit tests)"}},
        {"qwen3_5-0.8b",
         {{"qwen3_5", 1024, 24, 248320, 16, 16, 128,  128, 4,   8,     2,
           256,       3584, 0,  0,      0,  0,  true, 4,   1e7, 262144},
          "Qwen3.5-0.8B shape: 24 layers, hidden 1024, tied, vocab 248320 (~1.5 GB bf16)"}},
        {"qwen3_5-9b",
         {{"qwen3_5", 4096,  32, 248320, 16, 32, 128,   128, 4,   16,    4,
           256,       12288, 0,  0,      0,  0,  false, 4,   1e7, 262144},
          "Qwen3.5-9B shape: 32 layers, hidden 4096, untied, vocab 248320 (~19 GB bf16; for load-memory "
          "checks)"}},
        {"qwen3_5-27b",
         {{"qwen3_5", 5120,  64, 248320, 16, 48, 128,   128, 4,   24,    4,
           256,       17408, 0,  0,      0,  0,  false, 4,   1e7, 262144},
          "Qwen3.5-27B shape: 64 layers, hidden 5120, untied, vocab 248320 (~54 GB bf16)"}},
        {"qwen3_5_moe-small",
         {{"qwen3_5_moe", 512, 8, 32768, 4, 8, 64, 64, 4, 8, 2, 128, 0, 32, 4, 256, 256, false},
          "Qwen3.5-MoE, 8 layers, hidden 512, 32 experts top-4 (benchmarks)"}},
        {"qwen3_5_moe-35b-a3b",
         {{"qwen3_5_moe", 2048, 40,  248320, 16,  32,  128,   128, 4,   16,    2,
           256,           0,    256, 8,      512, 512, false, 4,   1e7, 262144},
          "Qwen3.5-35B-A3B shape: 40 layers, hidden 2048, 256 experts top-8 (~70 GB bf16; --layers 4: 8.4 "
          "GB)"}},
        {"qwen3_next-80b-a3b",
         {{"qwen3_next", 2048, 48,  151936, 16,  32,  128,   128, 4,   16,    2,
           256,          5120, 512, 10,     512, 512, false, 4,   1e7, 262144},
          "Qwen3-Next-80B-A3B shape: 48 layers, hidden 2048, 512 experts top-10 (~160 GB bf16; --layers 2: "
          "7.7 GB)"}},
        {"qwen3_next-small",
         {{"qwen3_next", 512, 8, 32768, 4, 8, 64, 64, 4, 8, 2, 128, 1024, 32, 4, 256, 256, false},
          "Qwen3-Next, 8 layers, hidden 512, 32 experts top-4 (benchmarks)"}},
    };
    return p;
}

// Deterministic per-tensor random streams: seed and a CRC32 of the tensor name.
uint32_t crc32(const std::string& s) {
    uint32_t c = 0xffffffffu;
    for (unsigned char ch : s) {
        c ^= ch;
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return ~c;
}

class Rng {
  public:
    explicit Rng(uint64_t seed) : s_(seed ^ 0x9e3779b97f4a7c15ull) {}
    uint64_t next() {  // splitmix64
        uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    double normal() {
        double u1 = uniform(), u2 = uniform();
        if (u1 < 1e-300) u1 = 1e-300;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

  private:
    uint64_t s_;
};

SafetensorsWriter::Fill normal_fill(uint64_t seed, const std::string& name, double mean, double std) {
    return [=](float* dst, int64_t n) {
        Rng r(seed * 0x100000001b3ull + crc32(name));
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(mean + std * r.normal());
    };
}

Status write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    if (!f) return Status::error("cannot write " + path);
    f << text;
    return f.good() ? Status::ok() : Status::error("failed writing " + path);
}

Status copy_file(const std::string& from, const std::string& to) {
    GDN_ASSIGN_OR_RETURN(std::string text, read_text_file(from));
    return write_text(to, text);
}

Json config_json(const Geometry& g) {
    Json layer_types = Json::array();
    for (int i = 0; i < g.L; ++i)
        layer_types.push_back((i + 1) % g.interval == 0 ? "full_attention" : "linear_attention");
    Json dec = {
        {"hidden_size", g.H},
        {"num_hidden_layers", g.L},
        {"vocab_size", g.V},
        {"linear_num_key_heads", g.Hk},
        {"linear_num_value_heads", g.Hv},
        {"linear_key_head_dim", g.Dk},
        {"linear_value_head_dim", g.Dv},
        {"linear_conv_kernel_dim", g.K},
        {"num_attention_heads", g.Hq},
        {"num_key_value_heads", g.Hkv},
        {"head_dim", g.D},
        {"rms_norm_eps", 1e-6},
        {"hidden_act", "silu"},
        {"attention_bias", false},
        {"attn_output_gate", true},
        {"full_attention_interval", g.interval},
        {"max_position_embeddings", g.max_pos},
        {"tie_word_embeddings", g.tied},
        {"dtype", "bfloat16"},
    };
    if (g.I > 0) dec["intermediate_size"] = g.I;
    if (g.E > 0) {
        dec["num_experts"] = g.E;
        dec["num_experts_per_tok"] = g.topk;
        dec["moe_intermediate_size"] = g.Ie;
        dec["shared_expert_intermediate_size"] = g.Is;
    }
    if (g.family == "qwen3_next") {
        // Flat config like the released 80B: no layer_types, flat rope keys.
        dec["model_type"] = "qwen3_next";
        dec["architectures"] = {"Qwen3NextForCausalLM"};
        dec["rope_theta"] = g.theta;
        dec["partial_rotary_factor"] = 0.25;
        dec["rope_scaling"] = nullptr;
        dec["norm_topk_prob"] = true;
        dec["decoder_sparse_step"] = 1;
        dec["mlp_only_layers"] = Json::array();
        dec["bos_token_id"] = g.V > 1000 ? 0 : 956;
        dec["eos_token_id"] = 958;
        dec["torch_dtype"] = "bfloat16";
        dec.erase("dtype");
        return dec;
    }
    dec["model_type"] = g.family == "qwen3_5" ? "qwen3_5_text" : "qwen3_5_moe_text";
    dec["layer_types"] = layer_types;
    // mrope_section sums to rot/2 = D/8, split as Qwen does ([11, 11, 10] for 32).
    const int half = g.D / 8, s0 = (half + 2) / 3, s1 = (half + 1) / 3, s2 = half - s0 - s1;
    dec["rope_parameters"] = {{"rope_type", "default"},
                              {"rope_theta", g.theta},
                              {"partial_rotary_factor", 0.25},
                              {"mrope_section", {s0, s1, s2}},
                              {"mrope_interleaved", true}};
    dec["mtp_num_hidden_layers"] = 1;  // every preset writes one MTP layer (mtp.*), as the releases do
    dec["mamba_ssm_dtype"] = "float32";
    if (g.family == "qwen3_5") dec["mlp_only_layers"] = Json::array();
    return {
        {"architectures",
         {g.family == "qwen3_5" ? "Qwen3_5ForConditionalGeneration" : "Qwen3_5MoeForConditionalGeneration"}},
        {"model_type", g.family},
        {"text_config", dec},
        {"tie_word_embeddings", g.tied}};
}

void add_tensors(const Geometry& g, uint64_t seed, DType dt, SafetensorsWriter* w) {
    const bool next = g.family == "qwen3_next";
    const std::string P = next ? "model." : "model.language_model.";
    const int64_t KD = int64_t(g.Hk) * g.Dk, VD = int64_t(g.Hv) * g.Dv, CD = 2 * KD + VD;
    const DType small = next ? dt : DType::F32;  // A_log / linear_attn.norm: F32 in Qwen3.5 checkpoints
    auto lin = [&](const std::string& name, int64_t out, int64_t in) {
        w->add(name, dt, {out, in}, normal_fill(seed, name, 0.0, 1.0 / std::sqrt(double(in))));
    };
    auto norm = [&](const std::string& name, int64_t n) {
        w->add(name, dt, {n}, normal_fill(seed, name, 0.0, 0.1));
    };
    auto mlp = [&](const std::string& p, int64_t inter) {
        lin(p + "gate_proj.weight", inter, g.H);
        lin(p + "up_proj.weight", inter, g.H);
        lin(p + "down_proj.weight", g.H, inter);
    };
    const std::string emb = P + "embed_tokens.weight";
    w->add(emb, dt, {g.V, g.H}, normal_fill(seed, emb, 0.0, g.tied ? 2.0 / std::sqrt(double(g.H)) : 1.0));
    norm(P + "norm.weight", g.H);
    if (!g.tied)
        w->add("lm_head.weight", dt, {g.V, g.H},
               normal_fill(seed, "lm_head.weight", 0.0, 2.0 / std::sqrt(double(g.H))));
    auto attention = [&](const std::string& p) {
        lin(p + "self_attn.q_proj.weight", int64_t(g.Hq) * 2 * g.D, g.H);
        lin(p + "self_attn.k_proj.weight", int64_t(g.Hkv) * g.D, g.H);
        lin(p + "self_attn.v_proj.weight", int64_t(g.Hkv) * g.D, g.H);
        lin(p + "self_attn.o_proj.weight", g.H, int64_t(g.Hq) * g.D);
        norm(p + "self_attn.q_norm.weight", g.D);
        norm(p + "self_attn.k_norm.weight", g.D);
    };
    auto ffn = [&](const std::string& m) {
        if (g.E > 0) {
            w->add(m + "gate.weight", dt, {g.E, g.H},
                   normal_fill(seed, m + "gate.weight", 0.0, 1.5 / std::sqrt(double(g.H))));
            if (next) {
                for (int e = 0; e < g.E; ++e) mlp(m + "experts." + std::to_string(e) + ".", g.Ie);
            } else {
                w->add(m + "experts.gate_up_proj", dt, {g.E, 2 * int64_t(g.Ie), g.H},
                       normal_fill(seed, m + "experts.gate_up_proj", 0.0, 1.0 / std::sqrt(double(g.H))));
                w->add(m + "experts.down_proj", dt, {g.E, g.H, g.Ie},
                       normal_fill(seed, m + "experts.down_proj", 0.0, 1.0 / std::sqrt(double(g.Ie))));
            }
            mlp(m + "shared_expert.", g.Is);
            lin(m + "shared_expert_gate.weight", 1, g.H);
        } else {
            mlp(m, g.I);
        }
    };
    for (int i = 0; i < g.L; ++i) {
        const std::string p = P + "layers." + std::to_string(i) + ".";
        norm(p + "input_layernorm.weight", g.H);
        norm(p + "post_attention_layernorm.weight", g.H);
        if ((i + 1) % g.interval == 0) {
            attention(p);
        } else {
            const std::string a = p + "linear_attn.";
            if (next) {
                lin(a + "in_proj_qkvz.weight", 2 * KD + 2 * VD, g.H);
                lin(a + "in_proj_ba.weight", 2 * int64_t(g.Hv), g.H);
            } else {
                lin(a + "in_proj_qkv.weight", CD, g.H);
                lin(a + "in_proj_z.weight", VD, g.H);
                lin(a + "in_proj_b.weight", g.Hv, g.H);
                lin(a + "in_proj_a.weight", g.Hv, g.H);
            }
            w->add(a + "conv1d.weight", dt, {CD, 1, g.K},
                   normal_fill(seed, a + "conv1d.weight", 0.0, 1.0 / std::sqrt(double(g.K))));
            const std::string alog = a + "A_log";
            w->add(alog, small, {g.Hv}, [=](float* d, int64_t n) {
                Rng r(seed * 0x100000001b3ull + crc32(alog));
                for (int64_t j = 0; j < n; ++j) d[j] = static_cast<float>(std::log(1.0 + 15.0 * r.uniform()));
            });
            const std::string dtb = a + "dt_bias";
            w->add(dtb, dt, {g.Hv}, [=](float* d, int64_t n) {
                Rng r(seed * 0x100000001b3ull + crc32(dtb));
                for (int64_t j = 0; j < n; ++j) {
                    double dtv = std::exp(std::log(1e-3) + r.uniform() * (std::log(1e-1) - std::log(1e-3)));
                    d[j] = static_cast<float>(dtv + std::log(-std::expm1(-dtv)));  // softplus^-1
                }
            });
            w->add(a + "norm.weight", small, {g.Dv}, normal_fill(seed, a + "norm.weight", 1.0, 0.1));
            lin(a + "out_proj.weight", g.H, VD);
        }
        ffn(p + "mlp.");
    }
    // The MTP layer (model_spec.md §3.7), at the top level for every family: random like the rest, so its
    // drafts are mostly rejected; it exercises the MTP forward and the verify loop of each family.
    norm("mtp.pre_fc_norm_embedding.weight", g.H);
    norm("mtp.pre_fc_norm_hidden.weight", g.H);
    lin("mtp.fc.weight", g.H, 2 * int64_t(g.H));
    norm("mtp.layers.0.input_layernorm.weight", g.H);
    norm("mtp.layers.0.post_attention_layernorm.weight", g.H);
    attention("mtp.layers.0.");
    ffn("mtp.layers.0.mlp.");
    norm("mtp.norm.weight", g.H);
}

}  // namespace

std::vector<Preset> list_presets() {
    std::vector<Preset> v;
    for (const auto& [name, p] : presets()) v.push_back({name, p.second});
    return v;
}

Status make_model(const MakeModelOptions& opt) {
    auto it = presets().find(opt.preset);
    if (it == presets().end()) {
        std::string names;
        for (const auto& [n, p] : presets()) names += (names.empty() ? "" : ", ") + n;
        return Status::error("unknown preset '" + opt.preset + "' (available: " + names + ")");
    }
    Geometry g = it->second.first;
    if (opt.vocab_override > 0) g.V = opt.vocab_override;
    if (opt.layers_override > 0) g.L = opt.layers_override;
    if (opt.shards < 1 || opt.shards > 99) return Status::error("--shards must be in 1..99");
    if (opt.out_dir.empty()) return Status::error("an output folder is required (--out DIR)");
    if (::mkdir(opt.out_dir.c_str(), 0755) != 0 && errno != EEXIST)
        return Status::error(strprintf("cannot create %s: %s", opt.out_dir.c_str(), std::strerror(errno)));

    SafetensorsWriter all;
    add_tensors(g, opt.seed, opt.dtype, &all);
    GDN_RETURN_IF_ERROR(write_text(opt.out_dir + "/config.json", config_json(g).dump(2) + "\n"));
    Json gen = {{"eos_token_id", g.family == "qwen3_next" ? Json(958) : Json({958, 956})}};
    GDN_RETURN_IF_ERROR(write_text(opt.out_dir + "/generation_config.json", gen.dump(2) + "\n"));

    if (opt.shards == 1) {
        GDN_RETURN_IF_ERROR(all.write(opt.out_dir + "/model.safetensors"));
    } else {
        // Split by bytes in add order (layers stay together), as save_pretrained does.
        const uint64_t total = all.data_bytes(), per = (total + opt.shards - 1) / opt.shards;
        std::map<std::string, int> shard_of;
        uint64_t acc = 0;
        for (const auto& [name, bytes] : all.sizes()) {
            shard_of[name] = std::min<int>(opt.shards - 1, static_cast<int>(acc / per));
            acc += bytes;
        }
        Json weight_map = Json::object();
        for (int s = 0; s < opt.shards; ++s) {
            SafetensorsWriter shard = all;
            shard.keep_only([&](const std::string& n) { return shard_of.at(n) == s; });
            const std::string fname = strprintf("model-%05d-of-%05d.safetensors", s + 1, opt.shards);
            for (const auto& [name, bytes] : shard.sizes()) weight_map[name] = fname;
            GDN_RETURN_IF_ERROR(shard.write(opt.out_dir + "/" + fname));
        }
        Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
        GDN_RETURN_IF_ERROR(write_text(opt.out_dir + "/model.safetensors.index.json", index.dump(2) + "\n"));
    }
    if (!opt.tokenizer_dir.empty()) {
        bool any = false;
        for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
            std::string from = opt.tokenizer_dir + "/" + f;
            if (!file_exists(from)) continue;
            GDN_RETURN_IF_ERROR(copy_file(from, opt.out_dir + "/" + f));
            any = true;
        }
        if (!any) return Status::error("no tokenizer files found in " + opt.tokenizer_dir);
    }
    return Status::ok();
}

}  // namespace gdn
