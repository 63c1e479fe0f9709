// Op micro-benchmarks with their fraction of the machine's measured limits (same run).
// Run: build/bench/bench_ops   (2 threads by default; GDN_THREADS=N to change)
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "core/thread_pool.h"
#include "ops/dispatch.h"
#include "ops/linear.h"
#include "tools/machine_limits.h"

namespace {

gdn::MachineLimits& limits() {
    static gdn::MachineLimits L = gdn::measure_machine_limits();
    return L;
}

std::vector<uint16_t> random_bf16(size_t n) {
    std::vector<uint16_t> v(n);
    uint32_t s = 1;
    for (auto& x : v) {
        s = s * 1664525u + 1013904223u;
        x = gdn::f32_to_bf16(((s >> 8) & 0xffff) / 65536.0f - 0.5f);
    }
    return v;
}

// y[M, N] = x[M, K] W^T with bf16 weights; 4th arg: 1 = bf16 activations (vdpbf16ps), 0 = f32 (FMA),
// 2 = bf16x2 split activations (the lm_head in bf16 mode).
void BM_Linear(benchmark::State& state) {
    const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
    auto w = random_bf16(N * K);
    gdn::LinearWeight lw = gdn::make_linear({gdn::TensorView::contiguous(w.data(), gdn::DType::BF16, {N, K})});
    std::vector<float> x(M * K, 0.01f), y(M * N);
    const bool bf16_act = state.range(3) != 0;
    for (auto _ : state) {
        if (state.range(3) == 2) gdn::linear_bf16x2(x.data(), M, lw, y.data());
        else gdn::linear(x.data(), M, lw, y.data(), bf16_act);
    }
    state.counters["GB/s"] = benchmark::Counter(2.0 * N * K, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["read_limit_GB/s"] = limits().read_gbps;
    state.counters["bf16_peak_GFLOP/s"] = limits().bf16_gflops;
}
// Qwen3.5-0.8B shapes: MLP gate|up (7168 x 1024), down (1024 x 3584), lm_head (248320 x 1024).
BENCHMARK(BM_Linear)->Args({1, 7168, 1024, 1})->Args({1, 1024, 3584, 1})->Args({1, 248320, 1024, 1})
    ->Args({1, 248320, 1024, 0})->Args({1, 248320, 1024, 2})->Args({2, 248320, 1024, 1})->Args({8, 7168, 1024, 1})->Args({512, 7168, 1024, 1})->Args({512, 1024, 3584, 1})
    ->Args({512, 7168, 1024, 0})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
    const char* t = std::getenv("GDN_THREADS");
    gdn::set_global_threads(t ? std::atoi(t) : 2);
    benchmark::Initialize(&argc, argv);
    std::fprintf(stderr, "machine limits: %s\n", limits().summary().c_str());
    benchmark::RunSpecifiedBenchmarks();
    return 0;
}
