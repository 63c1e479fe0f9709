// The gdn command line, run as a user would: exit codes, output and the --dump-logits file format.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>

#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

struct RunResult {
    int exit_code;
    std::string out;  // stdout and stderr together
};

RunResult run_gdn(const std::string& args) {
    std::string cmd = std::string(GDN_BINARY) + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string join_ids(const Json& ids) {
    std::string s;
    for (const auto& id : ids) {
        if (!s.empty()) s += ',';
        s += std::to_string(id.get<int>());
    }
    return s;
}

TEST(Cli, RunDumpsLogitsAndGeneratesGreedy) {
    const std::string dir = golden_dir("qwen3_5_moe");
    auto j = read_json_file(dir + "/expected/text150.json");
    ASSERT_TRUE(j.is_ok());
    TempDir tmp;
    const std::string dump = tmp.path() + "/logits.f32";
    RunResult r = run_gdn("run --model " + dir + " --prompt-ids " + join_ids((*j)["prompt_ids"]) +
                          " -n 16 --ignore-eos --threads 2 --dump-logits " + dump);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find(join_ids((*j)["greedy_continuation"])), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tok/s"), std::string::npos);
    auto got = read_f32(dump), want = read_f32(dir + "/expected/text150.logits.f32");
    ASSERT_EQ(got.size(), want.size());  // [n_prompt, vocab]
    EXPECT_LE(max_abs_diff(got.data(), want.data(), got.size()), 1e-3f);
}

TEST(Cli, RunStopsAtEos) {
    // The demo model answers "Tell me a fortune." and ends its turn with <|im_end|> (4098).
    RunResult r = run_gdn("run --model " + demo_model_dir() +
                          " --prompt-ids 4097,356,198,736,384,258,755,13,4098,198,4097,363,198 -n 200");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find(",4098\n"), std::string::npos) << r.out;
}

TEST(Cli, RunErrorsAreClear) {
    RunResult r = run_gdn("run --model /nonexistent --prompt-ids 1,2");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("/nonexistent/config.json"), std::string::npos) << r.out;
    r = run_gdn("run --model " + demo_model_dir() + " --prompt-ids 1,x");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.out.find("invalid token id 'x'"), std::string::npos) << r.out;
    r = run_gdn("run --model " + demo_model_dir() + " --prompt-ids 99999");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("token id 99999 is out of range"), std::string::npos) << r.out;
    r = run_gdn("run --model " + demo_model_dir() + " --prompt-ids 1 --dtype f8");
    EXPECT_EQ(r.exit_code, 2);
    r = run_gdn("frobnicate");
    EXPECT_EQ(r.exit_code, 2);
    // serve's scheduling knobs are checked before the model loads.
    for (const char* bad : {"--prefill-step-ms -5", "--prefill-step-ms x", "--admit-prompt-tokens -1",
                            "--arrival-wait-ms 5000", "--arrival-wait-ms -1"}) {
        r = run_gdn("serve --model " + demo_model_dir() + " " + bad);
        EXPECT_EQ(r.exit_code, 2) << bad;
        EXPECT_NE(r.out.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos)
            << r.out;
    }
}

TEST(Cli, RunChatStreamsText) {
    // The demo model's greedy answer (models/demo/README.md "Sample outputs").
    RunResult r = run_gdn("run --model " + demo_model_dir() + " --chat 'Tell me a fortune.' -n 100");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(
        r.out.find("The only thing about the world is that it is the best thing that you can\nhave a good "
                   "thing.\n                -- Mae West\n"),
        std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("<|im_end|>"), std::string::npos);  // special tokens are not printed
    r = run_gdn("run --model " + demo_model_dir() + " -p 'The cat' -n 5 --print-ids --ignore-eos");
    ASSERT_EQ(r.exit_code, 0) << r.out;
}

