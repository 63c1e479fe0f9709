// The GGUF reader: llama.cpp's own files (the converter's and llama-quantize's, tests/data/gguf and, when
// present, every file of ../shared/gguf) read back with exactly the tensors, types and shapes that
// llama.cpp's gguf-py listed for them (tensors.tsv); and every hostile-file case of issue 54 an error
// that names what was wrong, including every truncation of a valid file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/gguf_tokenizer.h"
#include "model/checkpoint.h"
#include "model/gguf_config.h"
#include "model/gguf_file.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

// A small GGUF writer for the tests: metadata and tensors appended in order, offsets computed.
class GgufBuilder {
  public:
    explicit GgufBuilder(uint32_t version = 3) : version_(version) {}
    GgufBuilder& kv_u32(const std::string& k, uint32_t v) { return kv(k, GgufValue::UINT32, pod(v)); }
    GgufBuilder& kv_str(const std::string& k, const std::string& v) {
        return kv(k, GgufValue::STRING, str(v));
    }
    GgufBuilder& kv_raw(const std::string& k, uint32_t type, const std::string& bytes) {
        return kv(k, type, bytes);
    }
    GgufBuilder& kv_str_array(const std::string& k, const std::vector<std::string>& v) {
        std::string b = pod(uint32_t{GgufValue::STRING}) + pod(uint64_t{v.size()});
        for (const auto& s : v) b += str(s);
        return kv(k, GgufValue::ARRAY, b);
    }
    // A tensor of `type` with dims (ne0 first) and `bytes` of data (its offset: after the previous one,
    // aligned; or `offset` when >= 0).
    GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, size_t bytes,
                        int64_t offset = -1) {
        infos_ += str(name) + pod(static_cast<uint32_t>(dims.size()));
        for (uint64_t d : dims) infos_ += pod(d);
        const uint64_t at = offset >= 0 ? static_cast<uint64_t>(offset) : (data_.size() + 31) / 32 * 32;
        infos_ += pod(type) + pod(at);
        if (data_.size() < at + bytes) data_.resize(at + bytes, '\x11');
        ++n_tensors_;
        return *this;
    }
    std::string bytes() const {
        std::string head = "GGUF" + pod(version_) + pod(n_tensors_) + pod(n_kv_) + kvs_ + infos_;
        head.resize((head.size() + 31) / 32 * 32, '\0');
        return head + data_;
    }
    static std::string str(const std::string& s) { return pod(uint64_t{s.size()}) + s; }
    template <class T>
    static std::string pod(T v) {
        return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
    }

  private:
    GgufBuilder& kv(const std::string& k, uint32_t type, const std::string& value) {
        kvs_ += str(k) + pod(type) + value;
        ++n_kv_;
        return *this;
    }
    uint32_t version_;
    uint64_t n_tensors_ = 0, n_kv_ = 0;
    std::string kvs_, infos_, data_;
};

Result<std::unique_ptr<GgufFile>> parse(const std::string& b) {
    return GgufFile::parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "test.gguf");
}

std::string expect_error(const std::string& b, const std::string& needle) {
    auto f = parse(b);
    EXPECT_FALSE(f.is_ok()) << "accepted a file that should be refused (" << needle << ")";
    if (f.is_ok()) return "";
    EXPECT_NE(f.message().find(needle), std::string::npos) << f.message();
    return f.message();
}

// tensors.tsv: file, name, type, shape (ne0 first, comma-separated).
struct TsvTensor {
    std::string type;
    std::vector<int64_t> dims;
};
std::map<std::string, std::map<std::string, TsvTensor>> read_tsv(const std::string& path) {
    std::map<std::string, std::map<std::string, TsvTensor>> out;
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
        std::vector<std::string> col;
        std::stringstream ss(line);
        for (std::string c; std::getline(ss, c, '\t');) col.push_back(c);
        if (col.size() < 4 || col[0] == "file") continue;
        TsvTensor t{col[2], {}};
        std::string shape = col[3];
        for (char& ch : shape)
            if (ch == '[' || ch == ']' || ch == ',') ch = ' ';
        std::stringstream sh(shape);
        for (int64_t d; sh >> d;) t.dims.push_back(d);
        out[col[0]][col[1]] = t;
    }
    return out;
}

