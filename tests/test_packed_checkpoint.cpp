// Pre-quantized checkpoints (gdn quantize, model/packed_checkpoint.h): a model loaded from one is the
// model quantized at load, byte for byte, in every family and format, MTP layer included; corrupt or
// mismatched files are errors naming what is wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "model/checkpoint.h"
#include "model/model.h"
#include "model/packed_checkpoint.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

#define EXPECT_HAS(msg, needle) EXPECT_NE((msg).find(needle), std::string::npos) << (msg)

std::map<std::string, const PackedWeight*> linears_of(const ModelWeights& w) {
    std::map<std::string, const PackedWeight*> m;
    for_each_linear(w, [&](const std::string& n, const PackedWeight& p) { m[n] = &p; });
    return m;
}

// Quantizes `src` to f (with its MTP layer) and writes the packed folder `out` (config copied).
void write_packed(const std::string& src, WeightFormat f, const std::string& out) {
    LoadOptions lo;
    lo.quantization = f;
    lo.mtp = true;
    auto m = Model::load(ExecContext::process(), src, nullptr, lo);
    ASSERT_TRUE(m.is_ok()) << m.message();
    write_bytes(out + "/config.json", read_bytes(src + "/config.json"));
    const ModelWeights& w = (*m)->weights();
    Status s = write_packed_checkpoint(w, *w.checkpoint, w.float_tensors, out + "/model.safetensors");
    ASSERT_TRUE(s.is_ok()) << s.message();
}

std::vector<float> logits_of(const Model& m, const std::vector<int32_t>& prompt) {
    SequenceState st = m.new_state(DType::F32);
    std::vector<float> logits;
    EXPECT_TRUE(m.forward({{&st, prompt.data(), static_cast<int64_t>(prompt.size()), true}}, ForwardOptions(),
                          &logits)
                    .is_ok());
    return logits;
}

class PackedCheckpoint : public ::testing::TestWithParam<std::tuple<std::string, WeightFormat>> {};

TEST_P(PackedCheckpoint, LoadsAsTheModelQuantizedAtLoad) {
    OneThread one;
    const auto& [preset, f] = GetParam();
    auto src = make_preset(preset, 3);
    TempDir out;
    write_packed(src->path(), f, out.path());
    auto packed_ck = Checkpoint::open(out.path());
    ASSERT_TRUE(packed_ck.is_ok()) << packed_ck.message();
    auto fmt = packed_checkpoint_format(*packed_ck);
    ASSERT_TRUE(fmt.is_ok() && *fmt == f);
    for (bool mtp : {false, true}) {
        LoadOptions lo, lq;
        lo.mtp = lq.mtp = mtp;
        lq.quantization = f;
        auto a = Model::load(ExecContext::process(), src->path(), nullptr, lq);
        auto b = Model::load(ExecContext::process(), out.path(), nullptr,
                             lo);  // no --quantization: the file says it
        ASSERT_TRUE(a.is_ok()) << a.message();
        ASSERT_TRUE(b.is_ok()) << b.message();
        EXPECT_EQ((*b)->weights().quantization, f);
        auto la = linears_of((*a)->weights()), lb = linears_of((*b)->weights());
        ASSERT_EQ(la.size(), lb.size());
        for (const auto& [name, pa] : la) {
            ASSERT_TRUE(lb.count(name)) << name;
            const PackedWeight* pb = lb[name];
            ASSERT_EQ(pa->format, pb->format) << name;
            ASSERT_EQ(pa->N, pb->N) << name;
            ASSERT_EQ(pa->K, pb->K) << name;
            ASSERT_EQ(pa->bytes(), pb->bytes()) << name;
            EXPECT_EQ(std::memcmp(pa->data.data(), pb->data.data(), pa->bytes()), 0) << name;
        }
        EXPECT_EQ((*a)->weights().mtp != nullptr, mtp);
        EXPECT_EQ((*b)->weights().mtp != nullptr, mtp);
        const std::vector<int32_t> prompt = {1, 7, 42, 3, 9, 11};
        EXPECT_EQ(logits_of(**a, prompt), logits_of(**b, prompt));
    }
    // Asking for the other format is refused by name; asking for the same one is fine.
    LoadOptions other;
    other.quantization = f == WeightFormat::Q8 ? WeightFormat::Q4 : WeightFormat::Q8;
    auto bad = Model::load(ExecContext::process(), out.path(), nullptr, other);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_HAS(bad.message(), std::string("was quantized to ") + quantization_name(f) + " by gdn quantize");
    other.quantization = f;
    EXPECT_TRUE(Model::load(ExecContext::process(), out.path(), nullptr, other).is_ok());
}

