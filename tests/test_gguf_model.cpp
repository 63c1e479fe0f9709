// GGUF models end to end: a bf16 file computes what its checkpoint folder computes, the packed weights hold
// exactly the file's values for every block type, and the quantized files written by llama.cpp agree with
// llama.cpp's own logits (tests/data/gguf/reference: its README in ../shared/gguf says how they were made).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/exec_context.h"
#include "model/gguf_checkpoint.h"
#include "model/gguf_config.h"
#include "model/model.h"
#include "ops/linear.h"
#include "ops/quant/ggml_repack.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

const std::vector<int32_t> kChat13 = {957, 515, 198, 630, 11, 930, 718, 316, 958, 198, 957, 520, 198};
const std::vector<int32_t> kDemoChat = {4097, 356, 198, 736, 384, 258, 755, 13, 4098, 198, 4097, 363, 198};

std::string gguf_data(const std::string& name) {
    return source_dir() + "/tests/data/gguf/" + name;
}

std::unique_ptr<Model> load(const std::string& path) {
    auto m = Model::load(ExecContext::process(), path);
    EXPECT_TRUE(m.is_ok()) << m.message();
    return m.is_ok() ? std::move(*m) : nullptr;
}

// Logits of every prompt position, f32 activations ([n, V]).
std::vector<float> prompt_logits(const Model& m, const std::vector<int32_t>& ids) {
    SequenceState st = m.new_state();
    std::vector<float> logits;
    const Status s =
        m.forward({{&st, ids.data(), static_cast<int64_t>(ids.size()), true}}, ForwardOptions{}, &logits);
    EXPECT_TRUE(s.is_ok()) << s.message();
    return logits;
}

double log_sum_exp(const float* x, int64_t n) {
    double mx = x[0], s = 0;
    for (int64_t i = 1; i < n; ++i) mx = std::max<double>(mx, x[i]);
    for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
    return mx + std::log(s);
}

}  // namespace

// llama.cpp's converter output in bf16 against the checkpoint folder it came from, f32 activations. The
// converter's transforms (1 + w norms, -exp(A_log), squeezed conv, split experts, Qwen3-Next's
// de-interleaved in_proj) are undone exactly: Qwen3-Next is bitwise. Qwen3.5's tiled value heads put
// out_proj's input columns in another order, so its K sum rounds differently: within 1e-5 of the largest
// logit (measured 2.4e-5 of 8.4, 7.4e-6 of 8.8 for the MoE).
TEST(GgufModel, Bf16FileComputesItsCheckpoint) {
    struct Case {
        std::string gguf, family;
    };
    std::vector<Case> cases = {{gguf_data("golden-qwen3_5-bf16.gguf"), "qwen3_5"}};
    const std::string shared = source_dir() + "/../shared/gguf/";
    for (const char* fam : {"qwen3_next", "qwen3_5_moe"})
        if (std::filesystem::exists(shared + "golden-" + fam + "-bf16.gguf"))
            cases.push_back({shared + "golden-" + fam + "-bf16.gguf", fam});
    for (const Case& c : cases) {
        SCOPED_TRACE(c.gguf);
        auto g = load(c.gguf);
        auto h = load(golden_dir(c.family));
        ASSERT_TRUE(g && h);
        EXPECT_EQ(g->config().gdn_v_tiled, c.family != "qwen3_next");
        const std::vector<float> a = prompt_logits(*g, kChat13), b = prompt_logits(*h, kChat13);
        ASSERT_EQ(a.size(), b.size());
        if (c.family == "qwen3_next") {
            EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
            continue;
        }
        double diff = 0, top = 0;
        for (size_t i = 0; i < a.size(); ++i) {
            diff = std::max<double>(diff, std::abs(a[i] - b[i]));
            top = std::max<double>(top, std::abs(b[i]));
        }
        EXPECT_LE(diff, 1e-5 * top) << "max |logit| " << top;
    }
}