// llama.cpp's files read back as gguf-py listed them.
void check_against_tsv(const std::string& path, const std::map<std::string, TsvTensor>& want) {
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.message();
    EXPECT_EQ((*f)->version(), 3u);
    auto arch = (*f)->get_string("general.architecture");
    ASSERT_TRUE(arch.is_ok()) << arch.message();
    EXPECT_TRUE(*arch == "qwen35" || *arch == "qwen35moe" || *arch == "qwen3next") << *arch;
    auto tokens = (*f)->get_strings("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.is_ok()) << tokens.message();
    EXPECT_GT(tokens->size(), 1000u);
    EXPECT_TRUE((*f)->get_string("tokenizer.chat_template").is_ok());
    ASSERT_EQ((*f)->tensors().size(), want.size()) << path;
    for (const GgufFile::Tensor& t : (*f)->tensors()) {
        auto it = want.find(t.name);
        ASSERT_NE(it, want.end()) << path << ": " << t.name;
        EXPECT_EQ(t.type->name, it->second.type) << path << ": " << t.name;
        EXPECT_EQ(t.dims, it->second.dims) << path << ": " << t.name;
    }
}

TEST(Gguf, ReadsLlamaCppFilesAsGgufPyListsThem) {
    const std::string dir = source_dir() + "/tests/data/gguf";
    const auto tsv = read_tsv(dir + "/tensors.tsv");
    ASSERT_FALSE(tsv.empty());
    int checked = 0;
    for (const char* name : {"golden-qwen3_5-q4_k_m.gguf", "golden-qwen3_5_moe-mxfp4_moe.gguf"}) {
        ASSERT_TRUE(tsv.count(name)) << name;
        check_against_tsv(dir + "/" + name, tsv.at(name));
        ++checked;
    }
    // Every file of the shared folder, when this checkout sits beside it.
    const std::string shared = source_dir() + "/../shared/gguf";
    if (std::filesystem::exists(shared))
        for (const auto& e : std::filesystem::directory_iterator(shared)) {
            const std::string name = e.path().filename().string();
            if (e.path().extension() != ".gguf" || !tsv.count(name)) continue;
            check_against_tsv(e.path().string(), tsv.at(name));
            ++checked;
            if (name.rfind("demo-", 0) != 0) continue;  // the demo model's quantizations: its geometry
            auto f = GgufFile::open(e.path().string());
            auto g = gguf_model_config(**f);
            auto hf = load_model_config(demo_model_dir());
            ASSERT_TRUE(g.is_ok() && hf.is_ok()) << g.message();
            EXPECT_EQ(g->summary(), hf->summary()) << name;
            EXPECT_EQ(g->tie_embeddings, hf->tie_embeddings) << name;
            EXPECT_EQ(g->vocab, hf->vocab) << name;
        }
    std::printf("checked %d llama.cpp GGUF files\n", checked);
}

TEST(Gguf, TypedMetadataReadsNameTheKeyAndTheType) {
    const std::string b = GgufBuilder()
                              .kv_str("general.architecture", "qwen35")
                              .kv_u32("qwen35.block_count", 24)
                              .kv_str_array("tokenizer.ggml.tokens", {"a", "bc"})
                              .tensor("w", {32, 2}, 0, 32 * 2 * 4)
                              .bytes();
    auto f = parse(b);
    ASSERT_TRUE(f.is_ok()) << f.message();
    EXPECT_EQ(*(*f)->get_int("qwen35.block_count"), 24);
    EXPECT_EQ(*(*f)->get_string("general.architecture"), "qwen35");
    EXPECT_EQ((*(*f)->get_strings("tokenizer.ggml.tokens"))[1], "bc");
    auto wrong = (*f)->get_int("general.architecture");
    ASSERT_FALSE(wrong.is_ok());
    EXPECT_NE(wrong.message().find("'general.architecture' must be an integer"), std::string::npos)
        << wrong.message();
    EXPECT_NE(wrong.message().find("but is string"), std::string::npos) << wrong.message();
    auto missing = (*f)->get_int("qwen35.embedding_length");
    ASSERT_FALSE(missing.is_ok());
    EXPECT_NE(missing.message().find("'qwen35.embedding_length' is missing"), std::string::npos);
    const GgufFile::Tensor* w = (*f)->tensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->bytes, 256u);
    EXPECT_EQ(w->elements(), 64);
}

