// gdn bench: its options and modes (serving, conversations, concurrency: their own files), and the
// --pp/--tg mode: llama-bench style in-process throughput, with the ratio to the machine's own roofline
// measured in the same run (weights bytes / read bandwidth for decode; FLOPs / bf16 peak for prefill).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>

#include "cache/state_slots.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/profiler.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "model/model.h"
#include "ops/argmax_screen.h"
#include "ops/dispatch.h"
#include "tokenizer/chat_template.h"
#include "tools/args.h"
#include "tools/bench_modes.h"
#include "tools/commands.h"
#include "tools/machine_limits.h"
#include "tools/model_loading.h"
#include "util/json_file.h"

namespace gdn {

namespace {

struct Stats {
    double mean = 0, sd = 0;
};
Stats stats(const std::vector<double>& v) {
    Stats s;
    for (double x : v) s.mean += x;
    s.mean /= v.size();
    for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
    s.sd = v.size() > 1 ? std::sqrt(s.sd / (v.size() - 1)) : 0.0;
    return s;
}

// Bytes of weights one decode token reads, and matmul FLOPs per token (2 per weight element used);
// lm_flops: the lm_head's share (prefill computes logits for the last token only).
// ranges: the memory of every weight counted (MoE: every expert, of which a token reads top-k).
void weight_traffic(const Model& m, double* bytes, double* flops, double* lm_flops,
                    std::vector<std::pair<const void*, size_t>>* ranges) {
    const ModelConfig& c = m.config();
    const ModelWeights& w = m.weights();
    double b = 0, f = 0;
    auto add = [&](const LinearWeight& l, double uses = 1.0) {
        b += uses * l.packed.data.size();
        f += uses * 2.0 * l.N() * l.K();
        ranges->emplace_back(l.packed.data.data(), l.packed.data.size());
    };
    for (const LayerWeights& L : w.layers) {
        if (L.kind == LayerKind::FULL_ATTENTION) {
            add(L.attn.qkv);
            add(L.attn.o);
        } else {
            add(L.gdn.in_proj);
            add(L.gdn.out);
        }
        if (L.is_moe) {
            add(L.moe.router);
            // a token reads top-k of the E experts
            for (const Mlp& e : L.moe.experts) {
                add(e.gate_up, double(c.n_experts_per_tok) / c.n_experts);
                add(e.down, double(c.n_experts_per_tok) / c.n_experts);
            }
            if (c.shared_intermediate > 0) {
                add(L.moe.shared.gate_up);
                add(L.moe.shared.down);
                add(L.moe.shared_gate);
            }
        } else {
            add(L.mlp.gate_up);
            add(L.mlp.down);
        }
    }
    add(w.lm_head_packed);
    *bytes = b;
    *flops = f;
    *lm_flops = 2.0 * w.lm_head_packed.N() * w.lm_head_packed.K();
}

// Every option of gdn bench, all modes (declared once: Args::parse rejects anything else).
const std::set<std::string> kBenchOptions = {"--model",
                                             "--pp",
                                             "--tg",
                                             "-r",
                                             "--threads",
                                             "--json",
                                             "--dtype",
                                             "--kv-cache-dtype",
                                             "--concurrency",
                                             "--base-url",
                                             "--num-prompts",
                                             "--input-len",
                                             "--output-len",
                                             "--range-ratio",
                                             "--max-concurrency",
                                             "--request-rate",
                                             "--num-warmups",
                                             "--plot",
                                             "--api-key",
                                             "--served-model-name",
                                             "--seed",
                                             "--cache-memory",
                                             "--quantization",
                                             "--speculative-config",
                                             "--prompts-file",
                                             "--conversations",
                                             "--turns",
                                             "--turn-tokens",
                                             "--system-tokens",
                                             "--depth"};
const std::set<std::string> kBenchFlags = {"--help",       "--no-limits",     "--limits",
                                           "--profile",    "--no-ignore-eos", "--speculation-ab",
                                           "--multi-turn", "--shared-prefix"};

int usage(Result<Args>& args) {
    std::fprintf(
        stderr,
        "usage: gdn bench --model DIR [--pp 512] [--tg 128] [-r 5] [--threads N] [--dtype bf16|f32]\n"
        "                 [--kv-cache-dtype f32|bf16] [--quantization int8|int4|int4-sym] [--json FILE] "
        "[--no-limits]\n"
        "       gdn bench --limits [--threads N]     (the machine's own limits only)\n"
        "       gdn bench --model DIR --concurrency 1,4,8,16 [--tg 64]   (engine decode throughput per\n"
        "                 concurrency and the host time per step outside the forward)\n"
        "                 [--speculative-config JSON] [--prompts-file FILE]: with drafts (acceptance "
        "per\n"
        "                 position, forward ms per step = the verify cost); FILE: one chat message per "
        "line,\n"
        "                 greedy until end of turn (or --tg tokens), C requests at a time\n"
        "                 [--speculation-ab]: plain and speculative engines on the same prompts, steps\n"
        "                 interleaved A B B A, and the tokens/s ratio\n"
        "  pp: prefill of a random prompt of that many tokens; tg: that many single-token decode steps.\n"
        "  [--depth D]: both after a D-token prompt is already in the cache (llama-bench -d; not "
        "timed);\n"
        "  tg's roofline then counts the K/V bytes each step reads too.\n"
        "serving mode (vllm bench serve style):\n"
        "       gdn bench (--base-url http://127.0.0.1:8000/v1 | --model DIR) [--num-prompts 64]\n"
        "                 [--input-len 256] [--output-len 64] [--range-ratio 0] [--max-concurrency "
        "1,4,8]\n"
        "                 [--request-rate inf|R] [--num-warmups 2] [--json FILE] [--plot FILE.svg]\n"
        "conversations (prefix caching), through the chat API:\n"
        "       gdn bench (--base-url URL | --model DIR) --multi-turn [--conversations 4] [--turns 8]\n"
        "                 [--turn-tokens 300] [--output-len 64] [--system-tokens 0]: TTFT per turn, "
        "prompt\n"
        "                 tokens computed vs sent\n"
        "       gdn bench (--base-url URL | --model DIR) --shared-prefix [--system-tokens 2000]\n"
        "                 [--num-prompts 8] [--input-len 64] [--max-concurrency 1]: the first request's "
        "TTFT\n"
        "                 against the others'\n"
        "  with --model: [--no-enable-prefix-caching] [--prefix-cache-memory MiB] "
        "[--prefix-snapshot-interval N]\n");
    if (!args) std::fprintf(stderr, "gdn bench: %s\n", args.message().c_str());
    return args && args->has("--help") ? 0 : 2;
}

// The options every in-process mode reads, checked; the pool sized; the machine's limits measured (and
// printed) unless --no-limits.
Result<BenchSetup> bench_setup(const Args& a) {
    BenchSetup s;
    s.args = &a;
    GDN_ASSIGN_OR_RETURN(s.pp, a.get_int("--pp", 512));
    GDN_ASSIGN_OR_RETURN(s.tg, a.get_int("--tg", 128));
    GDN_ASSIGN_OR_RETURN(s.reps, a.get_int("-r", 5));
    GDN_ASSIGN_OR_RETURN(long long threads, a.get_int("--threads", default_thread_count()));
    GDN_ASSIGN_OR_RETURN(s.depth, a.get_int("--depth", 0));
    if (s.pp < 0 || s.tg < 0 || s.reps < 1 || threads < 1 || s.depth < 0)
        return Status::error("--pp/--tg/--depth must be >= 0, -r and --threads >= 1");
    if (s.depth > 0 && a.has("--concurrency"))
        return Status::error("--depth applies to --pp/--tg runs, not to --concurrency");
    GDN_RETURN_IF_ERROR(configure_kernels_from_env());
    s.threads = static_cast<int>(threads);
    set_global_threads(s.threads);
    if (!a.has("--no-limits")) {
        s.limits = measure_machine_limits();
        std::printf("machine: %s\n", s.limits.summary().c_str());
    }
    s.forward.bf16_activations = a.get("--dtype", "bf16") == "bf16";
    GDN_ASSIGN_OR_RETURN(s.kv_dtype, kv_cache_dtype(a, s.forward.bf16_activations));
    return s;
}

// What a token costs the model: the weights a decode step streams and the matmul FLOPs.
struct Traffic {
    double bytes = 0, flops = 0, lm_flops = 0;  // weight_traffic()
    double streamed = 0;    // bytes a greedy decode step reads (the lm_head's int8 screen where it runs)
    bool screened = false;  // the screen runs
    std::vector<std::pair<const void*, size_t>> ranges;  // the streamed weights' memory
    double kv_bytes_per_key = 0;                         // K/V bytes a decode step reads per key in the cache
    double state_bytes = 0;                              // GDN state bytes a decode step reads and writes
};

Traffic traffic_of(const BenchSetup& s, const Model& m) {
    Traffic t;
    weight_traffic(m, &t.bytes, &t.flops, &t.lm_flops, &t.ranges);
    // Greedy decode streams the lm_head's int8 screen instead of its bf16 copy where it runs
    // (ops/argmax_screen.h); `streamed` counts the bytes a step reads, `ranges` holds them.
    const LinearWeight& lm = m.weights().lm_head_packed;
    t.screened = s.tg > 0 && s.forward.bf16_activations && lm.screen && argmax_screen_available();
    t.streamed = t.bytes;
    if (t.screened) {
        t.streamed = t.bytes - lm.packed.data.size() + lm.screen->q.size() + lm.screen->meta.size();
        t.ranges.back() = {lm.screen->q.data(), lm.screen->q.size()};
        t.ranges.emplace_back(lm.screen->meta.data(), lm.screen->meta.size());
    }
    const ModelConfig& mc = m.config();
    t.kv_bytes_per_key =
        2.0 * mc.n_attention_layers() * mc.attn_kv_heads * mc.head_dim * dtype_size(s.kv_dtype);
    // A decode step also reads every GDN layer's conv window and recurrent state and writes them back
    // in place (f32; 37.7 MB at the 0.8B shape, ~5% of its int8 weights): bytes streamed like the weights.
    t.state_bytes = 2.0 * StateSlots::bytes_per_slot(mc.n_gdn_layers(), mc.gdn_conv_state_floats(),
                                                     mc.gdn_ssm_state_floats());
    return t;
}

// The repetitions' measurements: prefill and decode t/s, and decode against the read bandwidth measured
// around its steps (a buffer of its own, and the streamed weights' own memory).
struct Samples {
    std::vector<double> pp_tps, tg_tps, tg_gbps, tg_ratio, tg_weights_gbps, tg_weights_ratio;
    double weights_probe_bytes = 0;
};
// The read bandwidth of these VMs moves between windows of seconds (45-80 GB/s) and perhaps between
// stretches of physical memory (docs/perf.md), so besides the start-of-run limit the tg steps are
// compared with two bandwidths measured right next to them, before and after every kTgSegment steps
// (best of 2, not timed as generation): a streaming read of a 512 MiB buffer of its own, and one of the
// very weights a step streams. Each segment's roofline time is kTgSegment x bytes / (mean of its two
// readings).
constexpr long long kTgSegment = 16;

Samples measure(const BenchSetup& s, const Model& m, const Traffic& t) {
    const ForwardOptions& fo = s.forward;
    const int V = m.config().vocab;
    std::mt19937 rng(1);
    std::vector<int32_t> prompt(std::max<long long>(s.pp, 1)), context(s.depth);
    for (auto& x : prompt) x = static_cast<int32_t>(rng() % V);
    for (auto& x : context) x = static_cast<int32_t>(rng() % V);
    std::vector<float> logits;
    logits.reserve(V * 2);
    // One workspace for every forward: each test starts from a fresh state, not from cold buffers.
    const ForwardWorkspacePtr ws = new_forward_workspace(m.context());
    // The --depth context, prefilled (not timed) into a fresh state before each test.
    auto state_at_depth = [&](int64_t extra) {
        SequenceState st = m.new_state(s.kv_dtype);
        st.reserve(s.depth + extra + 1);
        if (s.depth > 0) m.forward(*ws, {{&st, context.data(), s.depth, false}}, fo, &logits);
        return st;
    };
    // Warm-up: one full-size prefill and a few decode steps (page in weights, grow and touch buffers).
    {
        SequenceState st = m.new_state(s.kv_dtype);
        m.forward(*ws, {{&st, prompt.data(), static_cast<int64_t>(prompt.size()), false}}, fo, &logits);
        std::vector<int32_t> next;
        next.reserve(2);
        for (int i = 0; i < 3; ++i) {
            int32_t tok = 1;
            next.clear();
            m.forward(*ws, {{&st, &tok, 1, false}}, fo, &logits, &next);
        }
    }
    std::unique_ptr<ReadBandwidthProbe> probe, weights_probe;
    if (s.limits.read_gbps > 0 && s.tg > 0) {
        probe = std::make_unique<ReadBandwidthProbe>(size_t{512} << 20);
        weights_probe = std::make_unique<ReadBandwidthProbe>(t.ranges);
    }
    Samples out;
    if (weights_probe) out.weights_probe_bytes = static_cast<double>(weights_probe->bytes());
    for (long long r = 0; r < s.reps; ++r) {
        if (s.pp > 0) {
            SequenceState st = state_at_depth(s.pp);
            logits.clear();
            const double t0 = now_seconds();
            m.forward(*ws, {{&st, prompt.data(), s.pp, false}}, fo, &logits);
            out.pp_tps.push_back(s.pp / (now_seconds() - t0));
        }
        if (s.tg == 0) continue;
        // Greedy generation as the engine runs it: the lm_head returns the argmax (linear_argmax), so no
        // [V] logits row is written and scanned on the host between steps.
        SequenceState st = state_at_depth(s.tg);
        std::vector<int32_t> next = {prompt[0]};
        next.reserve(2);
        double gen_s = 0, roof_s = 0, gbps_sum = 0, roof_w_s = 0, gbps_w_sum = 0;
        int n_probe = 0;
        double gbps = probe ? probe->measure_gbps(2) : 0.0;
        double gbps_w = weights_probe ? weights_probe->measure_gbps(2) : 0.0;
        for (long long i0 = 0; i0 < s.tg; i0 += kTgSegment) {
            const long long n = std::min(kTgSegment, s.tg - i0);
            const double t0 = now_seconds();
            for (long long i = 0; i < n; ++i) {
                const int32_t tok = next.back();
                next.clear();
                m.forward(*ws, {{&st, &tok, 1, false}}, fo, &logits, &next);
            }
            gen_s += now_seconds() - t0;
            if (!probe) continue;
            const double after = probe->measure_gbps(2);
            // weights, and the K/V of keys depth + i0 + 1 ... depth + i0 + n (their mean: + (n + 1) / 2)
            const double kv = t.kv_bytes_per_key * (s.depth + i0 + 0.5 * (n + 1));
            roof_s += n * (t.bytes + kv + t.state_bytes) / (0.5 * (gbps + after) * 1e9);
            gbps_sum += 0.5 * (gbps + after);
            const double after_w = weights_probe->measure_gbps(2);
            roof_w_s += n * (t.streamed + kv + t.state_bytes) / (0.5 * (gbps_w + after_w) * 1e9);
            gbps_w_sum += 0.5 * (gbps_w + after_w);
            ++n_probe;
            gbps = after;
            gbps_w = after_w;
        }
        out.tg_tps.push_back(s.tg / gen_s);
        if (probe) {
            out.tg_gbps.push_back(gbps_sum / n_probe);
            out.tg_ratio.push_back(roof_s / gen_s);
            out.tg_weights_gbps.push_back(gbps_w_sum / n_probe);
            out.tg_weights_ratio.push_back(roof_w_s / gen_s);
        }
    }
    return out;
}

// The decode rows' notes beside the table: what the rooflines count, and the adjacent-bandwidth ratios.
void report_decode_notes(const BenchSetup& s, const Traffic& t, const Samples& x, double tg_kv, Json& out) {
    if (s.tg > 0 && t.state_bytes > 0) {
        std::printf(
            "tg%lld reads and writes %.1f MB of GDN state per step (conv windows and recurrent states, f32) "
            "beside the weights: the rooflines count it\n",
            s.tg, t.state_bytes / 1e6);
        out["tg"]["state_bytes_per_token"] = t.state_bytes;
    }
    if (s.depth > 0 && s.tg > 0) {
        std::printf(
            "tg%lld @ d%lld reads %.3f GB of K/V per step on average (%s cache) beside %.3f GB of weights: "
            "the rooflines count both\n",
            s.tg, s.depth, tg_kv / 1e9, dtype_name(s.kv_dtype), t.bytes / 1e9);
        out["tg"]["kv_bytes_per_token"] = tg_kv;
    }
    if (!x.tg_ratio.empty()) {
        const Stats r = stats(x.tg_ratio), g = stats(x.tg_gbps);
        std::printf(
            "tg%lld against the read bandwidth measured around every %lld steps (%.1f ± %.1f GB/s): "
            "ratio %.3f ± %.3f (per repetition:",
            s.tg, kTgSegment, g.mean, g.sd, r.mean, r.sd);
        for (double v : x.tg_ratio) std::printf(" %.3f", v);
        std::printf(")\n");
        out["tg"]["adjacent_read_gbps"] = x.tg_gbps;
        out["tg"]["adjacent_roofline_ratio"] = x.tg_ratio;
        out["tg"]["adjacent_roofline_ratio_mean"] = r.mean;
        const Stats rw = stats(x.tg_weights_ratio), gw = stats(x.tg_weights_gbps);
        std::printf(
            "tg%lld against the read bandwidth of the streamed weights' own memory (%.3f GB), measured the "
            "same way (%.1f ± %.1f GB/s): ratio %.3f ± %.3f (per repetition:",
            s.tg, x.weights_probe_bytes / 1e9, gw.mean, gw.sd, rw.mean, rw.sd);
        for (double v : x.tg_weights_ratio) std::printf(" %.3f", v);
        std::printf(")\n");
        out["tg"]["weights_memory_read_gbps"] = x.tg_weights_gbps;
        out["tg"]["weights_memory_roofline_ratio"] = x.tg_weights_ratio;
        out["tg"]["weights_memory_roofline_ratio_mean"] = rw.mean;
    }
}

// The table (pp and tg rows against their rooflines) and the notes; the JSON record.
Json report(const BenchSetup& s, const Model& m, const Traffic& t, const Samples& x) {
    const std::string name = s.args->get("--model");
    const MachineLimits& lim = s.limits;
    std::printf(
        "| model | threads | dtype | weights | test | t/s | roofline t/s | ratio "
        "|\n|---|---|---|---|---|---|---|---|\n");
    const char* weights_label =
        m.weights().quantization ? quantization_name(*m.weights().quantization) : "as stored";
    const bool bf16 = s.forward.bf16_activations;
    Json out = Json::object();
    out["model"] = name;
    out["weights"] = weights_label;
    out["threads"] = s.threads;
    out["dtype"] = bf16 ? "bf16" : "f32";
    out["weights_bytes_per_token"] = t.bytes;
    out["flops_per_token"] = t.flops;
    if (lim.read_gbps > 0)
        out["machine"] = {{"read_gbps", lim.read_gbps},
                          {"fp32_gflops", lim.fp32_gflops},
                          {"bf16_gflops", lim.bf16_gflops},
                          {"amx_gflops", lim.amx_gflops}};
    auto row = [&](const char* test, long long n, const std::vector<double>& v, double roof,
                   const char* key) {
        if (v.empty()) return;
        Stats st = stats(v);
        const std::string at = s.depth > 0 ? strprintf(" @ d%lld", s.depth) : "";
        std::printf("| %s | %d | %s | %s | %s%lld%s | %.2f ± %.2f | %.1f | %.2f |\n", name.c_str(), s.threads,
                    bf16 ? "bf16" : "f32", weights_label, test, n, at.c_str(), st.mean, st.sd, roof,
                    roof > 0 ? st.mean / roof : 0.0);
        out[key] = {{"n_tokens", n},
                    {"depth", s.depth},
                    {"mean_tps", st.mean},
                    {"sd_tps", st.sd},
                    {"samples", v},
                    {"roofline_tps", roof},
                    {"roofline_ratio", roof > 0 ? st.mean / roof : 0.0}};
    };
    // The matmuls' peak in this mode: AMX tiles where they run the bf16 linears, else vdpbf16ps, else FMA.
    const double peak = !bf16                 ? lim.fp32_gflops
                        : lim.amx_gflops > 0  ? lim.amx_gflops
                        : lim.bf16_gflops > 0 ? lim.bf16_gflops
                                              : lim.fp32_gflops;
    // Prefill: every layer matmul per token, the lm_head once per prompt (attention/GDN FLOPs not counted).
    const double pp_flops = s.pp > 0 ? t.flops - t.lm_flops + t.lm_flops / s.pp : t.flops;
    row("pp", s.pp, x.pp_tps, peak > 0 ? peak * 1e9 / pp_flops : 0.0, "pp");
    const double tg_kv = t.kv_bytes_per_key * (s.depth + 0.5 * (s.tg + 1));  // per step, on average
    row("tg", s.tg, x.tg_tps,
        lim.read_gbps > 0 ? lim.read_gbps * 1e9 / (t.bytes + tg_kv + t.state_bytes) : 0.0, "tg");
    report_decode_notes(s, t, x, tg_kv, out);
    std::printf("weights read per decode token: %.3f GB; matmul FLOPs per prefill token: %.3f G\n",
                t.bytes / 1e9, pp_flops / 1e9);
    // The roofline counts the model's bf16 weights. Greedy decode streams fewer bytes where the
    // lm_head's int8 screen runs (ops/argmax_screen.h): say so, with the ratio against those bytes.
    if (t.screened) {
        const LinearWeight& lm = m.weights().lm_head_packed;
        std::printf(
            "greedy decode streams %.3f GB per token: the lm_head's int8 screen (%.3f GB) instead of its "
            "bf16 copy (%.3f GB), plus the rechecked panels",
            t.streamed / 1e9, (lm.screen->q.size() + lm.screen->meta.size()) / 1e9,
            lm.packed.data.size() / 1e9);
        out["tg"]["streamed_bytes_per_token"] = t.streamed;
        if (!x.tg_ratio.empty()) {
            const double r = stats(x.tg_ratio).mean * t.streamed / t.bytes;
            std::printf("; against those bytes: ratio %.3f", r);
            out["tg"]["adjacent_streamed_ratio_mean"] = r;
        }
        std::printf("\n");
    }
    return out;
}

}  // namespace

int bench_fail(const std::string& what, int code) {
    std::fprintf(stderr, "gdn bench: %s\n", what.c_str());
    return code;
}

int bench_prefill_decode(const BenchSetup& s, const Model& m) {
    const Traffic t = traffic_of(s, m);
    const Samples x = measure(s, m, t);
    const Json out = report(s, m, t, x);
    if (s.args->has("--json")) {
        std::ofstream f(s.args->get("--json"));
        f << out.dump(2) << "\n";
        if (!f) return bench_fail("cannot write " + s.args->get("--json"), 1);
    }
    return 0;
}

int cmd_bench(int argc, char** argv) {
    std::set<std::string> options = kBenchOptions, flags = kBenchFlags;
    options.insert(kPrefixCacheOptions.begin(), kPrefixCacheOptions.end());
    flags.insert(kPrefixCacheFlags.begin(), kPrefixCacheFlags.end());
    auto args = Args::parse(argc, argv, options, flags);
    if (args && (args->has("--base-url") || args->has("--num-prompts") || args->has("--max-concurrency") ||
                 args->has("--request-rate") || args->has("--multi-turn") || args->has("--shared-prefix")))
        return cmd_bench_serve(*args);
    if (!args || args->has("--help") || (!args->has("--model") && !args->has("--limits"))) return usage(args);
    auto setup = bench_setup(*args);
    if (!setup) return bench_fail(setup.message(), 2);
    if (args->has("--limits")) return 0;
    auto model = load_model_for_tool(*args);
    if (!model) return bench_fail(model.message(), 1);
    log_kernel_selection();
    if (args->has("--concurrency"))
        return bench_concurrency(*setup, std::shared_ptr<const Model>(std::move(*model)));
    return bench_prefill_decode(*setup, **model);
}

}  // namespace gdn
