// Op micro-benchmarks with their fraction of the machine's measured limits (same run).
// Run: build/bench/bench_ops   (2 threads by default; GDN_THREADS=N to change)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "cache/state_slots.h"
#include "core/buffer.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/thread_pool.h"
#include "ops/cpu/kernels.h"
#include "ops/dispatch.h"
#include "ops/layers.h"
#include "ops/linear.h"
#include "ops/linear_quant.h"
#include "ops/quant/kquant.h"
#include "tools/machine_limits.h"

namespace {

// The process's pool (sized from GDN_BENCH_THREADS in main) and profiler.
gdn::ExecContext ctx() {
    return gdn::ExecContext::process();
}

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

// y[M, N] = x[M, K] W^T with bf16 weights; 4th arg: 1 = bf16 activations (vdpbf16ps), 0 = f32 (FMA).
void BM_Linear(benchmark::State& state) {
    const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
    auto w = random_bf16(N * K);
    gdn::LinearWeight lw =
        gdn::make_linear(ctx(), {gdn::TensorView::contiguous(w.data(), gdn::DType::BF16, {N, K})});
    std::vector<float> x(M * K, 0.01f), y(M * N);
    const bool bf16_act = state.range(3) != 0;
    for (auto _ : state) gdn::linear(ctx(), x.data(), M, lw, y.data(), bf16_act);
    state.counters["GB/s"] = benchmark::Counter(2.0 * N * K, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["read_limit_GB/s"] = limits().read_gbps;
    state.counters["bf16_peak_GFLOP/s"] = limits().bf16_gflops;
}
// Qwen3.5-0.8B shapes: MLP gate|up (7168 x 1024), down (1024 x 3584), lm_head (248320 x 1024).
BENCHMARK(BM_Linear)
    ->Args({1, 64, 1024, 1})
    ->Args({1, 7168, 1024, 1})
    ->Args({1, 1024, 3584, 1})
    ->Args({1, 248320, 1024, 1})
    ->Args({1, 248320, 1024, 0})
    ->Args({2, 248320, 1024, 1})
    ->Args({8, 7168, 1024, 1})
    ->Args({512, 7168, 1024, 1})
    ->Args({512, 1024, 3584, 1})
    ->Args({512, 7168, 1024, 0})
    ->Args({4096, 7168, 1024, 1})
    ->Args({4096, 1024, 3584, 1})
    ->Args({512, 1536, 512, 1})
    ->Args({512, 2048, 512, 1})  // the qwen3_next-small preset's in_proj_qkvz, q_proj
    ->Args({64, 512, 512, 1})
    ->Args({1, 32768, 512, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Decode-like: cycles through enough distinct weight matrices that they stream from DRAM (> L3).
void BM_LinearStream(benchmark::State& state) {
    const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
    const int64_t copies = std::max<int64_t>(4, (512ll << 20) / (2 * N * K));
    std::vector<gdn::LinearWeight> ws;
    auto w = random_bf16(N * K);
    for (int64_t c = 0; c < copies; ++c)
        ws.push_back(
            gdn::make_linear(ctx(), {gdn::TensorView::contiguous(w.data(), gdn::DType::BF16, {N, K})}));
    std::vector<float> x(M * K, 0.01f), y(M * N);
    size_t i = 0;
    for (auto _ : state) gdn::linear(ctx(), x.data(), M, ws[i++ % ws.size()], y.data(), true);
    state.counters["GB/s"] = benchmark::Counter(2.0 * N * K, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["read_limit_GB/s"] = limits().read_gbps;
}
BENCHMARK(BM_LinearStream)
    ->Args({1, 8224, 1024})
    ->Args({1, 7168, 1024})
    ->Args({1, 1024, 3584})
    ->Args({1, 1024, 2048})
    ->Args({2, 7168, 1024})
    ->Args({3, 7168, 1024})
    ->Args({4, 7168, 1024})
    ->Args({5, 7168, 1024})
    ->Args({8, 7168, 1024})
    ->Args({8, 8224, 1024})
    ->Args({8, 1024, 3584})
    ->Args({8, 1024, 2048})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// One bf16 weight that stays in cache (the demo model's shapes: gate_up 1536 x 256, down 256 x 768,
// lm_head 4160 x 256) at M = 1..4 rows: what a speculative verify of M tokens costs where the weights
// are not streamed from DRAM (there the rows are not free: the step is compute and call bound).
void BM_LinearResident(benchmark::State& state) {
    const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
    auto w = random_bf16(N * K);
    const gdn::LinearWeight lw =
        gdn::make_linear(ctx(), {gdn::TensorView::contiguous(w.data(), gdn::DType::BF16, {N, K})});
    std::vector<float> x(M * K, 0.01f), y(M * N);
    for (auto _ : state) gdn::linear(ctx(), x.data(), M, lw, y.data(), true);
    state.counters["GB/s"] = benchmark::Counter(2.0 * N * K, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LinearResident)
    ->ArgsProduct({{1, 2, 3, 4, 5, 8, 12}, {1536}, {256}})
    ->ArgsProduct({{1, 2, 3, 4}, {256}, {768}})
    ->ArgsProduct({{1, 3}, {4160}, {256}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The quantized formats (4th arg: 0 = int8, 1 = int4-sym, 2 = int4-k, 3 = int6-k) on the same shapes,
// weights streamed from DRAM as in BM_LinearStream: GB/s counts the bytes actually packed (values and
// scales). A 5th arg of 1 keeps
// one copy, resident in L3 (N = 4096, K = 1024: 4.5 MB int8, 2.4 MB int4): the kernel's compute ceiling.
void BM_LinearQuant(benchmark::State& state) {
    const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
    // Arg 3: the format, in kQuantFormats' order.
    constexpr gdn::WeightFormat kQuantFormats[] = {gdn::WeightFormat::Q8,  gdn::WeightFormat::Q4,
                                                   gdn::WeightFormat::Q4K, gdn::WeightFormat::Q6K,
                                                   gdn::WeightFormat::Q8X, gdn::WeightFormat::Q6K16};
    const gdn::WeightFormat f = kQuantFormats[state.range(3)];
    state.SetLabel(gdn::weight_format_name(f));
    const bool resident = state.range(4) != 0;
    auto w = random_bf16(N * K);
    const gdn::TensorView v = gdn::TensorView::contiguous(w.data(), gdn::DType::BF16, {N, K});
    gdn::LinearWeight first = gdn::make_linear(ctx(), {v}, f);
    const int64_t bytes = first.packed.bytes(),
                  copies = resident ? 1 : std::max<int64_t>(1, (512ll << 20) / bytes);
    std::vector<gdn::LinearWeight> ws;
    ws.push_back(std::move(first));
    for (int64_t c = 1; c < copies; ++c) {  // copies of the packed bytes: quantizing each again is slow
        gdn::LinearWeight lw;
        lw.packed.N = ws[0].packed.N;
        lw.packed.K = ws[0].packed.K;
        lw.packed.K2 = ws[0].packed.K2;
        lw.packed.n_panels = ws[0].packed.n_panels;
        lw.packed.n_blocks = ws[0].packed.n_blocks;
        lw.packed.format = f;
        lw.packed.data.allocate(bytes, false);
        std::memcpy(lw.packed.data.data(), ws[0].packed.data.data(), bytes);
        ws.push_back(std::move(lw));
    }
    std::vector<float> x(M * K, 0.01f), y(M * N);
    size_t i = 0;
    for (auto _ : state) gdn::linear(ctx(), x.data(), M, ws[i++ % ws.size()], y.data(), true);
    state.counters["GB/s"] =
        benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
    state.counters["GOP/s"] =
        benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["read_limit_GB/s"] = limits().read_gbps;
}
BENCHMARK(BM_LinearQuant)
    ->ArgsProduct({{1}, {7168}, {1024}, {0, 1, 2, 3, 4, 5}, {0}})
    ->ArgsProduct({{1}, {1024}, {3584}, {0, 1, 2, 3}, {0}})
    ->ArgsProduct({{1}, {248320}, {1024}, {0, 1, 2, 3}, {0}})
    ->ArgsProduct({{1}, {151936}, {2048}, {0}, {0}})
    ->ArgsProduct({{512}, {7168}, {1024}, {0, 1, 2, 3, 4, 5}, {0}})
    ->ArgsProduct({{512}, {1536, 2048}, {512}, {0}, {0}})
    ->ArgsProduct({{64}, {512}, {512}, {0}, {1}})
    ->ArgsProduct({{1}, {32768}, {512}, {0}, {0, 1}})
    ->ArgsProduct({{1, 2}, {4096}, {1024}, {0, 1, 2, 3}, {1}})
    // Decode batches (c = 2-8) on a gate|up-sized weight and on the vocabulary's lm_head, streamed.
    ->ArgsProduct({{2, 4, 8}, {7168, 248320}, {1024}, {0, 1, 2, 3}, {0}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The activation quantizer alone, one thread, rows of K floats in cache: what each int8 / int4 linear
// pays before its product. Arg 2: 0 the AVX2 row (every x86 CPU), 1 the AVX-512 row (skipped without it).
void BM_QuantizeActivations(benchmark::State& state) {
    const int64_t M = state.range(0), K = state.range(1);
    const gdn::Isa isa = state.range(2) ? gdn::Isa::AVX512 : gdn::Isa::AVX2;
    if (isa == gdn::Isa::AVX512 && gdn::cpu_isa() != gdn::Isa::AVX512) {
        state.SkipWithError("this CPU lacks the ISA");
        return;
    }
    const gdn::QuantizeRowFn quantize = gdn::quant_kernel(isa, gdn::WeightFormat::Q8).quantize;
    state.SetLabel(gdn::isa_name(isa));
    std::vector<float> x(M * K);
    uint32_t s = 3;
    for (auto& v : x) v = ((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    gdn::quant::QuantizedRows xq;
    xq.resize(M, K, nullptr);
    for (auto _ : state)
        for (int64_t m = 0; m < M; ++m) quantize(x.data() + m * K, &xq, m);
    state.counters["floats/s"] =
        benchmark::Counter(static_cast<double>(M * K), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_QuantizeActivations)
    ->ArgsProduct({{512}, {256, 512}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The super-block fits, one thread: weights per second quantized (load-time quantization and `gdn
// quantize` spend most of their time here). Arg: 0 int4-k (engine fit), 1 int4-k (ggml's fit, the
// llama.cpp emulator's), 2 int6-k. Gaussian-like values, as trained weights roughly are.
void BM_QuantizeSuperBlock(benchmark::State& state) {
    constexpr int kBlocks = 256;
    std::vector<float> x(kBlocks * 256);
    uint32_t s = 7;
    for (auto& v : x) {
        float u = 0;
        for (int i = 0; i < 4; ++i) u += ((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
        v = 0.02f * u;
    }
    const int64_t kind = state.range(0);
    for (auto _ : state)
        for (int b = 0; b < kBlocks; ++b) {
            const float* xb = x.data() + 256 * b;
            if (kind == 2)
                benchmark::DoNotOptimize(gdn::kquant::quantize_q6k(xb));
            else
                benchmark::DoNotOptimize(gdn::kquant::quantize_q4k(
                    xb, kind == 0 ? gdn::kquant::Q4KFit::ENGINE : gdn::kquant::Q4KFit::GGML));
        }
    state.counters["weights/s"] =
        benchmark::Counter(static_cast<double>(kBlocks) * 256, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_QuantizeSuperBlock)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// One GDN layer of the Qwen3.5-0.8B shape (Hk = Hv = 16, Dk = Dv = 128, conv kernel 4) with constant
// weights, and T tokens of random input projections [T, ldp] (q | k | v | z | b | a).
struct GdnBenchLayer {
    static constexpr int64_t Hk = 16, Hv = 16, Dk = 128, Dv = 128, K = 4;
    static constexpr int64_t KD = Hk * Dk, VD = Hv * Dv, CD = 2 * KD + VD, ldp = CD + VD + 2 * Hv;
    std::vector<float> proj, conv_w = std::vector<float>(CD * K, 0.1f),
                             conv_wT = std::vector<float>(K * CD, 0.1f), negA = std::vector<float>(Hv, -1.0f),
                             dtb = std::vector<float>(Hv, -2.0f), nw = std::vector<float>(Dv, 1.0f);
    gdn::ops::GdnParams params{
        Hk, Hv, Dk, Dv, K, 1e-6f, conv_w.data(), conv_wT.data(), negA.data(), dtb.data(), nw.data(), false};
    explicit GdnBenchLayer(int64_t T) : proj(T * ldp) {
        uint32_t s = 3;
        for (auto& x : proj) x = ((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    }
    GdnBenchLayer(const GdnBenchLayer&) = delete;  // params points into this object's vectors
};

// One GDN layer's mixer (conv, prep, delta rule, gated norm) on the Qwen3.5-0.8B shape (Hk = Hv = 16,
// Dk = Dv = 128): tokens/s for prefill of T tokens, or one decode step. The FMA bound of the delta rule is
// Dk*Dv*4 FLOP-ish ops per token-head at 2 FMA/cycle per core (kernels.md §3.4), reported as `bound_tps`.
// Arg 1: the prefill form of the delta rule, 0 = recurrent (slab kernel), 1 = chunked (full 64-token chunks).
void BM_GdnMixer(benchmark::State& state) {
    gdn::set_delta_rule_form(state.range(1) ? gdn::DeltaRuleForm::CHUNKED : gdn::DeltaRuleForm::RECURRENT);
    using G = GdnBenchLayer;
    const int64_t T = state.range(0);
    const G layer(T);
    std::vector<float> conv((G::K - 1) * G::CD, 0.0f), ssm(G::Hv * G::Dk * G::Dv, 0.0f), out(T * G::VD);
    gdn::ops::Scratch sc;
    for (auto _ : state)
        gdn::ops::gdn_mixer(ctx(), layer.proj.data(), G::ldp, {{0, T, conv.data(), ssm.data()}}, layer.params,
                            out.data(), sc, false);
    state.counters["tokens/s"] =
        benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
    // 4 vector ops per state element per token (2 FMA pass 1, mul + FMA pass 2) at 2 per cycle per core.
    const double fp32_elems_per_s = limits().fp32_gflops * 1e9 / 2.0;  // FMA lanes per second, all threads
    state.counters["bound_tokens/s"] = fp32_elems_per_s / (4.0 * G::Hv * G::Dk * G::Dv);
    gdn::set_delta_rule_form(gdn::DeltaRuleForm::AUTO);
}
BENCHMARK(BM_GdnMixer)
    ->Args({1, 0})
    ->ArgsProduct({{64, 128, 256, 512, 1024, 4096, 16384}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A GDN decode step whose state comes from DRAM, as in a model (a step reads 18 layers' states, 18 MB,
// between two visits of a layer): cycles through 64 layers' states (64 MB). Reports µs per layer-step
// (only the mixer is timed) and the state bytes read + written per second. Arg: 0 = states on 4 KiB
// pages (std::vector), 1 = on huge pages (Buffer, as the engine and SequenceState keep them), 2 = huge
// pages with a 16.8 MB GEMV (an in_proj) before each step as in a model, 3 = the same on 4 KiB pages.
void BM_GdnDecodeStream(benchmark::State& state) {
    using G = GdnBenchLayer;
    constexpr int64_t L = 64, state_n = G::Hv * G::Dk * G::Dv;
    const G layer(1);
    std::vector<float> conv(L * (G::K - 1) * G::CD, 0.0f), out(G::VD);
    gdn::Buffer ssm_huge(L * state_n * sizeof(float));
    std::vector<std::vector<float>> small(L, std::vector<float>(state_n, 0.0f));
    const bool huge = state.range(0) == 1 || state.range(0) == 2;
    gdn::ops::Scratch sc;
    int64_t l = 0;
    // Arg 2: a 16.8 MB GEMV (the layer's in_proj) runs before each step, untimed, as in a model.
    const bool with_gemv = state.range(0) >= 2;
    std::vector<gdn::LinearWeight> ws;
    std::vector<uint16_t> wsrc;
    if (with_gemv) {
        wsrc = random_bf16(8224 * 1024);
        for (int c = 0; c < 8; ++c)
            ws.push_back(gdn::make_linear(
                ctx(), {gdn::TensorView::contiguous(wsrc.data(), gdn::DType::BF16, {8224, 1024})}));
    }
    std::vector<float> gx(1024, 0.01f), gy(8224);
    int64_t it = 0;
    for (auto _ : state) {
        if (with_gemv) gdn::linear(ctx(), gx.data(), 1, ws[it++ % ws.size()], gy.data(), true);
        const auto t0 = std::chrono::steady_clock::now();
        float* ssm = huge ? ssm_huge.as<float>() + l * state_n : small[l].data();
        gdn::ops::gdn_mixer(ctx(), layer.proj.data(), G::ldp,
                            {{0, 1, conv.data() + l * (G::K - 1) * G::CD, ssm}}, layer.params, out.data(), sc,
                            false);
        state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        l = (l + 23) % L;  // not the next layer: a model does not read the states in address order
    }
    state.counters["state_GB/s"] =
        benchmark::Counter(2.0 * state_n * sizeof(float), benchmark::Counter::kIsIterationInvariantRate);
    state.counters["read_limit_GB/s"] = limits().read_gbps;
}
BENCHMARK(BM_GdnDecodeStream)->Arg(0)->Arg(1)->Arg(2)->Arg(3)->Unit(benchmark::kMicrosecond)->UseManualTime();

// The delta rule alone on one thread, one head of the 0.8B shape (Dk = Dv = 128), 256 tokens: the
// recurrent slab kernel (arg 0) vs the chunked kernel (arg 1, four 64-token chunks). Reported per
// token-head; "GFLOP/s" counts the chunked form's products (2 x 77.8k MAC per token-head).
void BM_GdnRuleKernel(benchmark::State& state) {
    const int64_t T = 256, Dk = 128, Dv = 128, C = gdn::cpu::kGdnChunk;
    std::vector<float> q(T * Dk), k(T * Dk), v(T * Dv), o(T * Dv), S(Dk * Dv, 0.0f);
    uint32_t s = 7;
    for (auto* buf : {&q, &k, &v})
        for (auto& x : *buf) x = (((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f) * 0.2f;
    std::vector<float> g(T, -0.05f), decay(T, std::exp(-0.05f)), beta(T, 0.5f), kq(T, 0.1f);
    std::vector<float> scratch(gdn::cpu::avx512::gdn_chunk_scratch_floats(Dk, Dv));
    const bool chunked = state.range(0) != 0;
    for (auto _ : state) {
        if (chunked)
            for (int64_t c = 0; c < T; c += C)
                gdn::cpu::avx512::gdn_chunk(S.data(), &q[c * Dk], &k[c * Dk], &v[c * Dv], &g[c], &beta[c], Dk,
                                            Dv, &o[c * Dv], scratch.data());
        else
            gdn::cpu::avx512::gdn_slab(S.data(), q.data(), k.data(), Dk, v.data(), Dv, o.data(), Dv,
                                       decay.data(), beta.data(), 1, kq.data(), 1, T, Dk, Dv, 0, Dv);
    }
    state.counters["us/token-head"] = benchmark::Counter(
        T / 1e6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    state.counters["GFLOP/s"] =
        benchmark::Counter(T * 2.0 * 77.8e3, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GdnRuleKernel)->Arg(0)->Arg(1)->UseRealTime();

// MLP gate|up with SwiGLU, Qwen3.5-0.8B shape (I = 3584, H = 1024), bf16 activations. Arg 1: 1 = the fused
// epilogue (linear_swiglu), 0 = the products stored, then the swiglu op.
void BM_LinearSwiglu(benchmark::State& state) {
    const int64_t M = state.range(0), I = 3584, K = 1024;
    auto g = random_bf16(I * K), u = random_bf16(I * K);
    const auto vg = gdn::TensorView::contiguous(g.data(), gdn::DType::BF16, {I, K});
    const auto vu = gdn::TensorView::contiguous(u.data(), gdn::DType::BF16, {I, K});
    const bool fused = state.range(1) != 0;
    gdn::LinearWeight lw = fused ? gdn::make_swiglu_linear(ctx(), vg, vu) : gdn::make_linear(ctx(), {vg, vu});
    std::vector<float> x(M * K, 0.01f), gu(M * 2 * I), act(M * I);
    for (auto _ : state) {
        if (fused) {
            gdn::linear_swiglu(ctx(), x.data(), M, lw, act.data(), true);
        } else {
            gdn::linear(ctx(), x.data(), M, lw, gu.data(), true);
            gdn::ops::swiglu(ctx(), gu.data(), M, I, act.data(), false);
        }
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * M * 2 * I * K, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["bf16_peak_GFLOP/s"] = limits().bf16_gflops;
}
BENCHMARK(BM_LinearSwiglu)
    ->Args({1, 0})
    ->Args({1, 1})
    ->Args({512, 0})
    ->Args({512, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Causal prefill attention of T tokens with no past, Qwen3.5-0.8B shape (Hq = 8, Hkv = 2, D = 256), gated,
// contiguous KV. FLOPs: QK^T and PV over the causal triangle, 2 * 2 * D * Hq * T(T+1)/2. Arg 1: KV
// elements, 0 = f32, 1 = bf16 (--kv-cache-dtype bf16).
// K/V of one layer in both dtypes, in huge-page buffers like the engine's KV arenas.
struct KvArena {
    gdn::Buffer k, v, k16, v16;
    KvArena(int64_t n, uint32_t seed)
        : k(n * 4, false), v(n * 4, false), k16(n * 2, false), v16(n * 2, false) {
        uint32_t s = seed;
        for (gdn::Buffer* b : {&k, &v})
            for (int64_t i = 0; i < n; ++i)
                b->as<float>()[i] =
                    gdn::round_bf16(((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f);
        gdn::convert_from_f32(k.as<float>(), gdn::DType::BF16, k16.data(), n);
        gdn::convert_from_f32(v.as<float>(), gdn::DType::BF16, v16.data(), n);
    }
    gdn::cpu::KvRows rows(int64_t stride, bool bf16) const {
        return bf16 ? gdn::cpu::KvRows{k16.data(), v16.data(), stride, nullptr, 0, true}
                    : gdn::cpu::KvRows{k.data(), v.data(), stride, nullptr, 0, false};
    }
};

void BM_AttentionPrefill(benchmark::State& state) {
    const int64_t T = state.range(0), Hq = 8, Hkv = 2, D = 256, ldq = 2 * Hq * D;
    std::vector<float> q(T * ldq), out(T * Hq * D);
    uint32_t s = 5;
    for (auto& x : q) x = ((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    const KvArena kv(T * Hkv * D, 6);
    gdn::ops::Scratch sc;
    const std::vector<gdn::ops::AttnSeq> seqs = {{0, T, 0, kv.rows(Hkv * D, state.range(1) != 0)}};
    const bool bf16_mode = state.range(2) != 0;  // AMX tiles where the CPU has them, else vdpbf16ps
    for (auto _ : state)
        gdn::ops::attention(ctx(), q.data(), q.data() + Hq * D, ldq, seqs, Hq, Hkv, D, out.data(), sc,
                            bf16_mode);
    state.counters["GFLOP/s"] =
        benchmark::Counter(4.0 * D * Hq * T * (T + 1) / 2.0, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["fp32_peak_GFLOP/s"] = limits().fp32_gflops;
    state.counters["bf16_peak_GFLOP/s"] = limits().bf16_gflops;
}
BENCHMARK(BM_AttentionPrefill)
    ->ArgsProduct({{512, 2048, 8192}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A prefill chunk of T = 512 tokens after n_past keys already cached (a long prompt through the server,
// which prefills it in chunks; `gdn bench --pp 512 --depth D`), 0.8B shape, bf16 mode. Args: n_past, KV
// dtype (0 = f32, 1 = bf16).
void BM_AttentionPrefillAtDepth(benchmark::State& state) {
    const int64_t T = 512, n_past = state.range(0), Hq = 8, Hkv = 2, D = 256, ldq = 2 * Hq * D;
    std::vector<float> q(T * ldq), out(T * Hq * D);
    uint32_t s = 5;
    for (auto& x : q) x = ((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    const KvArena kv((n_past + T) * Hkv * D, 6);
    gdn::ops::Scratch sc;
    const std::vector<gdn::ops::AttnSeq> seqs = {{0, T, n_past, kv.rows(Hkv * D, state.range(1) != 0)}};
    for (auto _ : state)
        gdn::ops::attention(ctx(), q.data(), q.data() + Hq * D, ldq, seqs, Hq, Hkv, D, out.data(), sc, true);
    state.counters["GFLOP/s"] = benchmark::Counter(4.0 * D * Hq * T * (n_past + (T + 1) / 2.0),
                                                   benchmark::Counter::kIsIterationInvariantRate);
    state.counters["bf16_peak_GFLOP/s"] = limits().bf16_gflops;
}
BENCHMARK(BM_AttentionPrefillAtDepth)
    ->ArgsProduct({{3584, 15872}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One decode query (8 heads) over n_past keys of a layer's KV cache, Qwen3.5-0.8B shape, n_layers layers'
// caches cycled so they come from DRAM, as in a decode step; with `block`, rows in blocks of that many
// tokens in a shuffled order (the engine's paged cache; a long-lived one hands out freed blocks).
// Arg 1: 0 = f32 KV, 1 = bf16 KV.
void attention_decode_bench(benchmark::State& state, int n_layers, int64_t block) {
    const int64_t n = state.range(0), Hq = 8, Hkv = 2, D = 256, ldq = 2 * Hq * D;
    const bool bf16 = state.range(1) != 0;
    std::vector<float> q(ldq, 0.01f), out(Hq * D);
    std::vector<KvArena> layers;
    std::vector<std::vector<int32_t>> tables(n_layers);
    for (int l = 0; l < n_layers; ++l) {
        layers.emplace_back(n * Hkv * D, 7 + l);
        if (!block) continue;
        tables[l].resize(n / block);
        std::iota(tables[l].begin(), tables[l].end(), 0);
        std::shuffle(tables[l].begin(), tables[l].end(), std::mt19937(11 + l));
    }
    gdn::ops::Scratch sc;
    size_t i = 0;
    for (auto _ : state) {
        const size_t l = i++ % layers.size();
        gdn::cpu::KvRows rows = layers[l].rows(Hkv * D, bf16);
        if (block) {
            rows.block_table = tables[l].data();
            rows.block_size = block;
        }
        const std::vector<gdn::ops::AttnSeq> seqs = {{0, 1, n - 1, rows}};
        gdn::ops::attention(ctx(), q.data(), q.data() + Hq * D, ldq, seqs, Hq, Hkv, D, out.data(), sc, false);
    }
    state.counters["KV_GB/s"] =
        benchmark::Counter(2.0 * n * Hkv * D * (bf16 ? 2 : 4), benchmark::Counter::kIsIterationInvariantRate);
    state.counters["read_limit_GB/s"] = limits().read_gbps;
}
// Contiguous rows, eight layers.
void BM_AttentionDecode(benchmark::State& state) {
    attention_decode_bench(state, 8, 0);
}
BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{256, 2048, 8192}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
// 16-token blocks, six layers (the 0.8B shape's attention layers; 0.4 GB of f32 K/V at 16k keys).
void BM_AttentionDecodePaged(benchmark::State& state) {
    attention_decode_bench(state, 6, 16);
}
BENCHMARK(BM_AttentionDecodePaged)
    ->ArgsProduct({{16384, 32768}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
    const char* t = std::getenv("GDN_THREADS");
    gdn::set_global_threads(t ? std::atoi(t) : 2);
    benchmark::Initialize(&argc, argv);
    std::fprintf(stderr, "machine limits: %s\n", limits().summary().c_str());
    benchmark::RunSpecifiedBenchmarks();
    return 0;
}

// A prefix-cache snapshot: every GDN layer's state of one slot copied to another (StateSlots::copy), the
// Qwen3.5-0.8B shape (18 GDN layers, conv 3 x 6144, recurrent 16 x 128 x 128: 19.3 MiB).
void BM_StateSnapshotCopy(benchmark::State& state) {
    gdn::StateSlots slots(18, 3 * 6144, 16 * 128 * 128, 4);
    for (int32_t s = 0; s < 4; ++s)
        for (int l = 0; l < 18; ++l) {
            std::memset(slots.conv(l, s), 1, 3 * 6144 * sizeof(float));
            std::memset(slots.ssm(l, s), 1, 16 * 128 * 128 * sizeof(float));
        }
    int32_t from = 0;
    for (auto _ : state) {
        slots.copy(from, (from + 1) % 4);
        from = (from + 1) % 4;
    }
    const double bytes = gdn::StateSlots::bytes_per_slot(18, 3 * 6144, 16 * 128 * 128);
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_StateSnapshotCopy)->Unit(benchmark::kMillisecond)->UseRealTime();