// The geometry from a GGUF's metadata is the HF config's it was converted from (the golden checkpoints).
TEST(Gguf, ConfigFromMetadataEqualsTheHfConfig) {
    const std::pair<const char*, const char*> files[] = {{"qwen3_5", "golden-qwen3_5-q4_k_m.gguf"},
                                                         {"qwen3_5_moe", "golden-qwen3_5_moe-mxfp4_moe.gguf"},
                                                         {"qwen3_next", "golden-qwen3_next-q4_k_m.gguf"}};
    for (const auto& [family, file] : files) {
        SCOPED_TRACE(family);
        auto hf = load_model_config(golden_dir(family));
        ASSERT_TRUE(hf.is_ok()) << hf.message();
        auto f = GgufFile::open(source_dir() + "/tests/data/gguf/" + file);
        ASSERT_TRUE(f.is_ok()) << f.message();
        auto g = gguf_model_config(**f);
        ASSERT_TRUE(g.is_ok()) << g.message();
        EXPECT_EQ(g->family, hf->family);
        EXPECT_EQ(g->model_type, hf->model_type);
        EXPECT_EQ(g->summary(), hf->summary());
        EXPECT_EQ(g->hidden, hf->hidden);
        EXPECT_EQ(g->n_layers, hf->n_layers);
        EXPECT_EQ(g->vocab, hf->vocab);
        EXPECT_EQ(g->rms_eps, hf->rms_eps);
        EXPECT_EQ(g->tie_embeddings, hf->tie_embeddings);
        EXPECT_EQ(g->max_position, hf->max_position);
        EXPECT_EQ(g->layer_kinds, hf->layer_kinds);
        EXPECT_EQ(g->gdn_k_heads, hf->gdn_k_heads);
        EXPECT_EQ(g->gdn_v_heads, hf->gdn_v_heads);
        EXPECT_EQ(g->gdn_k_dim, hf->gdn_k_dim);
        EXPECT_EQ(g->gdn_v_dim, hf->gdn_v_dim);
        EXPECT_EQ(g->conv_kernel, hf->conv_kernel);
        EXPECT_EQ(g->attn_heads, hf->attn_heads);
        EXPECT_EQ(g->attn_kv_heads, hf->attn_kv_heads);
        EXPECT_EQ(g->head_dim, hf->head_dim);
        EXPECT_EQ(g->rotary_dim, hf->rotary_dim);
        EXPECT_EQ(g->rope_theta, hf->rope_theta);
        EXPECT_EQ(g->n_experts, hf->n_experts);
        EXPECT_EQ(g->n_experts_per_tok, hf->n_experts_per_tok);
        EXPECT_EQ(g->moe_intermediate, hf->moe_intermediate);
        EXPECT_EQ(g->shared_intermediate, hf->shared_intermediate);
        EXPECT_EQ(g->norm_topk_prob, hf->norm_topk_prob);
        EXPECT_EQ(g->mtp_layers, hf->mtp_layers);
        for (int i = 0; i < g->n_layers; ++i) EXPECT_EQ(g->is_moe_layer(i), hf->is_moe_layer(i)) << i;
        if (hf->family == ModelFamily::QWEN3_5) {
            EXPECT_EQ(g->intermediate, hf->intermediate);
        }
    }
    // A known key of the wrong type, a missing one, and an architecture this engine does not run.
    auto bad = [](const std::string& b) {
        auto f = GgufFile::parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "t.gguf");
        EXPECT_TRUE(f.is_ok()) << f.message();
        auto c = gguf_model_config(**f);
        EXPECT_FALSE(c.is_ok());
        return c.is_ok() ? std::string() : c.message();
    };
    EXPECT_NE(bad(GgufBuilder().kv_str("general.architecture", "llama").bytes()).find("'llama' is not one"),
              std::string::npos);
    EXPECT_NE(
        bad(GgufBuilder().kv_str("general.architecture", "qwen35").kv_str("qwen35.block_count", "24").bytes())
            .find("'qwen35.block_count' must be an integer"),
        std::string::npos);
    EXPECT_NE(
        bad(GgufBuilder().kv_str("general.architecture", "qwen35").kv_u32("qwen35.block_count", 24).bytes())
            .find("'qwen35.embedding_length' is missing"),
        std::string::npos);
}

