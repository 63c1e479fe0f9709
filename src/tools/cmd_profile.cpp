// gdn profile: per-op statistics of prefill and decode steps, and a Chrome trace of one decode step.
#include <cstdio>
#include <fstream>
#include <random>

#include "core/profiler.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "ops/dispatch.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/model_loading.h"

namespace gdn {

int cmd_profile(int argc, char** argv) {
    auto args = Args::parse(argc, argv,
                            {"--model", "--prompt-len", "--gen-len", "--batch", "--threads", "--trace",
                             "--dtype", "--kv-cache-dtype", "--quantization"},
                            {"--help"});
    if (!args || args->has("--help") || !args->has("--model")) {
        std::fprintf(
            stderr,
            "usage: gdn profile --model DIR [--prompt-len 512] [--gen-len 32] [--batch 1] [--threads N]\n"
            "                   [--dtype bf16|f32] [--kv-cache-dtype f32|bf16] [--quantization "
            "int8|int4|int4-sym]\n"
            "                   [--trace FILE.json]\n"
            "  Prints per-op tables (calls, total, mean, share of step time) for prefill and decode, and\n"
            "  writes a Chrome trace (chrome://tracing, ui.perfetto.dev) of one decode step. --batch N:\n"
            "  N sequences of --prompt-len random tokens, prefilled in one forward, then decoding together\n"
            "  (every decode step a batch of N rows, as the engine's steps at N concurrent requests).\n");
        if (!args) std::fprintf(stderr, "gdn profile: %s\n", args.message().c_str());
        return args && args->has("--help") ? 0 : 2;
    }
    auto plen = args->get_int("--prompt-len", 512), glen = args->get_int("--gen-len", 32),
         batch = args->get_int("--batch", 1), threads = args->get_int("--threads", default_thread_count());
    if (!plen || !glen || !batch || !threads || *plen < 1 || *glen < 1 || *batch < 1 || *threads < 1) {
        std::fprintf(
            stderr,
            "gdn profile: --prompt-len, --gen-len, --batch and --threads must be positive integers\n");
        return 2;
    }
    if (*batch > 256) {
        std::fprintf(stderr, "gdn profile: --batch %lld: at most 256 sequences\n", *batch);
        return 2;
    }
    if (Status ks = configure_kernels_from_env(); !ks) {
        std::fprintf(stderr, "gdn profile: %s\n", ks.message().c_str());
        return 2;
    }
    set_global_threads(static_cast<int>(*threads));
    auto model = load_model_for_tool(*args);
    if (!model) {
        std::fprintf(stderr, "gdn profile: %s\n", model.message().c_str());
        return 1;
    }
    const Model& m = **model;
    log_kernel_selection();
    ForwardOptions fo;
    fo.bf16_activations = args->get("--dtype", "bf16") == "bf16";
    auto kv = kv_cache_dtype(*args, fo.bf16_activations);
    if (!kv) {
        std::fprintf(stderr, "gdn profile: %s\n", kv.message().c_str());
        return 2;
    }
    const DType kv_dtype = *kv;
    std::mt19937 rng(7);
    const int n_seq = static_cast<int>(*batch);
    std::vector<std::vector<int32_t>> prompts(n_seq, std::vector<int32_t>(*plen));
    for (auto& p : prompts)
        for (auto& t : p) t = static_cast<int32_t>(rng() % m.config().vocab);
    std::vector<float> logits;
    const ForwardWorkspacePtr ws = new_forward_workspace(m.context());  // one for all, warmed first
    {  // warm-up, not profiled: a full-size prefill touches every buffer once
        SequenceState st = m.new_state(kv_dtype);
        m.forward(*ws, {{&st, prompts[0].data(), *plen, false}}, fo, &logits);
    }
    Profiler& prof = Profiler::get();
    prof.clear();
    prof.enable(true);
    std::vector<SequenceState> states;
    states.reserve(n_seq);
    std::vector<SequenceInput> prefill;
    for (int s = 0; s < n_seq; ++s) {
        states.push_back(m.new_state(kv_dtype));
        states.back().reserve(*plen + *glen + 1);
        prefill.push_back({&states.back(), prompts[s].data(), *plen, false});
    }
    // Decode greedily as the engine does: the lm_head returns the argmax, no logits row is written.
    std::vector<int32_t> next, tokens;
    if (Status st = m.forward(*ws, prefill, fo, &logits, &next); !st) {
        std::fprintf(stderr, "gdn profile: %s\n", st.message().c_str());
        return 1;
    }
    for (long long i = 0; i < *glen; ++i) {
        tokens.swap(next);
        next.clear();
        std::vector<SequenceInput> step;
        for (int s = 0; s < n_seq; ++s) step.push_back({&states[s], &tokens[s], 1, false});
        if (Status st = m.forward(*ws, step, fo, &logits, &next); !st) {
            std::fprintf(stderr, "gdn profile: %s\n", st.message().c_str());
            return 1;
        }
    }
    prof.enable(false);
    std::printf("%s", prof.report().c_str());
    const std::string trace = args->get("--trace", "gdn_trace.json");
    std::ofstream f(trace);
    f << prof.chrome_trace("decode", std::min<long long>(1, *glen - 1));
    if (!f) {
        std::fprintf(stderr, "gdn profile: cannot write %s\n", trace.c_str());
        return 1;
    }
    std::ofstream fp(trace + ".prefill.json");
    fp << prof.chrome_trace("prefill", 0);
    std::printf("chrome traces: %s (one decode step), %s.prefill.json (the prefill)\n", trace.c_str(),
                trace.c_str());
    // Non-zero on a shared machine: decode GEMV claims the caller took over from a descheduled worker,
    // and workers that slept inside a forward (they shared the caller's CPU, or it was away > 20 ms).
    std::printf(
        "thread pool: %lld claims stolen from descheduled workers, %lld worker sleeps inside "
        "forwards\n",
        static_cast<long long>(global_pool().steals()),
        static_cast<long long>(global_pool().sleeps_in_forward()));
    if (std::string fb = fallback_report(); !fb.empty()) std::printf("fallbacks: %s\n", fb.c_str());
    return 0;
}

}  // namespace gdn