TEST(Cli, RunWithSpeculativeDecodingGivesTheSameTextAndReportsAcceptance) {
    for (const char* spec : {R"('{"method":"mtp","num_speculative_tokens":2}')",
                             R"('{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_min":1}')"}) {
        RunResult r = run_gdn("run --model " + demo_model_dir() +
                              " --chat 'Tell me a fortune.' -n 100 --speculative-config " + spec);
        ASSERT_EQ(r.exit_code, 0) << r.out;
        EXPECT_NE(r.out.find(
                      "The only thing about the world is that it is the best thing that you can\nhave a good "
                      "thing.\n                -- Mae West\n"),
                  std::string::npos)
            << r.out;
        EXPECT_NE(r.out.find("speculation: "), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("mean acceptance length"), std::string::npos) << r.out;
    }
    RunResult bad =
        run_gdn("run --model " + demo_model_dir() + R"( --chat hi --speculative-config '{"method":"mtp"}')");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE(bad.out.find("num_speculative_tokens"), std::string::npos) << bad.out;
    bad = run_gdn("run --model " + golden_dir("qwen3_5") +
                  R"( --prompt-ids 1,2 --speculative-config '{"method":"mtp","num_speculative_tokens":1}')");
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_NE(bad.out.find("no MTP layer"), std::string::npos) << bad.out;
}

TEST(Cli, TokenizeAndDetokenize) {
    TempDir tmp;
    write_bytes(tmp.path() + "/in.txt", "Hello, my name is");
    RunResult r = run_gdn("tokenize --model " + golden_dir("qwen3_5") + " < " + tmp.path() + "/in.txt");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out, "[630,11,930,718,316]\n");
    write_bytes(tmp.path() + "/chat.json", R"({"messages":[{"role":"user","content":"Hello, my name is"}]})");
    r = run_gdn("tokenize --chat --model " + golden_dir("qwen3_5") + " < " + tmp.path() + "/chat.json");
    EXPECT_EQ(r.out, "[957,515,198,630,11,930,718,316,958,198,957,520,198]\n");  // the golden chat13 prompt
    write_bytes(tmp.path() + "/ids.json", "[957,515,198,630,11,930,718,316,958]");
    r = run_gdn("detokenize --model " + golden_dir("qwen3_5") + " < " + tmp.path() + "/ids.json");
    EXPECT_EQ(r.out, "<|im_start|>user\nHello, my name is<|im_end|>");
    r = run_gdn("detokenize --skip-special --model " + golden_dir("qwen3_5") + " < " + tmp.path() +
                "/ids.json");
    EXPECT_EQ(r.out, "user\nHello, my name is");
    write_bytes(tmp.path() + "/bad.json", "[1, 5000]");
    r = run_gdn("detokenize --model " + golden_dir("qwen3_5") + " < " + tmp.path() + "/bad.json");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("token id 5000 is out of range"), std::string::npos) << r.out;
}

TEST(Cli, MakeModelWritesALoadableCheckpoint) {
    TempDir tmp;
    const std::string out = tmp.path() + "/m";
    RunResult r = run_gdn("make-model --preset qwen3_next-tiny --seed 3 --out " + out + " --tokenizer " +
                          demo_model_dir());
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_TRUE(file_exists(out + "/tokenizer.json"));
    r = run_gdn("run --model " + out + " --prompt-ids 1,2,3 -n 4 --ignore-eos");
    ASSERT_EQ(r.exit_code, 0) << r.out;
}

// gdn quantize writes a folder that runs exactly as --quantization does at load (logits byte for byte),
// with the source's other files, and refuses what would clobber or say nothing.
TEST(Cli, QuantizeWritesACheckpointThatLoadsWithoutQuantizing) {
    TempDir tmp;
    const std::string src = tmp.path() + "/m", out = tmp.path() + "/m-int4";
    RunResult r = run_gdn("make-model --preset qwen3_5_moe-tiny --seed 5 --out " + src + " --tokenizer " +
                          demo_model_dir());
    ASSERT_EQ(r.exit_code, 0) << r.out;
    r = run_gdn("quantize --model " + src + " --out " + out + " --quantization int4 --threads 1");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("(int4, "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("with the MTP layer"), std::string::npos) << r.out;
    EXPECT_TRUE(file_exists(out + "/tokenizer.json"));
    EXPECT_TRUE(file_exists(out + "/config.json"));
    const std::string run = " --prompt-ids 1,2,3 -n 4 --ignore-eos --threads 1 --dump-logits ";
    r = run_gdn("run --model " + src + " --quantization int4" + run + tmp.path() + "/a.f32");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    r = run_gdn("run --model " + out + run + tmp.path() + "/b.f32");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("int4"), std::string::npos) << r.out;  // the weights summary
    EXPECT_EQ(read_bytes(tmp.path() + "/a.f32"), read_bytes(tmp.path() + "/b.f32"));
    r = run_gdn("run --model " + out + " --quantization int8" + run + tmp.path() + "/c.f32");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("was quantized to int4 by gdn quantize"), std::string::npos) << r.out;

    r = run_gdn("quantize --model " + src + " --out " + out + " --quantization int8");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("exists and is not an empty folder"), std::string::npos) << r.out;
    r = run_gdn("quantize --model " + src + " --out " + tmp.path() + "/x --quantization none");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.out.find("--quantization must be int8, int4 or int4-sym"), std::string::npos) << r.out;
    r = run_gdn("quantize --model " + tmp.path() + "/nothing --out " + tmp.path() + "/y --quantization int8");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("is not a folder"), std::string::npos) << r.out;
    EXPECT_FALSE(file_exists(tmp.path() + "/y"));
}

}  // namespace

