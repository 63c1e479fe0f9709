// The loader rejects every kind of broken input with a message that says what is wrong.
#include <gtest/gtest.h>

#include <cstring>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

// A safetensors file from a header JSON and `data_bytes` zero bytes of data.
std::string safetensors_bytes(const std::string& header, size_t data_bytes) {
    std::string out(8, '\0');
    uint64_t n = header.size();
    std::memcpy(out.data(), &n, 8);
    return out + header + std::string(data_bytes, '\0');
}

std::string open_error(const std::string& bytes) {
    TempDir d;
    write_bytes(d.path() + "/x.safetensors", bytes);
    auto f = SafetensorsFile::open(d.path() + "/x.safetensors");
    EXPECT_FALSE(f.is_ok()) << "accepted a broken file";
    return f.is_ok() ? "" : f.message();
}

#define EXPECT_HAS(msg, needle) EXPECT_NE((msg).find(needle), std::string::npos) << (msg)

const char* kGood =
    R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})";

TEST(Loader, AcceptsAWellFormedFile) {
    TempDir d;
    write_bytes(d.path() + "/x.safetensors", safetensors_bytes(kGood, 32));
    auto f = SafetensorsFile::open(d.path() + "/x.safetensors");
    ASSERT_TRUE(f.is_ok()) << f.message();
    EXPECT_EQ((*f)->entries().size(), 2u);
}

TEST(Loader, RejectsTruncatedFile) {
    std::string msg = open_error(safetensors_bytes(kGood, 20));  // data section 12 bytes short
    EXPECT_HAS(msg, "lies outside the file's 20 data bytes");
    EXPECT_HAS(msg, "truncated");
}

TEST(Loader, RejectsFileShorterThanTheLengthPrefix) {
    EXPECT_HAS(open_error("abc"), "truncated safetensors file");
}

TEST(Loader, RejectsHeaderLengthPastEof) {
    std::string b = safetensors_bytes(kGood, 32);
    uint64_t huge = 1u << 20;
    std::memcpy(b.data(), &huge, 8);
    EXPECT_HAS(open_error(b), "runs past the end of the file");
}

TEST(Loader, RejectsBadJson) {
    EXPECT_HAS(open_error(safetensors_bytes(R"({"a":{"dtype":"F32",)", 8)), "malformed JSON");
}

TEST(Loader, RejectsUnknownDtype) {
    std::string msg =
        open_error(safetensors_bytes(R"({"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", 8));
    EXPECT_HAS(msg, "unknown or unsupported dtype 'Q9'");
    EXPECT_HAS(msg, "tensor 'a'");
}

TEST(Loader, RejectsShapeSizeMismatch) {
    std::string msg =
        open_error(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24));
    EXPECT_HAS(msg, "needs 24 bytes but data_offsets span 20 bytes");
}

TEST(Loader, RejectsOverlappingTensors) {
    std::string msg = open_error(safetensors_bytes(
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
        12));
    EXPECT_HAS(msg, "overlap");
}

TEST(Loader, RejectsMissingTensor) {
    auto dir = make_preset("qwen3_5-tiny", 1);
    // Rewrite the checkpoint without one tensor, with a fresh valid header.
    auto f = SafetensorsFile::open(dir->path() + "/model.safetensors");
    ASSERT_TRUE(f.is_ok());
    Json header = Json::object();
    std::string data;
    for (const auto& e : (*f)->entries()) {
        if (e.name == "model.language_model.layers.1.linear_attn.A_log") continue;
        const char* dt = e.view.dtype == DType::F32 ? "F32" : "BF16";
        std::vector<int64_t> shape(e.view.shape, e.view.shape + e.view.rank);
        header[e.name] = {
            {"dtype", dt}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + e.view.nbytes()}}};
        data.append(static_cast<const char*>(e.view.data), e.view.nbytes());
    }
    f->reset();
    std::string bytes = safetensors_bytes(header.dump(), 0) + data;
    write_bytes(dir->path() + "/model.safetensors", bytes);
    auto m = Model::load(ExecContext::process(), dir->path());
    ASSERT_FALSE(m.is_ok());
    EXPECT_HAS(m.message(), "missing tensor 'layers.1.linear_attn.A_log'");
}

TEST(Loader, RejectsTensorShapeThatDisagreesWithConfig) {
    auto dir = make_preset("qwen3_5-tiny", 1);
    ASSERT_TRUE(edit_config(dir->path(), "\"intermediate_size\": 128", "\"intermediate_size\": 96"));
    auto m = Model::load(ExecContext::process(), dir->path());
    ASSERT_FALSE(m.is_ok());
    EXPECT_HAS(m.message(), "has shape [128, 64], expected [96, 64]");
}

TEST(Loader, RejectsMissingConfigKey) {
    auto c =
        parse_model_config(R"({"model_type":"qwen3_5","text_config":{"num_hidden_layers":4}})", "cfg.json");
    ASSERT_FALSE(c.is_ok());
    EXPECT_HAS(c.message(), "cfg.json: missing required key 'text_config.hidden_size'");
    auto d = parse_model_config(R"({"model_type":"qwen3_5"})", "cfg.json");
    EXPECT_HAS(d.message(), "missing required key 'text_config'");
}