// The tokenizer a GGUF carries is the tokenizer.json it was converted from: the same ids for every case of
// the tokenizer fixtures and the held-out text, the same vocabulary, eos and chat template.
void expect_same_tokenizer(const std::string& gguf_path, const std::string& hf_dir) {
    SCOPED_TRACE(gguf_path);
    auto f = GgufFile::open(gguf_path);
    ASSERT_TRUE(f.is_ok()) << f.message();
    auto g = gguf_tokenizer(**f);
    ASSERT_TRUE(g.is_ok()) << g.message();
    auto hf = Tokenizer::load(hf_dir);
    ASSERT_TRUE(hf.is_ok()) << hf.message();
    EXPECT_EQ((*g)->vocab_size(), (*hf)->vocab_size());
    EXPECT_EQ((*g)->eos_token_id(), (*hf)->eos_token_id());
    EXPECT_EQ((*g)->chat_template(), (*hf)->chat_template());
    for (int32_t id = 0; id < (*hf)->vocab_size(); ++id) {
        ASSERT_EQ((*g)->token_text(id), (*hf)->token_text(id)) << id;
        ASSERT_EQ((*g)->is_special(id), (*hf)->is_special(id)) << id;
    }
    std::vector<std::string> texts;
    const std::string cases = read_bytes(source_dir() + "/tests/data/tokenizer/cases.inp");
    for (size_t at = 0; at < cases.size();) {
        const size_t end = cases.find("\n__gdn_case__\n", at);
        texts.push_back(cases.substr(at, end == std::string::npos ? std::string::npos : end - at));
        at = end == std::string::npos ? cases.size() : end + 14;
    }
    texts.push_back(read_bytes(source_dir() + "/tests/data/heldout/debian_fortunes.txt"));
    texts.push_back("<|im_start|>user\nhi<|im_end|>\n<think>\n\n</think>\n\n");
    size_t tokens = 0;
    for (const std::string& t : texts) {
        const std::vector<int32_t> a = (*g)->encode(t), b = (*hf)->encode(t);
        ASSERT_EQ(a, b) << t.substr(0, 80);
        tokens += a.size();
    }
    EXPECT_GT(tokens, 1000u);
}

TEST(Gguf, TokenizerFromMetadataEqualsTokenizerJson) {
    expect_same_tokenizer(source_dir() + "/tests/data/gguf/golden-qwen3_5-q4_k_m.gguf",
                          golden_dir("qwen3_5"));
    expect_same_tokenizer(source_dir() + "/tests/data/gguf/golden-qwen3_next-q4_k_m.gguf",
                          golden_dir("qwen3_next"));
    const std::string demo = source_dir() + "/../shared/gguf/demo-q8_0.gguf";
    if (std::filesystem::exists(demo)) expect_same_tokenizer(demo, demo_model_dir());
}

TEST(Gguf, TokenizerArraysThatDoNotFitAreErrors) {
    BpeArrays a;
    a.tokens = {"a", "b"};
    a.types = {1, 1};
    a.pre = "llama3";
    auto t = Tokenizer::from_bpe_arrays(a, "x.gguf");
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.message().find("'llama3' is not a pre-tokenizer"), std::string::npos) << t.message();
    a.pre = "qwen2";
    a.types = {1};
    t = Tokenizer::from_bpe_arrays(a, "x.gguf");
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.message().find("1 entries for 2 tokens"), std::string::npos) << t.message();
    a.types = {1, 6};
    t = Tokenizer::from_bpe_arrays(a, "x.gguf");
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.message().find("token 1 has type 6"), std::string::npos) << t.message();
    a.types = {1, 1};
    a.tokens = {"a", "\xff\xfe"};
    t = Tokenizer::from_bpe_arrays(a, "x.gguf");
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.message().find("not valid UTF-8"), std::string::npos) << t.message();
}