namespace {
double number_after(const std::string& out, const std::string& key) {
    const size_t at = out.find(key);
    if (at == std::string::npos) return NAN;
    return std::atof(out.c_str() + at + key.size());
}
}  // namespace

// gdn perplexity: a base written in f32, then the same model against it (KLD 0, same top-1 100%), int8
// against it (small, positive KLD), and the errors a user can make.
TEST(Cli, PerplexityAndKlDivergence) {
    TempDir tmp;
    const std::string text = source_dir() + "/tests/data/heldout/debian_fortunes.txt";
    const std::string common =
        "perplexity --model " + demo_model_dir() + " --file " + text + " --ctx 64 --chunks 6";
    const std::string base = tmp.path() + "/base.kld";
    RunResult r = run_gdn(common + " --kl-divergence-base " + base);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("tokens scored: 186 (6 windows of 64)"), std::string::npos) << r.out;
    const double ppl = number_after(r.out, "PPL = ");
    EXPECT_GT(ppl, 1.0);
    EXPECT_LT(ppl, 4160.0);

    r = run_gdn(common + " --kl-divergence " + base);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(number_after(r.out, "Mean KLD = "), 0.0) << r.out;
    EXPECT_EQ(number_after(r.out, "Same top-1 = "), 100.0) << r.out;
    EXPECT_EQ(number_after(r.out, "PPL = "), ppl);

    // --decode: the scored half one token per forward (decode attention over the cache), the same
    // model's rows in f32; in bf16 (a bf16 KV cache by default) a small positive KLD.
    r = run_gdn(common + " --decode --kl-divergence " + base);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("by decode steps"), std::string::npos) << r.out;
    EXPECT_LT(number_after(r.out, "Mean KLD = "), 1e-6) << r.out;
    EXPECT_NEAR(number_after(r.out, "PPL = "), ppl, 1e-3 * ppl) << r.out;
    r = run_gdn(common + " --decode --dtype bf16 --kl-divergence " + base);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("bf16 KV cache"), std::string::npos) << r.out;
    EXPECT_GT(number_after(r.out, "Mean KLD = "), 0.0) << r.out;
    EXPECT_LT(number_after(r.out, "Mean KLD = "), 1e-3) << r.out;

    r = run_gdn(common + " --quantization int8 --kl-divergence " + base);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const double kld = number_after(r.out, "Mean KLD = ");
    EXPECT_GT(kld, 0.0) << r.out;
    EXPECT_LT(kld, 0.01) << r.out;
    EXPECT_NE(r.out.find("int8 (33 matrices"), std::string::npos) << r.out;

    // Another window size, a bogus base, a bad flag value: each an error naming the problem.
    r = run_gdn("perplexity --model " + demo_model_dir() + " --file " + text +
                " --ctx 32 --chunks 6 --kl-divergence " + base);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("written with --ctx 64, this run uses 32"), std::string::npos) << r.out;
    write_bytes(tmp.path() + "/junk.kld", "not a base file");
    r = run_gdn(common + " --kl-divergence " + tmp.path() + "/junk.kld");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("not a gdn perplexity base file"), std::string::npos) << r.out;
    r = run_gdn(common + " --quantization int3");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.out.find("--quantization must be int8, int4, int4-sym or none, got 'int3'"),
              std::string::npos)
        << r.out;
    r = run_gdn(common + " --kl-divergence-base a --kl-divergence b");
    EXPECT_EQ(r.exit_code, 2);
}