INSTANTIATE_TEST_SUITE_P(
    Families, PackedCheckpoint,
    ::testing::Combine(::testing::Values("qwen3_5-tiny", "qwen3_5_moe-tiny", "qwen3_next-tiny"),
                       ::testing::Values(WeightFormat::Q8, WeightFormat::Q4K, WeightFormat::Q4)),
    [](const auto& info) {
        std::string n = std::get<0>(info.param) + "_" + quantization_name(std::get<1>(info.param));
        for (char& c : n)
            if (!isalnum(static_cast<unsigned char>(c))) c = '_';
        return n;
    });

// Replaces the first `from` in the file by `to` (same length: the header stays valid JSON of its size).
void patch(const std::string& path, const std::string& from, const std::string& to) {
    ASSERT_EQ(from.size(), to.size());
    std::string b = read_bytes(path);
    const size_t pos = b.find(from);
    ASSERT_NE(pos, std::string::npos) << from;
    b.replace(pos, from.size(), to);
    write_bytes(path, b);
}

TEST(PackedCheckpoint, CorruptFilesAreErrorsNamingTheTensor) {
    OneThread one;
    auto src = make_preset("qwen3_5-tiny", 1);
    TempDir out;
    write_packed(src->path(), WeightFormat::Q8, out.path());
    const std::string path = out.path() + "/model.safetensors", pristine = read_bytes(path);
    auto load_error = [&]() {
        auto m = Model::load(ExecContext::process(), out.path());
        EXPECT_FALSE(m.is_ok());
        return m.is_ok() ? std::string() : m.message();
    };
    // Same-length edits of the header, each an error that names what is wrong.
    const struct {
        const char *from, *to, *error;
    } edits[] = {
        // the shape the metadata states must be the config's ([hidden, intermediate] = [64, 128] here)
        {"\"int8 64 128\"", "\"int8 64 127\"", "holds [64, 127], the config needs [64, 128]"},
        {"\"int8 64 128\"", "\"int9 64 128\"", "is not '<int8|int4-sym|int4-k|int6-k> <N> <K>'"},
        {"\"gdn.packed.version\":\"2\"", "\"gdn.packed.version\":\"7\"",
         "packed-format version '7'; this build reads version 2"},
        {"\"gdn.quantization\":\"int8\"", "\"gdn.quantization\":\"fp8!\"",
         "gdn.quantization is 'fp8!', expected int8, int4 or int4-sym"},
        // a packed weight missing (the tensor renamed; its metadata entry stays)
        {"\"gdn.packed.layers.1.mlp.down\":{", "\"gdn.packed.layers.1.mlp.dowX\":{",
         "packed weight 'gdn.packed.layers.1.mlp.down': missing"},
        // a U8 tensor where a float one belongs
        {"\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[64]",
         "\"model.norm.weight\":{\"dtype\":\"U8\" ,\"shape\":[128]",
         "tensor 'norm.weight' has dtype U8; it must be a float tensor"},
    };
    for (const auto& e : edits) {
        write_bytes(path, pristine);
        patch(path, e.from, e.to);
        EXPECT_HAS(load_error(), e.error);
    }
    // A non-finite scale: the first scale of the blob's first block.
    write_bytes(path, pristine);
    {
        auto file = SafetensorsFile::open(path);
        ASSERT_TRUE(file.is_ok());
        uint64_t n = 0, begin = 0;
        std::memcpy(&n, pristine.data(), 8);
        bool hit = false;
        for (const auto& e : (*file)->entries())
            if (e.name == "gdn.packed.layers.2.linear_attn.out") begin = e.begin, hit = true;
        ASSERT_TRUE(hit);
        std::string b = pristine;
        const uint16_t inf = 0x7c00;
        std::memcpy(&b[8 + n + begin + quant::f16_offset(WeightFormat::Q8)], &inf, 2);
        file = Result<std::unique_ptr<SafetensorsFile>>(Status::error("closed"));
        write_bytes(path, b);
    }
    EXPECT_HAS(load_error(),
               "'gdn.packed.layers.2.linear_attn.out': a non-finite scale (f16 0x7c00) in panel 0, block 0");
    write_bytes(path, pristine);
    EXPECT_TRUE(Model::load(ExecContext::process(), out.path()).is_ok());
}

}  // namespace
