// gdn perplexity: llama-perplexity's measurement (non-overlapping windows of --ctx tokens, each scored
// on its second half; PPL +- standard error), optionally as KL divergence against a base run's
// log-probabilities (tools/perplexity.h). Windows go through the model's batched prefill, several
// sequences per forward; with --decode the scored half goes one token per forward instead, the way
// generation reads the KV cache (decode attention, the cache dtype as stored).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/gguf_tokenizer.h"
#include "model/model.h"
#include "ops/dispatch.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/model_loading.h"
#include "tools/perplexity.h"

namespace gdn {

namespace {

void usage() {
    std::fprintf(
        stderr,
        "usage: gdn perplexity --model DIR --file TEXT [--ctx 512] [--batch N] [--chunks N] [--dtype "
        "f32|bf16]\n"
        "                      [--quantization int8|int4|int4-sym] [--threads N]\n"
        "                      [--kl-divergence-base FILE | --kl-divergence FILE] [--decode]\n"
        "  Windows of --ctx tokens (a shorter tail is dropped), each scored on its second half.\n"
        "  --kl-divergence-base FILE  also write this run's log-probabilities (the base, e.g. --dtype f32)\n"
        "  --kl-divergence FILE       compare with a base: mean KLD, its 99th percentile, same top-1 %%\n"
        "  --batch N                  windows per forward (default: as many as fit 512 MB of logits, <= 8)\n"
        "  --chunks N                 score only the first N windows\n"
        "  --decode                   prefill each window's first half, then score the second half one\n"
        "                             token per forward (decode steps, teacher-forced), as generation "
        "runs\n");
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
    auto args =
        Args::parse(argc, argv,
                    {"--model", "--file", "--ctx", "--batch", "--chunks", "--dtype", "--kv-cache-dtype",
                     "--quantization", "--threads", "--kl-divergence-base", "--kl-divergence"},
                    {"--help", "--decode"});
    if (!args || args->has("--help") || !args->has("--model") || !args->has("--file")) {
        usage();
        if (!args) std::fprintf(stderr, "gdn perplexity: %s\n", args.message().c_str());
        return args && args->has("--help") ? 0 : 2;
    }
    auto fail = [](const std::string& m, int code) {
        std::fprintf(stderr, "gdn perplexity: %s\n", m.c_str());
        return code;
    };
    auto ctx = args->get_int("--ctx", 512), batch = args->get_int("--batch", 0),
         chunks = args->get_int("--chunks", 0), threads = args->get_int("--threads", default_thread_count());
    if (!ctx || *ctx < 4 || *ctx > (1 << 20)) return fail("--ctx must be an integer in [4, 1048576]", 2);
    if (!batch || *batch < 0 || *batch > 256) return fail("--batch must be an integer in [1, 256]", 2);
    if (!chunks || *chunks < 0) return fail("--chunks must be a positive integer", 2);
    if (!threads || *threads < 1) return fail("--threads must be a positive integer", 2);
    if (args->has("--kl-divergence-base") && args->has("--kl-divergence"))
        return fail("--kl-divergence-base writes a base and --kl-divergence reads one: give one of them", 2);
    const bool decode = args->has("--decode");
    ForwardOptions fo;
    const std::string dt = args->get("--dtype", "f32");
    if (dt == "bf16")
        fo.bf16_activations = true;
    else if (dt != "f32")
        return fail("--dtype must be f32 or bf16, got '" + dt + "'", 2);
    auto kv = kv_cache_dtype(*args, fo.bf16_activations);
    if (!kv) return fail(kv.message(), 2);
    if (Status ks = configure_kernels_from_env(); !ks) return fail(ks.message(), 2);
    if (auto lo = load_options(*args); !lo) return fail(lo.message(), 2);
    set_global_threads(static_cast<int>(*threads));

    std::ifstream in(args->get("--file"), std::ios::binary);
    if (!in) return fail("cannot open --file " + args->get("--file"), 1);
    std::stringstream ss;
    ss << in.rdbuf();
    auto model = load_model_for_tool(*args);
    if (!model) return fail(model.message(), 1);
    auto tok = load_model_tokenizer(args->get("--model"));
    if (!tok) return fail(tok.message(), 1);
    log_kernel_selection();
    const Model& m = **model;
    const int64_t V = m.config().vocab, C = *ctx, first = C / 2, per_window = C - 1 - first;
    const std::vector<int32_t> tokens = (*tok)->encode(ss.str());
    int64_t n_windows = static_cast<int64_t>(tokens.size()) / C;
    if (*chunks > 0) n_windows = std::min<int64_t>(n_windows, *chunks);
    if (n_windows == 0)
        return fail(strprintf("%s has %zu tokens: fewer than one window of --ctx %lld",
                              args->get("--file").c_str(), tokens.size(), (long long)C),
                    1);
    const int64_t B = *batch > 0 ? *batch : std::clamp<int64_t>((int64_t{512} << 20) / (C * V * 4), 1, 8);
    GDN_LOG_INFO(
        "%zu tokens, %lld windows of %lld (scoring %lld per window%s), %lld windows per forward, %s KV cache",
        tokens.size(), (long long)n_windows, (long long)C, (long long)per_window,
        decode ? " by decode steps" : "", (long long)B, dtype_name(*kv));

    std::unique_ptr<perplexity::BaseWriter> writer;
    std::unique_ptr<perplexity::BaseReader> reader;
    if (args->has("--kl-divergence-base")) {
        auto w = perplexity::BaseWriter::create(args->get("--kl-divergence-base"), V, C, tokens);
        if (!w) return fail(w.message(), 1);
        writer = std::move(*w);
    }
    if (args->has("--kl-divergence")) {
        auto r =
            perplexity::BaseReader::open(args->get("--kl-divergence"), V, C, tokens, n_windows * per_window);
        if (!r) return fail(r.message(), 1);
        reader = std::move(*r);
    }
    perplexity::Accumulator acc;
    std::vector<float> logits, logp(V), base(V);
    const ForwardWorkspacePtr ws = new_forward_workspace(m.context());  // one for every window
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t w0 = 0; w0 < n_windows; w0 += B) {
        const int64_t nb = std::min(B, n_windows - w0);
        std::vector<SequenceState> states;
        states.reserve(nb);
        std::vector<SequenceInput> batch_in;
        for (int64_t b = 0; b < nb; ++b) {
            states.push_back(m.new_state(*kv));
            // Whole windows with every row's logits, or (--decode) the unscored first half, logits unread.
            batch_in.push_back({&states.back(), tokens.data() + (w0 + b) * C, decode ? first : C, !decode});
        }
        // Row of window b's logits for position j in `logits`, [nb x C x V] after a prefill of whole
        // windows, [nb x V] after a decode step of position j.
        auto score = [&](int64_t b, int64_t j, const float* row) -> Status {
            const int32_t next = tokens[(w0 + b) * C + j + 1];
            const int64_t top = perplexity::log_softmax(row, V, logp.data());
            acc.add(-static_cast<double>(logp[next]));
            if (writer)
                if (Status s = writer->write_row(logp.data()); !s) return s;
            if (reader) {
                if (Status s = reader->read_row(base.data()); !s) return s;
                int64_t base_top = 0;
                for (int64_t v = 1; v < V; ++v)
                    if (base[v] > base[base_top]) base_top = v;
                acc.add_base(-static_cast<double>(base[next]),
                             perplexity::kl_divergence(base.data(), logp.data(), V), base_top == top);
            }
            return Status::ok();
        };
        logits.clear();
        if (Status s = m.forward(*ws, batch_in, fo, &logits); !s) return fail(s.message(), 1);
        if (!decode) {
            for (int64_t b = 0; b < nb; ++b)
                for (int64_t j = first; j < C - 1; ++j)
                    if (Status s = score(b, j, logits.data() + (b * C + j) * V); !s)
                        return fail(s.message(), 1);
        } else {
            // Rows are scored window by window (the base file's order): keep each window's rows.
            std::vector<float> rows(static_cast<size_t>(nb * per_window * V));
            for (int64_t j = first; j < C - 1; ++j) {
                for (int64_t b = 0; b < nb; ++b)
                    batch_in[b] = {&states[b], tokens.data() + (w0 + b) * C + j, 1, false};
                logits.clear();
                if (Status s = m.forward(*ws, batch_in, fo, &logits); !s) return fail(s.message(), 1);
                for (int64_t b = 0; b < nb; ++b)
                    std::copy_n(logits.data() + b * V, V, rows.data() + (b * per_window + j - first) * V);
            }
            for (int64_t b = 0; b < nb; ++b)
                for (int64_t j = first; j < C - 1; ++j)
                    if (Status s = score(b, j, rows.data() + (b * per_window + j - first) * V); !s)
                        return fail(s.message(), 1);
        }
        const int64_t done = w0 + nb;
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const perplexity::Summary s = acc.summary();
        print_progress("windows", done, n_windows,
                       strprintf(", PPL %.4f, %.0f tok/s, ETA %.0f s ", s.ppl, done * C / el,
                                 el / done * (n_windows - done)));
    }
    if (writer)
        if (Status s = writer->close(); !s) return fail(s.message(), 1);
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const perplexity::Summary s = acc.summary();
    std::printf("tokens scored: %lld (%lld windows of %lld), %.1f s, %.0f tok/s\n", (long long)s.n,
                (long long)n_windows, (long long)C, el, n_windows * C / el);
    std::printf("PPL = %.4f +/- %.4f\n", s.ppl, s.ppl_err);
    if (s.has_base) {
        std::printf("base PPL = %.4f, PPL ratio %.5f (%+.2f%%)\n", s.base_ppl, s.ppl / s.base_ppl,
                    100.0 * (s.ppl / s.base_ppl - 1.0));
        std::printf("Mean KLD = %.6f +/- %.6f\n", s.kld_mean, s.kld_err);
        std::printf("99.0%% KLD = %.6f\n", s.kld_p99);
        std::printf("Same top-1 = %.2f +/- %.2f %%\n", 100.0 * s.same_top, 100.0 * s.same_top_err);
    }
    if (writer) std::printf("base written to %s\n", args->get("--kl-divergence-base").c_str());
    return 0;
}

}  // namespace gdn