// Every quantized tensor of the test files, packed as the loader packs it: Q8_0 / Q4_0 / Q4_K / Q6_K move
// into int8 / int4-sym / int4-k / int6-k16, the other types into int8-x; either way every unpacked row is
// bitwise the row dequantize_ggml_row reads from the file.
TEST(GgufModel, PackedWeightsHoldTheFilesValues) {
    std::map<std::string, int> seen;
    for (const char* name : {"golden-qwen3_5-q4_k_m.gguf", "golden-qwen3_5_moe-mxfp4_moe.gguf",
                             "golden-qwen3_next-q4_k_m.gguf", "demo-q4_0.gguf"}) {
        auto parts = open_gguf_parts(gguf_data(name));
        ASSERT_TRUE(parts.is_ok()) << parts.message();
        auto config = gguf_model_config(*(*parts)[0]);
        ASSERT_TRUE(config.is_ok()) << config.message();
        auto ck = gguf_checkpoint(*parts, *config);
        ASSERT_TRUE(ck.is_ok()) << ck.message();
        for (const auto& [canon, t] : ck->tensors()) {
            if (t.dtype != DType::GGML) continue;
            SCOPED_TRACE(std::string(name) + " " + canon);
            TensorView v = t;  // a 3-D stack of experts: its last matrix
            if (v.rank == 3) {
                v.data = static_cast<char*>(t.data) + (t.shape[0] - 1) * t.stride[0];
                v.rank = 2, v.shape[0] = t.shape[1], v.shape[1] = t.shape[2];
                v.stride[0] = t.stride[1], v.stride[1] = 1;
            }
            const GgmlType type = static_cast<GgmlType>(v.ggml_type);
            const LinearWeight lw = make_linear(ExecContext::process(), {v});
            ASSERT_TRUE(ggml_native_format(type).has_value());
            EXPECT_EQ(lw.packed.format, ggml_rows_movable(v) ? *ggml_native_format(type) : WeightFormat::Q8X);
            std::vector<float> want(v.shape[1]), got(v.shape[1]);
            for (int64_t n = 0; n < v.shape[0]; ++n) {
                dequantize_ggml_row(type, static_cast<const uint8_t*>(v.row(n)), v.shape[1], want.data());
                unpack_row(lw.packed, n, got.data());
                ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << "row " << n;
            }
            seen[ggml_type_info(v.ggml_type)->name]++;
        }
    }
    for (const char* type : {"Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "MXFP4"})
        EXPECT_GT(seen[type], 0) << type << " was not checked";
}

// A Q8_0 block holding -128 (ggml's quantizer never writes one) cannot move into int8 (the AVX2 kernel
// negates weights): the tensor moves into int8-x, with the same values.
TEST(GgufModel, Q8BlocksWithMinus128MoveToInt8x) {
    const int64_t N = 40, K = 64;
    std::vector<uint8_t> bytes(N * (K / 32) * 34);
    for (size_t i = 0; i < bytes.size(); ++i) {
        bytes[i] = static_cast<uint8_t>(i * 37 + 11);
        if (bytes[i] == 0x80) bytes[i] = 0x7f;  // only the one placed below
    }
    for (int64_t b = 0; b < N * K / 32; ++b) {  // finite f16 scales
        bytes[b * 34] = 0x00;
        bytes[b * 34 + 1] = 0x2c;
    }
    TensorView v;
    v.dtype = DType::GGML;
    v.ggml_type = static_cast<uint32_t>(GgmlType::Q8_0);
    v.rank = 2, v.shape[0] = N, v.shape[1] = K, v.stride[0] = (K / 32) * 34, v.stride[1] = 1;
    v.data = bytes.data();
    bytes[5 * 34 + 2 + 7] = 0x80;  // -128 in row 2
    EXPECT_FALSE(ggml_rows_movable(v));
    const LinearWeight lw = make_linear(ExecContext::process(), {v});
    EXPECT_EQ(lw.packed.format, WeightFormat::Q8X);
    std::vector<float> want(K), got(K);
    for (int64_t n = 0; n < N; ++n) {
        dequantize_ggml_row(GgmlType::Q8_0, bytes.data() + n * v.stride[0], K, want.data());
        unpack_row(lw.packed, n, got.data());
        EXPECT_EQ(want, got) << "row " << n;
    }
    bytes[5 * 34 + 2 + 7] = 0x81;
    EXPECT_TRUE(ggml_rows_movable(v));
    EXPECT_EQ(make_linear(ExecContext::process(), {v}).packed.format, WeightFormat::Q8);
}

// The quantized files against llama.cpp's logits on the same prompt (its batch pass, 1 thread). Both sides
// quantize the activations to 8 bits, differently (llama.cpp: q8_0 with an f16 scale per 32, or q8_K with one
// scale per 256 for the k-quants; we: one f32 scale per 32), and these small models amplify that noise: on
// the golden models llama.cpp's own top-1 agrees with the exact products (every weight widened, f32
// activations) at 85-92% of 200 positions, ours at 92-96% (docs/perf.md). So this is a bound on the
// distance, 2x the largest measured, far below what a wrong transform gives (KLD ~4).
TEST(GgufModel, QuantizedFilesAgreeWithLlamaCpp) {
    struct Case {
        const char* gguf;
        const char* reference;
        const std::vector<int32_t>* prompt;
    };
    for (const Case& c :
         {Case{"golden-qwen3_5-q4_k_m.gguf", "golden-qwen3_5-q4_k_m_chat13_all.f32", &kChat13},
          Case{"golden-qwen3_5_moe-mxfp4_moe.gguf", "golden-qwen3_5_moe-mxfp4_moe_chat13_all.f32", &kChat13},
          Case{"golden-qwen3_next-q4_k_m.gguf", "golden-qwen3_next-q4_k_m_chat13_all.f32", &kChat13},
          Case{"golden-qwen3_5-bf16.gguf", "golden-qwen3_5-bf16_chat13_all.f32", &kChat13},
          Case{"demo-q4_0.gguf", "demo-q4_0_chat_all.f32", &kDemoChat}}) {
        SCOPED_TRACE(c.gguf);
        auto m = load(gguf_data(c.gguf));
        ASSERT_TRUE(m);
        const int64_t V = m->config().vocab, n = static_cast<int64_t>(c.prompt->size());
        const std::vector<float> ours = prompt_logits(*m, *c.prompt);
        const std::vector<float> ref = read_f32(gguf_data(std::string("reference/") + c.reference));
        ASSERT_EQ(ref.size(), ours.size());
        int same = 0;
        double max_diff = 0, kld = 0;
        for (int64_t r = 0; r < n; ++r) {
            const float* a = &ours[r * V];
            const float* b = &ref[r * V];
            same += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
            const double la = log_sum_exp(a, V), lb = log_sum_exp(b, V);
            for (int64_t i = 0; i < V; ++i) {
                max_diff = std::max<double>(max_diff, std::abs(a[i] - b[i]));
                kld += std::exp(b[i] - lb) * ((b[i] - lb) - (a[i] - la));
            }
        }
        kld /= n;
        std::printf("%s: top-1 %d/%lld, max |dlogit| %.4f, mean KLD(llama || ours) %.6f\n", c.gguf, same,
                    (long long)n, max_diff, kld);
        EXPECT_LT(kld, 0.06);
        EXPECT_GE(same, n * 3 / 4);
    }
}

// What loading refuses, with the file and the reason named.
TEST(GgufModel, RefusalsNameTheirCause) {
    LoadOptions lo;
    lo.quantization = WeightFormat::Q8;
    auto q = Model::load(ExecContext::process(), gguf_data("demo-q4_0.gguf"), nullptr, lo);
    ASSERT_FALSE(q.is_ok());
    EXPECT_NE(q.message().find("drop --quantization"), std::string::npos) << q.message();
    // A split set with a missing part, and a first part whose name is not a split name.
    const std::string dir = ::testing::TempDir() + "gguf_split/";
    std::filesystem::create_directories(dir);
    std::ifstream in(gguf_data("golden-qwen3_5-q4_k_m.gguf"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // The same file with a split.count = 2 key prepended to its metadata, and a string key that brings the
    // insertion to 64 bytes (so the data section stays aligned).
    uint64_t n_kv;
    std::memcpy(&n_kv, bytes.data() + 16, 8);
    n_kv += 2;
    std::string patched = bytes.substr(0, 16);
    patched.append(reinterpret_cast<const char*>(&n_kv), 8);
    const std::string key = "split.count";
    const uint64_t key_len = key.size();
    const uint32_t type_u16 = 2;
    const uint16_t two = 2;
    patched.append(reinterpret_cast<const char*>(&key_len), 8).append(key);
    patched.append(reinterpret_cast<const char*>(&type_u16), 4)
        .append(reinterpret_cast<const char*>(&two), 2);
    const uint64_t one = 1, pad_len = 18;
    const uint32_t type_string = 8;
    patched.append(reinterpret_cast<const char*>(&one), 8).append("x");
    patched.append(reinterpret_cast<const char*>(&type_string), 4);
    patched.append(reinterpret_cast<const char*>(&pad_len), 8).append(std::string(pad_len, 'p'));
    patched.append(bytes.substr(24));
    for (const char* name : {"m-00001-of-00002.gguf", "plain.gguf"}) {
        std::ofstream(dir + name, std::ios::binary) << patched;
        auto m = Model::load(ExecContext::process(), dir + name);
        ASSERT_FALSE(m.is_ok()) << name;
        EXPECT_NE(
            m.message().find(name[0] == 'm' ? "m-00002-of-00002.gguf: part 2 of 2" : "split.count is 2"),
            std::string::npos)
            << m.message();
    }
    std::filesystem::remove_all(dir);
}
