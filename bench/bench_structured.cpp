// Structured outputs: the token mask's cost per generated token on the real Qwen3 vocabulary
// (151,643 BPE tokens + added ones; tests/data/tokenizer/qwen3), at the grammar states a JSON answer
// and a forced XML tool call pass through. The issue's goal is <= 1 ms per token at a 248k vocabulary
// (docs/perf.md has the numbers). Run: build/bench/bench_structured
#include <benchmark/benchmark.h>

#include "structured/json_schema.h"
#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace gdn;

const VocabTrie& trie() {
    static const auto t = [] {
        auto tok = Tokenizer::load(std::string(GDN_SOURCE_DIR) + "/tests/data/tokenizer/qwen3");
        if (!tok) std::abort();
        return std::make_unique<VocabTrie>(**tok, (*tok)->vocab_size());
    }();
    return *t;
}

const std::shared_ptr<const Grammar>& schema_grammar() {
    static const auto g = *json_schema_grammar(Json::parse(R"({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "age"]})"));
    return g;
}

const std::shared_ptr<const Grammar>& tool_grammar() {
    static const auto g = *tool_call_grammar({{"write_file", Json::parse(R"({"type": "object", "properties": {
        "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]})")}},
                                             ToolCallForm::XML, false);
    return g;
}

// Arg 0: which state. JSON: 0 start, 1 after a key, 2 inside a string value, 3 inside a number,
// 4 between array items; XML tool call: 5 inside a string parameter, 6 the call's opening.
void BM_TokenMask(benchmark::State& state) {
    static const char* kPrefixes[] = {"", "{\"name\"", "{\"name\": \"The quick brown ", "{\"name\": \"x\", \"age\": 12",
                                      "{\"name\": \"x\", \"age\": 1, \"tags\": [\"a\", ",
                                      "<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a.py\n</parameter>\n"
                                      "<parameter=content>\nimport os\nprint(",
                                      "<tool"};
    const int which = static_cast<int>(state.range(0));
    const auto& g = which >= 5 ? tool_grammar() : schema_grammar();
    GrammarState st(g.get());
    if (!st.advance_bytes(kPrefixes[which])) std::abort();
    std::vector<uint64_t> bits;
    (void)trie();  // built before the timing
    for (auto _ : state) {
        allowed_tokens(trie(), st, &bits);
        benchmark::DoNotOptimize(bits.data());
    }
    size_t n = 0;
    for (uint64_t w : bits) n += __builtin_popcountll(w);
    state.counters["allowed"] = static_cast<double>(n);
    state.counters["vocab"] = trie().vocab();
}
BENCHMARK(BM_TokenMask)->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);

void BM_VocabTrieBuild(benchmark::State& state) {
    auto tok = Tokenizer::load(std::string(GDN_SOURCE_DIR) + "/tests/data/tokenizer/qwen3");
    for (auto _ : state) {
        VocabTrie t(**tok, (*tok)->vocab_size());
        benchmark::DoNotOptimize(t.nodes());
    }
}
BENCHMARK(BM_VocabTrieBuild)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace

BENCHMARK_MAIN();