TEST(Loader, RejectsUnknownModelTypeAndBadConfigJson) {
    auto c = parse_model_config(R"({"model_type":"llama"})", "cfg.json");
    EXPECT_HAS(c.message(), "unsupported model_type 'llama'");
    auto d = parse_model_config(R"({"model_type": )", "cfg.json");
    EXPECT_HAS(d.message(), "cfg.json: malformed JSON");
}

TEST(Loader, RejectsInconsistentConfig) {
    auto dir = make_preset("qwen3_5-tiny", 1);
    std::string cfg = read_bytes(dir->path() + "/config.json");
    auto pos = cfg.find("\"linear_num_value_heads\": 4");
    ASSERT_NE(pos, std::string::npos);
    cfg.replace(pos, 27, "\"linear_num_value_heads\": 3");
    auto c = parse_model_config(cfg, "cfg.json");
    ASSERT_FALSE(c.is_ok());
    EXPECT_HAS(c.message(), "must be a multiple of linear_num_key_heads");
    cfg = read_bytes(dir->path() + "/config.json");
    pos = cfg.find("\"linear_conv_kernel_dim\": 4");
    ASSERT_NE(pos, std::string::npos);
    cfg.replace(pos, 27, "\"linear_conv_kernel_dim\": 9");
    auto k = parse_model_config(cfg, "cfg.json");
    ASSERT_FALSE(k.is_ok());
    EXPECT_HAS(k.message(), "linear_conv_kernel_dim (9) must be at most 8");
}

TEST(Loader, RejectsShardMissingFromIndex) {
    auto dir = make_preset("qwen3_5_moe-tiny", 1, 2);
    std::remove((dir->path() + "/model-00002-of-00002.safetensors").c_str());
    auto m = Model::load(ExecContext::process(), dir->path());
    ASSERT_FALSE(m.is_ok());
    EXPECT_HAS(m.message(), "model-00002-of-00002.safetensors");
}

TEST(Loader, MissingFolderSaysSo) {
    auto m = Model::load(ExecContext::process(), "/nonexistent/model");
    ASSERT_FALSE(m.is_ok());
    EXPECT_HAS(m.message(), "/nonexistent/model/config.json");
}

// Config parsing details of model_spec.md §2 on the three golden configs.
TEST(Config, ParsesAllThreeFamilies) {
    auto next = load_model_config(golden_dir("qwen3_next"));
    ASSERT_TRUE(next.is_ok()) << next.message();
    EXPECT_EQ(next->family, ModelFamily::QWEN3_NEXT);
    EXPECT_EQ(next->layer_kinds[3], LayerKind::FULL_ATTENTION);  // from full_attention_interval
    EXPECT_EQ(next->rotary_dim, 16);
    EXPECT_FALSE(next->tie_embeddings);
    auto q35 = load_model_config(golden_dir("qwen3_5"));
    ASSERT_TRUE(q35.is_ok()) << q35.message();
    EXPECT_EQ(q35->family, ModelFamily::QWEN3_5);
    EXPECT_TRUE(q35->tie_embeddings);
    EXPECT_FLOAT_EQ(q35->rope_theta, 1e7f);
    EXPECT_EQ(q35->eos_token_ids, (std::vector<int>{958, 956}));  // generation_config first, then config
    auto moe = load_model_config(golden_dir("qwen3_5_moe"));
    ASSERT_TRUE(moe.is_ok()) << moe.message();
    EXPECT_TRUE(moe->is_moe_layer(0));
    EXPECT_EQ(moe->n_experts_per_tok, 2);
}

TEST(Config, TextOnlyExportWithFlatKeys) {
    auto c = parse_model_config(R"({"model_type":"qwen3_5_moe_text","hidden_size":64,"num_hidden_layers":2,
        "vocab_size":10,"linear_num_key_heads":1,"linear_num_value_heads":2,"linear_key_head_dim":8,
        "linear_value_head_dim":8,"linear_conv_kernel_dim":4,"num_attention_heads":2,"num_key_value_heads":1,
        "head_dim":16,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":8,
        "shared_expert_intermediate_size":8,"full_attention_interval":2,"torch_dtype":"float32",
        "rope_parameters":{"rope_theta":5000,"partial_rotary_factor":0.5}})",
                                "x.json");
    ASSERT_TRUE(c.is_ok()) << c.message();
    EXPECT_EQ(c->family, ModelFamily::QWEN3_5_MOE);
    EXPECT_EQ(c->rotary_dim, 8);
    EXPECT_FLOAT_EQ(c->rope_theta, 5000.0f);
    EXPECT_EQ(c->weight_dtype, DType::F32);
    EXPECT_EQ(c->layer_kinds[1], LayerKind::FULL_ATTENTION);
}

}  // namespace