// The reference dequantization against the weights each file was quantized from: every quantized
// tensor of the golden GGUFs (Q4_K, Q5_K, Q6_K, Q5_0, Q8_0, MXFP4) comes back within its format's error of
// the HF checkpoint's values (relative RMS error; a wrong block layout or nibble order gives ~1.4).
double max_relative_error(GgmlType t) {
    switch (t) {
        case GgmlType::Q8_0:
            return 0.01;
        case GgmlType::Q6_K:
            return 0.03;
        case GgmlType::Q5_0:
        case GgmlType::Q5_K:
            return 0.06;
        case GgmlType::Q4_K:
        case GgmlType::Q4_0:
        case GgmlType::IQ4_XS:
            return 0.12;
        case GgmlType::Q3_K:
            return 0.25;
        case GgmlType::Q2_K:
            return 0.45;
        case GgmlType::MXFP4:
            return 0.25;
        default:
            return 0;
    }
}

float ref_value(const TensorView& v, int64_t i) {
    return v.dtype == DType::F32 ? v.ptr<float>()[i] : bf16_to_f32(v.ptr<uint16_t>()[i]);
}

// The GGUF tensor's values [offset, offset + n) against ref's values [ref_offset, ...): relative RMS error.
double relative_error(const std::vector<float>& got, int64_t offset, int64_t n, const TensorView& ref,
                      int64_t ref_offset) {
    double err = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double r = ref_value(ref, ref_offset + i), d = got[offset + i] - r;
        err += d * d;
        norm += r * r;
    }
    return std::sqrt(err / std::max(norm, 1e-30));
}

