// Structured outputs: the token mask's cost per generated token on the real Qwen3 vocabulary
// (151,643 BPE tokens + added ones; tests/data/tokenizer/qwen3), at the grammar states a JSON answer
// and a forced XML tool call pass through. The issue's goal is <= 1 ms per token at a 248k vocabulary
// (docs/perf.md has the numbers). Run: build/bench/bench_structured
#include <benchmark/benchmark.h>

#include "structured/json_schema.h"
#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <random>
#include <set>

namespace {

using namespace gdn;

const VocabTrie& qwen3_trie() {
    static const auto t = [] {
        auto tok = Tokenizer::load(std::string(GDN_SOURCE_DIR) + "/tests/data/tokenizer/qwen3");
        if (!tok) std::abort();
        return std::make_unique<VocabTrie>(**tok, (*tok)->vocab_size());
    }();
    return *t;
}

// Qwen3.5's vocabulary size (248,320) without its tokenizer: the Qwen3 tokens plus 96,651 made by
// joining two random Qwen3 tokens (a proxy: the real additions are mostly multilingual words).
const VocabTrie& synthetic_248k_trie() {
    static const auto t = [] {
        const VocabTrie& base = qwen3_trie();
        std::vector<std::string> bytes;
        std::vector<int32_t> text;
        for (int32_t id = 0; id < base.vocab(); ++id) {
            bytes.push_back(base.bytes(id));
            if (!base.bytes(id).empty()) text.push_back(id);
        }
        std::set<std::string> seen(bytes.begin(), bytes.end());
        std::mt19937 rng(248);
        while (bytes.size() < 248320) {
            std::string b = base.bytes(text[rng() % text.size()]) + base.bytes(text[rng() % text.size()]);
            if (seen.insert(b).second) bytes.push_back(std::move(b));
        }
        return std::make_unique<VocabTrie>(std::move(bytes));
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
// 4 between array items; XML tool call: 5 inside a string parameter, 6 the call's opening. Arg 1:
// 0 the Qwen3 vocabulary, 1 the synthetic 248k one. Arg 2: 0 the state's first mask (the trie walk),
// 1 a state the constraint masked before (its cache: a string's loop state comes back after every
// token). The time is the whole per-token cost: the walk or the cache lookup, and writing -inf into a
// logits row for the rejected tokens (TokenConstraint::mask).
void BM_TokenMask(benchmark::State& state) {
    static const char* kPrefixes[] = {
        "",
        "{\"name\"",
        "{\"name\": \"The quick brown ",
        "{\"name\": \"x\", \"age\": 12",
        "{\"name\": \"x\", \"age\": 1, \"tags\": [\"a\", ",
        "<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a.py\n</parameter>\n"
        "<parameter=content>\nimport os\nprint(",
        "<tool"};
    const int which = static_cast<int>(state.range(0));
    const VocabTrie& trie = state.range(1) ? synthetic_248k_trie() : qwen3_trie();  // built before the timing
    const auto& g = which >= 5 ? tool_grammar() : schema_grammar();
    const std::string prefix = kPrefixes[which];
    std::shared_ptr<const VocabTrie> shared(std::shared_ptr<const VocabTrie>{}, &trie);
    std::vector<float> logits(trie.vocab());
    size_t allowed = 0;
    const bool cached = state.range(2) != 0;
    auto fresh = [&] {
        auto c = std::make_unique<TokenConstraint>(g, shared, false);
        if (!c->advance_bytes(prefix)) std::abort();
        return c;
    };
    auto c = fresh();
    std::fill(logits.begin(), logits.end(), 0.0f);
    if (cached) c->mask(logits.data(), {});
    for (auto _ : state) {
        state.PauseTiming();
        std::fill(logits.begin(), logits.end(), 0.0f);
        if (!cached) c = fresh();
        state.ResumeTiming();
        c->mask(logits.data(), {});
        benchmark::DoNotOptimize(logits.data());
        state.PauseTiming();
        allowed = static_cast<size_t>(std::count(logits.begin(), logits.end(), 0.0f));
        state.ResumeTiming();
    }
    state.counters["allowed"] = static_cast<double>(allowed);
    state.counters["vocab"] = trie.vocab();
}
BENCHMARK(BM_TokenMask)
    ->ArgsProduct({benchmark::CreateDenseRange(0, 6, 1), {0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

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
