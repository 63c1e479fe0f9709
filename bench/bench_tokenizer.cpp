// Tokenizer encode throughput on English text (Google Benchmark). The report is bytes/s; the target
// (issue: tokenizer) is >= 5 MB/s on one core. Run: build/bench/bench_tokenizer
#include <benchmark/benchmark.h>

#include <dirent.h>

#include <algorithm>

#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace {

// English corpus: the license texts every Debian system ships, plus the golden model README.
const std::string& corpus() {
    static const std::string text = [] {
        std::string s;
        const std::string dir = "/usr/share/common-licenses";
        if (DIR* d = opendir(dir.c_str())) {
            std::vector<std::string> names;
            while (dirent* e = readdir(d))
                if (e->d_name[0] != '.') names.push_back(e->d_name);
            closedir(d);
            std::sort(names.begin(), names.end());
            for (const auto& n : names) {
                std::ifstream f(dir + "/" + n, std::ios::binary);
                std::stringstream ss;
                ss << f.rdbuf();
                s += ss.str();
            }
        }
        std::ifstream f(std::string(GDN_SOURCE_DIR) + "/tests/data/golden/README.md", std::ios::binary);
        std::stringstream ss;
        ss << f.rdbuf();
        return s + ss.str();
    }();
    return text;
}

std::shared_ptr<const gdn::Tokenizer> qwen3() {
    static auto tok = *gdn::Tokenizer::load(std::string(GDN_SOURCE_DIR) + "/tests/data/tokenizer/qwen3");
    return tok;
}

// Steady state: the word cache is warm (the common case for a long-running server).
void BM_EncodeEnglishWarm(benchmark::State& state) {
    auto tok = qwen3();
    const std::string& text = corpus();
    size_t n_tokens = 0;
    for (auto _ : state) {
        auto ids = tok->encode(text);
        n_tokens = ids.size();
        benchmark::DoNotOptimize(ids.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
    state.counters["tokens"] = static_cast<double>(n_tokens);
}
BENCHMARK(BM_EncodeEnglishWarm)->Unit(benchmark::kMillisecond);

// First pass over the text with an empty cache (a fresh tokenizer each iteration; loading not timed).
void BM_EncodeEnglishCold(benchmark::State& state) {
    const std::string& text = corpus();
    for (auto _ : state) {
        state.PauseTiming();
        auto tok = *gdn::Tokenizer::load(std::string(GDN_SOURCE_DIR) + "/tests/data/tokenizer/qwen3");
        state.ResumeTiming();
        auto ids = tok->encode(text);
        benchmark::DoNotOptimize(ids.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_EncodeEnglishCold)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_DecodeStreaming(benchmark::State& state) {
    auto tok = qwen3();
    auto ids = tok->encode(corpus());
    for (auto _ : state) {
        gdn::StreamDecoder sd(tok, true);
        size_t n = 0;
        for (int32_t id : ids) n += sd.add(id)->size();
        benchmark::DoNotOptimize(n);
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
}
BENCHMARK(BM_DecodeStreaming)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