TEST(Gguf, DequantizedValuesAreTheWeightsTheyCameFrom) {
    struct Pair {
        std::string gguf, hf;
        int64_t experts = 0;  // > 0: a stacked [E, rows, K] tensor against per-expert HF tensors ({e} in hf)
        int64_t half = -1;    // 0 / 1: the gate or up half of a fused gate_up_proj [E, 2I, H]
    };
    struct File {
        const char* gguf;
        const char* family;
        std::vector<Pair> pairs;
    };
    const std::vector<File> files = {
        {"golden-qwen3_5-q4_k_m.gguf",
         "qwen3_5",
         {{"token_embd.weight", "embed_tokens.weight"},
          {"blk.0.ffn_gate.weight", "layers.0.mlp.gate_proj.weight"},
          {"blk.1.ffn_up.weight", "layers.1.mlp.up_proj.weight"},
          {"blk.2.ffn_down.weight", "layers.2.mlp.down_proj.weight"},
          {"blk.3.ffn_down.weight", "layers.3.mlp.down_proj.weight"}}},
        {"golden-qwen3_next-q4_k_m.gguf",
         "qwen3_next",
         {{"token_embd.weight", "embed_tokens.weight"},
          {"output.weight", "lm_head.weight"},
          {"blk.0.ffn_gate_shexp.weight", "layers.0.mlp.shared_expert.gate_proj.weight"},
          {"blk.0.ffn_down_shexp.weight", "layers.0.mlp.shared_expert.down_proj.weight"},
          {"blk.3.ffn_down_shexp.weight", "layers.3.mlp.shared_expert.down_proj.weight"},
          {"blk.0.ffn_gate_exps.weight", "layers.0.mlp.experts.{e}.gate_proj.weight", 8},
          {"blk.0.ffn_down_exps.weight", "layers.0.mlp.experts.{e}.down_proj.weight", 8},
          {"blk.3.ffn_down_exps.weight", "layers.3.mlp.experts.{e}.down_proj.weight", 8},
          {"blk.3.attn_k.weight", "layers.3.self_attn.k_proj.weight"},
          {"blk.3.attn_output.weight", "layers.3.self_attn.o_proj.weight"}}},
        {"golden-qwen3_5_moe-mxfp4_moe.gguf",
         "qwen3_5_moe",
         {{"blk.0.ffn_down_exps.weight", "layers.0.mlp.experts.down_proj"},
          {"blk.0.ffn_gate_exps.weight", "layers.0.mlp.experts.gate_up_proj", 8, 0},
          {"blk.0.ffn_up_exps.weight", "layers.0.mlp.experts.gate_up_proj", 8, 1},
          {"blk.0.ffn_up_shexp.weight", "layers.0.mlp.shared_expert.up_proj.weight"}}},
    };
    std::map<std::string, int> seen;  // type -> tensors checked
    for (const File& file : files) {
        auto f = GgufFile::open(source_dir() + "/tests/data/gguf/" + file.gguf);
        ASSERT_TRUE(f.is_ok()) << f.message();
        auto ck = Checkpoint::open(golden_dir(file.family));
        ASSERT_TRUE(ck.is_ok()) << ck.message();
        for (const Pair& p : file.pairs) {
            SCOPED_TRACE(std::string(file.gguf) + " " + p.gguf);
            const GgufFile::Tensor* t = (*f)->tensor(p.gguf);
            ASSERT_NE(t, nullptr);
            ASSERT_TRUE(ggml_type_dequantizable(t->type->type));
            std::vector<float> got(t->elements());
            dequantize_ggml_row(t->type->type, t->data, t->elements(), got.data());
            const double bound = max_relative_error(t->type->type);
            ASSERT_GT(bound, 0) << t->type->name;
            const int64_t per_expert = p.experts > 0 ? t->elements() / p.experts : t->elements();
            for (int64_t e = 0; e < std::max<int64_t>(p.experts, 1); ++e) {
                std::string name = p.hf;
                if (auto at = name.find("{e}"); at != std::string::npos)
                    name.replace(at, 3, std::to_string(e));
                const TensorView* ref = ck->find(name);
                ASSERT_NE(ref, nullptr) << name;
                int64_t ref_offset = 0;
                if (p.half >= 0)  // [E, 2I, H]: expert e's gate or up rows
                    ref_offset = (2 * e + p.half) * per_expert;
                else if (p.experts > 0 && ref->numel() == t->elements())  // one stacked HF tensor
                    ref_offset = e * per_expert;
                const double err = relative_error(got, e * per_expert, per_expert, *ref, ref_offset);
                EXPECT_LT(err, bound) << name << " (" << t->type->name << ")";
            }
            seen[t->type->name]++;
        }
    }
    for (const char* type : {"Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q8_0", "MXFP4"})
        EXPECT_GT(seen[type], 0) << type << " was not checked against its source weights";
    // The demo model's quantizations in ../shared/gguf when this checkout sits beside it (Q4_0, IQ4_XS,
    // Q2_K, Q3_K besides): every FFN matrix and the embedding against models/demo.
    const std::string shared = source_dir() + "/../shared/gguf";
    if (!std::filesystem::exists(shared)) return;
    auto demo = Checkpoint::open(demo_model_dir());
    ASSERT_TRUE(demo.is_ok()) << demo.message();
    for (const char* name : {"demo-q4_0.gguf", "demo-iq4_xs.gguf", "demo-q2_k.gguf", "demo-q6_k.gguf"}) {
        auto f = GgufFile::open(shared + "/" + name);
        if (!f) continue;
        auto config = gguf_model_config(**f);
        ASSERT_TRUE(config.is_ok()) << config.message();
        for (const GgufFile::Tensor& t : (*f)->tensors()) {
            std::string hf;
            if (t.name == "token_embd.weight") hf = "embed_tokens.weight";
            for (const char* part : {"gate", "up", "down"})
                if (t.name.find(std::string(".ffn_") + part + ".weight") != std::string::npos) {
                    const std::string layer = t.name.substr(4, t.name.find(".ffn") - 4);
                    // The MTP layer is the block after the main stack (blk.{n_layer}).
                    hf = (std::stoi(layer) == config->n_layers ? std::string("mtp.layers.0")
                                                               : "layers." + layer) +
                         ".mlp." + part + "_proj.weight";
                }
            if (hf.empty()) continue;
            SCOPED_TRACE(std::string(name) + " " + t.name);
            const TensorView* ref = demo->find(hf);
            ASSERT_NE(ref, nullptr) << hf;
            std::vector<float> got(t.elements());
            dequantize_ggml_row(t.type->type, t.data, t.elements(), got.data());
            EXPECT_LT(relative_error(got, 0, t.elements(), *ref, 0), max_relative_error(t.type->type))
                << t.type->name;
            seen[t.type->name]++;
        }
    }
    for (const char* type : {"Q4_0", "IQ4_XS", "Q2_K", "Q3_K"})
        EXPECT_GT(seen[type], 0) << type << " was not checked against its source weights";
}