// gdn bench --depth D (llama-bench -d): pp and tg after a D-token context, labelled, with the K/V bytes
// counted in tg's roofline; a negative depth is refused.
// With the machine's limits measured, tg is compared with two bandwidths read next to its steps: a
// buffer of the probe's own and the streamed weights' memory (both reported, both positive).
TEST(Cli, BenchComparesDecodeWithTheWeightsOwnMemory) {
    if (kSanitized) GTEST_SKIP() << "the limits' 1 GiB probe and peak loops: Release only";
    RunResult r = run_gdn("bench --model " + demo_model_dir() + " --pp 0 --tg 16 -r 1");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    for (const char* line : {"tg16 against the read bandwidth measured around every 16 steps (",
                             "tg16 against the read bandwidth of the streamed weights' own memory ("}) {
        const size_t at = r.out.find(line);
        ASSERT_NE(at, std::string::npos) << r.out;
        const double gbps = std::atof(r.out.c_str() + at + std::string(line).size());
        EXPECT_GT(gbps, 0.0) << r.out.substr(at);
        const size_t ratio = r.out.find("ratio ", at);
        ASSERT_NE(ratio, std::string::npos);
        EXPECT_GT(std::atof(r.out.c_str() + ratio + 6), 0.0) << r.out.substr(at);
    }
}

TEST(Cli, BenchAtDepth) {
    RunResult r =
        run_gdn("bench --model " + demo_model_dir() + " --pp 16 --tg 4 --depth 40 -r 1 --no-limits");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("pp16 @ d40"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tg4 @ d40"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("of K/V per step"), std::string::npos) << r.out;
    r = run_gdn("bench --model " + demo_model_dir() + " --depth -1 --no-limits");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("--depth must be >= 0"), std::string::npos) << r.out;
}

// gdn profile --batch N: the N sequences decode together, so gen-len steps (not N x gen-len), and the
// step tables and traces are written; impossible values are named.
TEST(Cli, ProfileDecodesABatchTogether) {
    TempDir tmp;
    RunResult r =
        run_gdn("profile --model " + demo_model_dir() +
                " --prompt-len 8 --gen-len 3 --batch 3 --threads 2 --trace " + tmp.path() + "/t.json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("prefill: 1 steps"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("decode: 3 steps"), std::string::npos) << r.out;
    auto trace = read_text_file(tmp.path() + "/t.json");
    ASSERT_TRUE(trace.is_ok()) << trace.message();
    EXPECT_NE(trace->find("traceEvents"), std::string::npos);
    for (const char* bad : {"--batch 0", "--batch 257", "--batch x"}) {
        r = run_gdn("profile --model " + demo_model_dir() + " " + bad);
        EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
        EXPECT_NE(r.out.find("--batch"), std::string::npos) << bad << ": " << r.out;
    }
}

// A GGUF file as --model: tokenize (ids from the file's token and merge arrays and its chat template equal
// the checkpoint's), run, and perplexity within 1% of llama-perplexity's on the same file (111.0590 for
// demo-q4_0.gguf: ../shared/gguf/README.md, `llama-perplexity -c 256` on the same text).
TEST(Cli, GgufFileAsModel) {
    const std::string gguf = source_dir() + "/tests/data/gguf/demo-q4_0.gguf";
    const std::string text = source_dir() + "/tests/data/heldout/debian_fortunes.txt";
    const std::string chat = R"([{"role":"user","content":"Tell me a fortune."}])";
    TempDir tmp;
    write_bytes(tmp.path() + "/chat.json", chat);
    for (const char* mode : {"", " --chat"}) {
        const std::string input = *mode ? tmp.path() + "/chat.json" : text;
        RunResult a = run_gdn("tokenize --model " + gguf + mode + " < " + input);
        RunResult b = run_gdn("tokenize --model " + demo_model_dir() + mode + " < " + input);
        ASSERT_EQ(a.exit_code, 0) << a.out;
        EXPECT_EQ(a.out, b.out) << mode;
    }
    RunResult r = run_gdn("run --model " + gguf + " --chat \"Tell me a fortune.\" -n 8 --temperature 0");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("generated 8 tokens"), std::string::npos) << r.out;
    r = run_gdn("perplexity --model " + gguf + " --file " + text + " --ctx 256");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NEAR(number_after(r.out, "PPL = "), 111.0590, 0.01 * 111.0590) << r.out;
    r = run_gdn("run --model " + gguf + " -p hi --quantization int8");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("is a GGUF file"), std::string::npos) << r.out;
}
