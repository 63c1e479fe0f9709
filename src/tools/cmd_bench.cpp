// gdn bench --pp/--tg: llama-bench style in-process throughput, with the ratio to the machine's own
// roofline measured in the same run (weights bytes / read bandwidth for decode; FLOPs / bf16 peak for
// prefill).
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

}  // namespace

int cmd_bench(int argc, char** argv) {
    std::set<std::string> options = {"--model",
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
    std::set<std::string> flags = {"--help",          "--no-limits",      "--limits",     "--profile",
                                   "--no-ignore-eos", "--speculation-ab", "--multi-turn", "--shared-prefix"};
    options.insert(kPrefixCacheOptions.begin(), kPrefixCacheOptions.end());
    flags.insert(kPrefixCacheFlags.begin(), kPrefixCacheFlags.end());
    auto args = Args::parse(argc, argv, options, flags);
    if (args && (args->has("--base-url") || args->has("--num-prompts") || args->has("--max-concurrency") ||
                 args->has("--request-rate") || args->has("--multi-turn") || args->has("--shared-prefix")))
        return cmd_bench_serve(*args);
    if (!args || args->has("--help") || (!args->has("--model") && !args->has("--limits"))) {
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
    auto pp = args->get_int("--pp", 512), tg = args->get_int("--tg", 128), reps = args->get_int("-r", 5),
         threads = args->get_int("--threads", default_thread_count()), depth = args->get_int("--depth", 0);
    for (auto* r : {&pp, &tg, &reps, &threads, &depth})
        if (!*r) {
            std::fprintf(stderr, "gdn bench: %s\n", r->message().c_str());
            return 2;
        }
    if (*pp < 0 || *tg < 0 || *reps < 1 || *threads < 1 || *depth < 0) {
        std::fprintf(stderr, "gdn bench: --pp/--tg/--depth must be >= 0, -r and --threads >= 1\n");
        return 2;
    }
    if (*depth > 0 && args->has("--concurrency")) {
        std::fprintf(stderr, "gdn bench: --depth applies to --pp/--tg runs, not to --concurrency\n");
        return 2;
    }
    if (Status ks = configure_kernels_from_env(); !ks) {
        std::fprintf(stderr, "gdn bench: %s\n", ks.message().c_str());
        return 2;
    }
    set_global_threads(static_cast<int>(*threads));
    MachineLimits lim;
    if (!args->has("--no-limits")) {
        lim = measure_machine_limits();
        std::printf("machine: %s\n", lim.summary().c_str());
        if (args->has("--limits")) return 0;
    }
    ForwardOptions fo;
    fo.bf16_activations = args->get("--dtype", "bf16") == "bf16";
    auto kv = kv_cache_dtype(*args, fo.bf16_activations);
    if (!kv) {
        std::fprintf(stderr, "gdn bench: %s\n", kv.message().c_str());
        return 2;
    }
    const DType kv_dtype = *kv;
    auto model = load_model_for_tool(*args);
    if (!model) {
        std::fprintf(stderr, "gdn bench: %s\n", model.message().c_str());
        return 1;
    }
    const Model& m = **model;
    log_kernel_selection();
    double bytes = 0, flops = 0, lm_flops = 0;
    std::vector<std::pair<const void*, size_t>> weight_ranges;
    weight_traffic(m, &bytes, &flops, &lm_flops, &weight_ranges);
    // Greedy decode streams the lm_head's int8 screen instead of its bf16 copy where it runs
    // (ops/argmax_screen.h); `streamed` counts the bytes a step reads, weight_ranges holds them.
    const LinearWeight& lm = m.weights().lm_head_packed;
    const bool screened = *tg > 0 && fo.bf16_activations && lm.screen && argmax_screen_available();
    double streamed = bytes;
    if (screened) {
        streamed = bytes - lm.packed.data.size() + lm.screen->q.size() + lm.screen->meta.size();
        weight_ranges.back() = {lm.screen->q.data(), lm.screen->q.size()};
        weight_ranges.emplace_back(lm.screen->meta.data(), lm.screen->meta.size());
    }
    const int V = m.config().vocab;
    std::mt19937 rng(1);
    std::vector<int32_t> prompt(std::max<long long>(*pp, 1)), context(*depth);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % V);
    for (auto& t : context) t = static_cast<int32_t>(rng() % V);
    // K/V bytes a decode step reads at n keys (every attention layer, K and V).
    const ModelConfig& mc = m.config();
    const double kv_bytes_per_key =
        2.0 * mc.n_attention_layers() * mc.attn_kv_heads * mc.head_dim * dtype_size(kv_dtype);
    // A decode step also reads every GDN layer's conv window and recurrent state and writes them back
    // in place (f32; 37.7 MB at the 0.8B shape, ~5% of its int8 weights): bytes streamed like the weights.
    const double state_bytes = 2.0 * StateSlots::bytes_per_slot(mc.n_gdn_layers(), mc.gdn_conv_state_floats(),
                                                                mc.gdn_ssm_state_floats());
    std::vector<float> logits;
    logits.reserve(V * 2);
    // The --depth context, prefilled (not timed) into a fresh state before each test.
    auto state_at_depth = [&](int64_t extra) {
        SequenceState st = m.new_state(kv_dtype);
        st.reserve(*depth + extra + 1);
        if (*depth > 0) m.forward({{&st, context.data(), *depth, false}}, fo, &logits);
        return st;
    };
    // Warm-up: one full-size prefill and a few decode steps (page in weights, grow and touch buffers).
    {
        SequenceState st = m.new_state(kv_dtype);
        m.forward({{&st, prompt.data(), static_cast<int64_t>(prompt.size()), false}}, fo, &logits);
        std::vector<int32_t> next;
        next.reserve(2);
        for (int i = 0; i < 3; ++i) {
            int32_t t = 1;
            next.clear();
            m.forward({{&st, &t, 1, false}}, fo, &logits, &next);
        }
    }
    // The read bandwidth of these VMs moves between windows of seconds (45-80 GB/s) and perhaps between
    // stretches of physical memory (26-30 against 48-54 GB/s on the Zen 4 VM), so besides the
    // start-of-run limit the tg steps are compared with two bandwidths measured right next to them,
    // before and after every kTgSegment steps (best of 2, not timed as generation): a streaming read of
    // a 512 MiB buffer of its own, and one of the very weights a step streams (their memory's own
    // speed). Each segment's roofline time is kTgSegment x bytes / (mean of its two readings).
    constexpr long long kTgSegment = 16;
    std::unique_ptr<ReadBandwidthProbe> probe, weights_probe;
    if (lim.read_gbps > 0 && *tg > 0) {
        probe = std::make_unique<ReadBandwidthProbe>(size_t{512} << 20);
        weights_probe = std::make_unique<ReadBandwidthProbe>(weight_ranges);
    }
    std::vector<double> pp_tps, tg_tps, tg_gbps, tg_ratio, tg_weights_gbps, tg_weights_ratio;
    for (long long r = 0; r < *reps; ++r) {
        if (*pp > 0) {
            SequenceState st = state_at_depth(*pp);
            logits.clear();
            const double t0 = now_seconds();
            m.forward({{&st, prompt.data(), *pp, false}}, fo, &logits);
            pp_tps.push_back(*pp / (now_seconds() - t0));
        }
        if (*tg > 0) {
            // Greedy generation as the engine runs it: the lm_head returns the argmax (linear_argmax), so
            // no [V] logits row is written and scanned on the host between steps.
            SequenceState st = state_at_depth(*tg);
            std::vector<int32_t> next = {prompt[0]};
            next.reserve(2);
            double gen_s = 0, roof_s = 0, gbps_sum = 0, roof_w_s = 0, gbps_w_sum = 0;
            int n_probe = 0;
            double gbps = probe ? probe->measure_gbps(2) : 0.0;
            double gbps_w = weights_probe ? weights_probe->measure_gbps(2) : 0.0;
            for (long long i0 = 0; i0 < *tg; i0 += kTgSegment) {
                const long long n = std::min(kTgSegment, *tg - i0);
                const double t0 = now_seconds();
                for (long long i = 0; i < n; ++i) {
                    const int32_t t = next.back();
                    next.clear();
                    m.forward({{&st, &t, 1, false}}, fo, &logits, &next);
                }
                gen_s += now_seconds() - t0;
                if (probe) {
                    const double after = probe->measure_gbps(2);
                    // weights, and the K/V of keys depth + i0 + 1 ... depth + i0 + n (their mean: + (n + 1) /
                    // 2)
                    const double kv = kv_bytes_per_key * (*depth + i0 + 0.5 * (n + 1));
                    roof_s += n * (bytes + kv + state_bytes) / (0.5 * (gbps + after) * 1e9);
                    gbps_sum += 0.5 * (gbps + after);
                    const double after_w = weights_probe->measure_gbps(2);
                    roof_w_s += n * (streamed + kv + state_bytes) / (0.5 * (gbps_w + after_w) * 1e9);
                    gbps_w_sum += 0.5 * (gbps_w + after_w);
                    ++n_probe;
                    gbps = after;
                    gbps_w = after_w;
                }
            }
            tg_tps.push_back(*tg / gen_s);
            if (probe) {
                tg_gbps.push_back(gbps_sum / n_probe);
                tg_ratio.push_back(roof_s / gen_s);
                tg_weights_gbps.push_back(gbps_w_sum / n_probe);
                tg_weights_ratio.push_back(roof_w_s / gen_s);
            }
        }
    }
    const std::string name = args->get("--model");
    Json out = Json::object();
    if (args->has("--concurrency")) {
        // Engine decode throughput: C requests decoding together, steps timed once every prompt is in.
        auto levels = parse_id_list(args->get("--concurrency"));
        if (!levels) {
            std::fprintf(stderr, "gdn bench: --concurrency: %s\n", levels.message().c_str());
            return 2;
        }
        std::shared_ptr<const Model> shared(std::move(*model));
        auto spec = speculative_config(*args);
        if (!spec) {
            std::fprintf(stderr, "gdn bench: %s\n", spec.message().c_str());
            return 2;
        }
        // Chat prompts from a file (rendered with the checkpoint's template), else random 32-token prompts.
        std::vector<std::vector<int32_t>> chat_prompts;
        std::shared_ptr<const Tokenizer> tok;
        if (args->has("--prompts-file")) {
            auto t = Tokenizer::load(name);
            auto text = read_text_file(args->get("--prompts-file"));
            if (!t || !text) {
                std::fprintf(stderr, "gdn bench: %s%s\n", t.message().c_str(), text.message().c_str());
                return 1;
            }
            tok = *t;
            auto ct = ChatTemplate::create(*tok);
            if (!ct) {
                std::fprintf(stderr, "gdn bench: %s\n", ct.message().c_str());
                return 1;
            }
            size_t b = 0;
            for (size_t e; b < text->size(); b = e + 1) {
                e = text->find('\n', b);
                if (e == std::string::npos) e = text->size();
                if (e == b) continue;
                ChatRequest req;
                req.messages = Json::array({{{"role", "user"}, {"content", text->substr(b, e - b)}}});
                auto r = (*ct)->render(req);
                if (!r) {
                    std::fprintf(stderr, "gdn bench: %s\n", r.message().c_str());
                    return 1;
                }
                chat_prompts.push_back(tok->encode(*r));
            }
            if (chat_prompts.empty()) {
                std::fprintf(stderr, "gdn bench: %s holds no prompts\n", args->get("--prompts-file").c_str());
                return 2;
            }
        }
        std::printf("speculation: %s\n", spec->describe().c_str());
        std::printf(
            "| concurrency | decode t/s | per-sequence t/s | step ms | forward ms | host ms outside forward "
            "| "
            "host share | mean acceptance length | acceptance per position |\n"
            "|---|---|---|---|---|---|---|---|---|\n");
        Json rows = Json::array();
        double single = 0;
        // One engine at one concurrency: its requests, and what its timed steps produced.
        struct Run {
            std::unique_ptr<Engine> engine;
            size_t next_prompt = 0;
            int64_t tokens = 0, steps = 0;
            double total = 0, host = 0, fwd = 0;
            EngineStats before;
        };
        const bool ab = args->has("--speculation-ab");
        if (ab && !spec->enabled()) {
            std::fprintf(stderr,
                         "gdn bench: --speculation-ab compares against --speculative-config: give one\n");
            return 2;
        }
        for (int C : *levels) {
            if (C < 1) continue;
            SamplingParams sp;
            sp.temperature = 0;
            sp.ignore_eos = chat_prompts.empty();
            sp.max_tokens = static_cast<int>(*tg) * (1 + spec->num_speculative_tokens) + 4;
            if (!chat_prompts.empty()) sp.max_tokens = static_cast<int>(*tg);
            auto make_run = [&](const SpeculativeConfig& sc, Run* r) -> Status {
                EngineConfig ec;
                ec.bf16 = fo.bf16_activations;
                ec.kv_dtype = kv_dtype;
                ec.max_num_seqs = C;
                ec.max_num_batched_tokens =
                    std::max(512, C * (1 + sc.num_speculative_tokens) + kPrefillChunkAlign);
                int64_t longest = 32;
                for (const auto& p : chat_prompts) longest = std::max<int64_t>(longest, p.size());
                ec.max_model_len = static_cast<int>(longest + sp.max_tokens + 2 + sc.num_speculative_tokens);
                ec.speculative = sc;
                ec.prefault_memory = true;  // as gdn serve: no page faults inside the timed steps
                ec.cache_memory = Engine::cache_bytes_for(shared->config(), C, ec.max_model_len, kv_dtype,
                                                          ec.block_size, sc);
                GDN_RETURN_IF_ERROR(apply_prefix_cache_options(*args, &ec));
                GDN_ASSIGN_OR_RETURN(r->engine, Engine::create(shared, tok, ec));
                return Status::ok();
            };
            // Random prompts: C requests, prefilled first, then --tg steps timed. Chat prompts: all of them,
            // C at a time, timed from the first decode to the end (prefills of later prompts included).
            auto add = [&](Run& r) {
                if (chat_prompts.empty()) {
                    std::vector<int32_t> p(32);
                    for (auto& t : p) t = static_cast<int32_t>(rng() % V);
                    r.engine->add_request(Prompt::from_ids(p), sp);
                } else if (r.next_prompt < chat_prompts.size()) {
                    r.engine->add_request(Prompt::from_ids(chat_prompts[r.next_prompt++]), sp);
                }
            };
            auto start = [&](Run& r) {
                const uint32_t seed =
                    static_cast<uint32_t>(C);  // both runs of an A/B pair get the same prompts
                rng.seed(seed);
                for (int i = 0; i < C; ++i) add(r);
                for (int i = 0; i < 3; ++i) r.engine->step();  // prefills (32 tokens each) + first decodes
                r.before = r.engine->stats();
            };
            auto timed_step = [&](Run& r) {
                const double t0 = now_seconds();
                auto outs = r.engine->step();
                r.total += now_seconds() - t0;
                r.host += r.engine->last_step_host_seconds();
                r.fwd += r.engine->last_step_forward_seconds();
                ++r.steps;
                for (const RequestOutput& o : outs) {
                    r.tokens += static_cast<int64_t>(o.new_tokens.size());
                    if (o.finish != FinishReason::NONE) add(r);
                }
            };
            auto more = [&](const Run& r) {
                return (chat_prompts.empty() ? r.steps < *tg : true) && r.engine->has_unfinished();
            };
            auto report = [&](Run& r, const char* label) {
                const EngineStats after = r.engine->stats();
                SpecCounters d = after.spec;  // this run's counters (the warm-up steps excluded)
                d.verify_steps -= r.before.spec.verify_steps;
                d.drafted -= r.before.spec.drafted;
                d.accepted -= r.before.spec.accepted;
                std::string per;
                for (size_t i = 0; i < d.drafted_at.size(); ++i) {
                    const auto& b = r.before.spec;
                    const int64_t dr = d.drafted_at[i] - (i < b.drafted_at.size() ? b.drafted_at[i] : 0);
                    const int64_t ac = d.accepted_at[i] - (i < b.accepted_at.size() ? b.accepted_at[i] : 0);
                    per += strprintf("%s%.2f", per.empty() ? "" : " ", dr ? double(ac) / dr : 0.0);
                }
                const double tps = r.tokens / r.total;
                std::printf("| %d%s | %.1f | %.1f | %.2f | %.2f | %.3f | %.2f%% | %.2f | %s |\n", C, label,
                            tps, tps / C, 1e3 * r.total / r.steps, 1e3 * r.fwd / r.steps,
                            1e3 * r.host / r.steps, 100.0 * r.host / r.total, d.mean_acceptance_length(),
                            per.empty() ? "-" : per.c_str());
                if (!after.spec_cost_model.empty())
                    std::printf("cost model: %s\n", after.spec_cost_model.c_str());
                return Json{{"concurrency", C},
                            {"decode_tps", tps},
                            {"step_ms", 1e3 * r.total / r.steps},
                            {"forward_ms", 1e3 * r.fwd / r.steps},
                            {"host_ms_per_step", 1e3 * r.host / r.steps},
                            {"host_share", r.host / r.total},
                            {"tokens", r.tokens},
                            {"drafted", d.drafted},
                            {"accepted", d.accepted},
                            {"mean_acceptance_length", d.mean_acceptance_length()}};
            };
            if (args->has("--profile")) {
                Profiler::get().clear();
                Profiler::get().enable(true);
            }
            if (!ab) {
                Run r;
                if (Status st = make_run(*spec, &r); !st) {
                    std::fprintf(stderr, "gdn bench: %s\n", st.message().c_str());
                    return 1;
                }
                start(r);
                while (more(r)) timed_step(r);
                Json row = report(r, "");
                const double tps = row["decode_tps"].get<double>();
                if (C == 1) single = tps;
                row["speedup_vs_1"] = single > 0 ? tps / single : 0.0;
                rows.push_back(row);
            } else {
                // Plain (A) and speculative (B) engines on the same prompts, their steps interleaved A B B A:
                // the VM's bandwidth drifts over seconds, so only a paired ratio means anything.
                Run a, b;
                for (auto [sc, r] : {std::pair{SpeculativeConfig{}, &a}, std::pair{*spec, &b}})
                    if (Status st = make_run(sc, r); !st) {
                        std::fprintf(stderr, "gdn bench: %s\n", st.message().c_str());
                        return 1;
                    }
                start(a);
                start(b);
                for (int64_t i = 0; more(a) || more(b); ++i) {
                    Run& first = i % 2 == 0 ? a : b;
                    Run& second = i % 2 == 0 ? b : a;
                    if (more(first)) timed_step(first);
                    if (more(second)) timed_step(second);
                }
                Json ra = report(a, " plain"), rb = report(b, " spec");
                const double ratio = rb["decode_tps"].get<double>() / ra["decode_tps"].get<double>();
                std::printf("| %d | speculation / plain tokens/s: **%.3f** | | | | | | | |\n", C, ratio);
                rows.push_back({{"concurrency", C}, {"plain", ra}, {"speculative", rb}, {"ratio", ratio}});
            }
            if (args->has("--profile")) {
                Profiler::get().enable(false);
                std::printf("concurrency %d:\n%s", C, Profiler::get().report().c_str());
            }
        }
        out["concurrency"] = rows;
        if (args->has("--json")) {
            std::ofstream f(args->get("--json"));
            f << out.dump(2) << "\n";
        }
        return 0;
    }
    std::printf(
        "| model | threads | dtype | weights | test | t/s | roofline t/s | ratio "
        "|\n|---|---|---|---|---|---|---|---|\n");
    const char* weights_label =
        m.weights().quantization ? quantization_name(*m.weights().quantization) : "as stored";
    out["model"] = name;
    out["weights"] = weights_label;
    out["threads"] = *threads;
    out["dtype"] = fo.bf16_activations ? "bf16" : "f32";
    out["weights_bytes_per_token"] = bytes;
    out["flops_per_token"] = flops;
    if (lim.read_gbps > 0)
        out["machine"] = {{"read_gbps", lim.read_gbps},
                          {"fp32_gflops", lim.fp32_gflops},
                          {"bf16_gflops", lim.bf16_gflops},
                          {"amx_gflops", lim.amx_gflops}};
    auto row = [&](const char* test, long long n, const std::vector<double>& v, double roof,
                   const char* key) {
        if (v.empty()) return;
        Stats s = stats(v);
        const std::string at = *depth > 0 ? strprintf(" @ d%lld", *depth) : "";
        std::printf("| %s | %lld | %s | %s | %s%lld%s | %.2f ± %.2f | %.1f | %.2f |\n", name.c_str(),
                    *threads, fo.bf16_activations ? "bf16" : "f32", weights_label, test, n, at.c_str(),
                    s.mean, s.sd, roof, roof > 0 ? s.mean / roof : 0.0);
        out[key] = {{"n_tokens", n},
                    {"depth", *depth},
                    {"mean_tps", s.mean},
                    {"sd_tps", s.sd},
                    {"samples", v},
                    {"roofline_tps", roof},
                    {"roofline_ratio", roof > 0 ? s.mean / roof : 0.0}};
    };
    // The matmuls' peak in this mode: AMX tiles where they run the bf16 linears, else vdpbf16ps, else FMA.
    const double peak = !fo.bf16_activations  ? lim.fp32_gflops
                        : lim.amx_gflops > 0  ? lim.amx_gflops
                        : lim.bf16_gflops > 0 ? lim.bf16_gflops
                                              : lim.fp32_gflops;
    // Prefill: every layer matmul per token, the lm_head once per prompt (attention/GDN FLOPs not counted).
    const double pp_flops = *pp > 0 ? flops - lm_flops + lm_flops / *pp : flops;
    row("pp", *pp, pp_tps, peak > 0 ? peak * 1e9 / pp_flops : 0.0, "pp");
    const double tg_kv = kv_bytes_per_key * (*depth + 0.5 * (*tg + 1));  // per step, on average
    row("tg", *tg, tg_tps, lim.read_gbps > 0 ? lim.read_gbps * 1e9 / (bytes + tg_kv + state_bytes) : 0.0,
        "tg");
    if (*tg > 0 && state_bytes > 0) {
        std::printf(
            "tg%lld reads and writes %.1f MB of GDN state per step (conv windows and recurrent states, f32) "
            "beside the weights: the rooflines count it\n",
            *tg, state_bytes / 1e6);
        out["tg"]["state_bytes_per_token"] = state_bytes;
    }
    if (*depth > 0 && *tg > 0) {
        std::printf(
            "tg%lld @ d%lld reads %.3f GB of K/V per step on average (%s cache) beside %.3f GB of weights: "
            "the "
            "rooflines count both\n",
            *tg, *depth, tg_kv / 1e9, dtype_name(kv_dtype), bytes / 1e9);
        out["tg"]["kv_bytes_per_token"] = tg_kv;
    }
    if (!tg_ratio.empty()) {
        const Stats r = stats(tg_ratio), g = stats(tg_gbps);
        std::printf(
            "tg%lld against the read bandwidth measured around every %lld steps (%.1f ± %.1f GB/s): "
            "ratio %.3f ± %.3f (per repetition:",
            *tg, kTgSegment, g.mean, g.sd, r.mean, r.sd);
        for (double x : tg_ratio) std::printf(" %.3f", x);
        std::printf(")\n");
        out["tg"]["adjacent_read_gbps"] = tg_gbps;
        out["tg"]["adjacent_roofline_ratio"] = tg_ratio;
        out["tg"]["adjacent_roofline_ratio_mean"] = r.mean;
        const Stats rw = stats(tg_weights_ratio), gw = stats(tg_weights_gbps);
        std::printf(
            "tg%lld against the read bandwidth of the streamed weights' own memory (%.3f GB), measured the "
            "same way (%.1f ± %.1f GB/s): ratio %.3f ± %.3f (per repetition:",
            *tg, weights_probe->bytes() / 1e9, gw.mean, gw.sd, rw.mean, rw.sd);
        for (double x : tg_weights_ratio) std::printf(" %.3f", x);
        std::printf(")\n");
        out["tg"]["weights_memory_read_gbps"] = tg_weights_gbps;
        out["tg"]["weights_memory_roofline_ratio"] = tg_weights_ratio;
        out["tg"]["weights_memory_roofline_ratio_mean"] = rw.mean;
    }
    std::printf("weights read per decode token: %.3f GB; matmul FLOPs per prefill token: %.3f G\n",
                bytes / 1e9, pp_flops / 1e9);
    // The roofline above counts the model's bf16 weights. Greedy decode streams fewer bytes where the
    // lm_head's int8 screen runs (ops/argmax_screen.h): say so, with the ratio against those bytes.
    if (screened) {
        std::printf(
            "greedy decode streams %.3f GB per token: the lm_head's int8 screen (%.3f GB) instead of its "
            "bf16 "
            "copy (%.3f GB), plus the rechecked panels",
            streamed / 1e9, (lm.screen->q.size() + lm.screen->meta.size()) / 1e9,
            lm.packed.data.size() / 1e9);
        out["tg"]["streamed_bytes_per_token"] = streamed;
        if (!tg_ratio.empty()) {
            const double r = stats(tg_ratio).mean * streamed / bytes;
            std::printf("; against those bytes: ratio %.3f", r);
            out["tg"]["adjacent_streamed_ratio_mean"] = r;
        }
        std::printf("\n");
    }
    if (args->has("--json")) {
        std::ofstream f(args->get("--json"));
        f << out.dump(2) << "\n";
        if (!f) {
            std::fprintf(stderr, "gdn bench: cannot write %s\n", args->get("--json").c_str());
            return 1;
        }
    }
    return 0;
}

}  // namespace gdn