// Issue 54, hostile files: each is refused with a message that says what was wrong.
TEST(Gguf, HostileFilesAreRefusedWithAReason) {
    using B = GgufBuilder;
    const std::string ok =
        B().kv_str("general.architecture", "qwen35").tensor("w", {32, 2}, 8, 2 * 34).bytes();
    ASSERT_TRUE(parse(ok).is_ok());
    expect_error("GGUX" + ok.substr(4), "bad magic");
    expect_error(B(1).bytes(), "version 1 is not supported");
    // Every truncation of a valid file (the data ends mid-tensor, mid-header, mid-string).
    for (size_t n = 0; n < ok.size(); ++n) {
        auto f = parse(ok.substr(0, n));
        EXPECT_FALSE(f.is_ok()) << "a file cut at byte " << n << " of " << ok.size() << " was accepted";
    }
    std::string past = B().tensor("w", {32, 1}, 8, 34, 4096).bytes();
    past.resize(past.size() - 1000);  // the tensor's data lies beyond the end
    expect_error(past, "runs past the end of the file");
    expect_error(B().tensor("a", {32, 2}, 8, 68).tensor("b", {32, 1}, 8, 34, 32).bytes(), "overlap");
    expect_error(B().tensor("w", {32, 1, 1, 1, 1}, 0, 128).bytes(), "5 dimensions");
    expect_error(B().tensor("w", {1ull << 40, 1ull << 40}, 0, 4).bytes(), "overflows");
    expect_error(B().tensor("w", {32, 0}, 0, 4).bytes(), "is 0");
    expect_error(B().tensor("w", {32}, 4, 32).bytes(), "unknown ggml type 4");
    expect_error(B().tensor("w", {33}, 8, 34).bytes(), "not whole Q8_0 blocks of 32");
    expect_error(B().tensor("w", {32}, 0, 128, 16).bytes(), "not a multiple of the alignment 32");
    expect_error(B().tensor("w", {32}, 0, 128).tensor("w", {32}, 0, 128).bytes(), "the name appears twice");
    expect_error(B().kv_u32("a", 1).kv_u32("a", 2).bytes(), "'a' appears twice");
    expect_error(B().kv_str("general.alignment", "32").bytes(), "general.alignment must be a uint32");
    expect_error(B().kv_u32("general.alignment", 48).bytes(), "power of two");
    expect_error(B().kv_raw("k", 13, "").bytes(), "unknown value type 13");
    expect_error(
        B().kv_raw("k", GgufValue::ARRAY, B::pod(uint32_t{GgufValue::ARRAY}) + B::pod(uint64_t{1})).bytes(),
        "array of array");
    // Lengths and counts larger than the file: refused before anything is sized by them.
    expect_error(B().kv_raw("k", GgufValue::STRING, B::pod(uint64_t{1} << 62)).bytes(), "truncated");
    expect_error(
        B().kv_raw("k", GgufValue::ARRAY, B::pod(uint32_t{GgufValue::UINT32}) + B::pod(uint64_t{1} << 61))
            .bytes(),
        "runs past the end");
    expect_error(
        B().kv_raw("k", GgufValue::ARRAY, B::pod(uint32_t{GgufValue::STRING}) + B::pod(uint64_t{1} << 61))
            .bytes(),
        "runs past the end");
    std::string counts = ok;
    const uint64_t huge = uint64_t{1} << 60;
    std::memcpy(&counts[8], &huge, 8);
    expect_error(counts, "cannot fit in the file");
    auto none = GgufFile::open("/nonexistent/x.gguf");
    ASSERT_FALSE(none.is_ok());
    EXPECT_NE(none.message().find("cannot open /nonexistent/x.gguf"), std::string::npos);
}

}  // namespace
