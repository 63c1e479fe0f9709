// Corrupt checkpoints found by fuzzing the loader: each is an error that says what is wrong (or, for a
// legal but unusual layout, loads exactly), never an abort, a huge allocation or a misaligned read.
#include <gtest/gtest.h>

#include <cstring>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace gdn;
using namespace gdn::test;

namespace {

#define EXPECT_HAS(msg, needle) EXPECT_NE((msg).find(needle), std::string::npos) << (msg)

std::string tiny_tokenizer(const std::string& added_id) {
    return R"({"version":"1.0","added_tokens":[{"id":)" + added_id +
           R"(,"content":"<|x|>","special":true}],"normalizer":null,
        "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},"decoder":{"type":"ByteLevel"},
        "model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}})";
}

TEST(LoaderHostile, TokenizerIdsAreBoundedByTheFile) {
    auto big = Tokenizer::from_json(tiny_tokenizer("1000000000"), "", "tok.json");
    ASSERT_FALSE(big.is_ok());
    EXPECT_HAS(big.message(), "token id 1000000000 is implausible for a file of 4 tokens");
    auto wrapped = Tokenizer::from_json(tiny_tokenizer("4294967299"), "", "tok.json");
    ASSERT_FALSE(wrapped.is_ok());
    EXPECT_HAS(wrapped.message(), "invalid id");
    auto ok = Tokenizer::from_json(tiny_tokenizer("3"), "", "tok.json");
    ASSERT_TRUE(ok.is_ok()) << ok.message();
    EXPECT_EQ((*ok)->vocab_size(), 4);
}

TEST(LoaderHostile, WrongJsonTypesAreErrorsNotExceptions) {
    // Values of the wrong type deep inside the files (nlohmann would throw type_error on a blind get).
    std::string t = tiny_tokenizer("3");
    t.replace(t.find("\"model\":{"), 9, "\"model\":{\"dropout\":\"x\",\"byte_fallback\":7,");
    auto tok = Tokenizer::from_json(t, "", "tok.json");
    ASSERT_FALSE(tok.is_ok());
    EXPECT_HAS(tok.message(), "tok.json");
    auto cfg =
        parse_model_config(R"({"model_type":"qwen3_5","text_config":{"hidden_size":"big"}})", "cfg.json");
    ASSERT_FALSE(cfg.is_ok());
    EXPECT_HAS(cfg.message(), "cfg.json");
    auto deep = parse_model_config(std::string(100000, '[') + std::string(100000, ']'), "cfg.json");
    EXPECT_HAS(deep.message(), "nested deeper than");
}

TEST(LoaderHostile, UnsupportedActivationIsRefusedByName) {
    auto dir = make_preset("qwen3_5-tiny", 1);
    ASSERT_TRUE(edit_config(dir->path(), "\"silu\"", "\"gelu\""));
    auto m = Model::load(ExecContext::process(), dir->path());
    ASSERT_FALSE(m.is_ok());
    EXPECT_HAS(m.message(), "unsupported 'text_config.hidden_act' 'gelu' (implemented: silu)");
}

// A header whose length is not a multiple of 8 puts every tensor at an odd address in the mapping. The
// file is legal; it loads, through aligned copies, to exactly the same model.
TEST(LoaderHostile, MisalignedTensorsLoadThroughAlignedCopies) {
    auto dir = make_preset("qwen3_5-tiny", 1);
    const std::string path = dir->path() + "/model.safetensors";
    const std::string orig = read_bytes(path);
    auto ref = Model::load(ExecContext::process(), dir->path());
    ASSERT_TRUE(ref.is_ok()) << ref.message();
    uint64_t n = 0;
    std::memcpy(&n, orig.data(), 8);
    std::string header = orig.substr(8, n);
    header += " ";  // JSON allows trailing whitespace: the data section now starts 1 byte later
    const uint64_t n2 = header.size();
    std::string moved(8, '\0');
    std::memcpy(moved.data(), &n2, 8);
    moved += header + orig.substr(8 + n);
    TempDir odd;
    for (const char* f : {"config.json", "generation_config.json"})
        write_bytes(odd.path() + "/" + f, read_bytes(dir->path() + "/" + f));
    write_bytes(odd.path() + "/model.safetensors", moved);
    auto file = SafetensorsFile::open(odd.path() + "/model.safetensors");
    ASSERT_TRUE(file.is_ok()) << file.message();
    for (const auto& e : (*file)->entries())
        EXPECT_EQ(reinterpret_cast<uintptr_t>(e.view.data) % dtype_size(e.view.dtype), 0u) << e.name;
    auto m = Model::load(ExecContext::process(), odd.path());
    ASSERT_TRUE(m.is_ok()) << m.message();
    const std::vector<int32_t> prompt = {1, 7, 42, 3};
    std::vector<float> a, b;
    SequenceState sa = (*ref)->new_state(), sb = (*m)->new_state();
    ASSERT_TRUE((*ref)->forward({{&sa, prompt.data(), 4, false}}, ForwardOptions(), &a).is_ok());
    ASSERT_TRUE((*m)->forward({{&sb, prompt.data(), 4, false}}, ForwardOptions(), &b).is_ok());
    EXPECT_EQ(a, b);
    // Quantized at load, the copies are read the same way (and not released like mapped pages).
    LoadOptions lo;
    lo.quantization = WeightFormat::Q8;
    auto qa = Model::load(ExecContext::process(), dir->path(), nullptr, lo),
         qb = Model::load(ExecContext::process(), odd.path(), nullptr, lo);
    ASSERT_TRUE(qa.is_ok() && qb.is_ok());
    SequenceState qsa = (*qa)->new_state(), qsb = (*qb)->new_state();
    a.clear();
    b.clear();
    ASSERT_TRUE((*qa)->forward({{&qsa, prompt.data(), 4, false}}, ForwardOptions(), &a).is_ok());
    ASSERT_TRUE((*qb)->forward({{&qsb, prompt.data(), 4, false}}, ForwardOptions(), &b).is_ok());
    EXPECT_EQ(a, b);
}

// A NaN in a float checkpoint would just propagate on the float path; quantizing it is refused by name.
TEST(LoaderHostile, NonFiniteWeightsAreRefusedWhenQuantizing) {
    auto dir = make_preset("qwen3_5-tiny", 1);
    const std::string path = dir->path() + "/model.safetensors";
    std::string bytes = read_bytes(path);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    auto file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.is_ok());
    bool hit = false;
    for (const auto& e : (*file)->entries())
        if (e.name.find("layers.1.mlp.down_proj.weight") != std::string::npos) {
            ASSERT_EQ(e.view.dtype, DType::BF16);
            const uint16_t nan = 0x7fc0;
            std::memcpy(&bytes[8 + n + e.begin + 2 * 5], &nan, 2);
            hit = true;
        }
    ASSERT_TRUE(hit);
    file = Result<std::unique_ptr<SafetensorsFile>>(Status::error("closed"));
    write_bytes(path, bytes);
    for (WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4, WeightFormat::Q4K}) {
        LoadOptions lo;
        lo.quantization = f;
        auto m = Model::load(ExecContext::process(), dir->path(), nullptr, lo);
        ASSERT_FALSE(m.is_ok());
        EXPECT_HAS(m.message(),
                   "cannot quantize: non-finite weights (NaN or infinity) in layers.1.mlp.down (in 1 "
                   "quantization block)");
    }
    EXPECT_TRUE(
        Model::load(ExecContext::process(), dir->path()).is_ok());  // the float path loads it as it is
}

}  // namespace
