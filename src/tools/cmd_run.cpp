// gdn run: one prompt (a chat message, raw text or token ids) through the engine: greedy or sampled
// generation on the kernels the dispatcher picked, optional quantization and speculative decoding, and a
// summary line (--dump-logits: the prompt's logits from one forward first).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "model/model.h"
#include "ops/dispatch.h"
#include "ops/ref/ref_ops.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/model_loading.h"

namespace gdn {

namespace {

void usage() {
    std::fprintf(
        stderr,
        "usage: gdn run --model DIR (--chat MESSAGE | -p TEXT | --prompt-ids 1,2,3) [-n N] [--dtype "
        "f32|bf16]\n"
        "               [--threads N] [--dump-logits FILE] [--ignore-eos]\n"
        "  --chat          a user message, rendered with the checkpoint's chat template\n"
        "  --system        a system message to put before it\n"
        "  --enable-thinking true|false   passed to the chat template (Qwen3.5: default true)\n"
        "  -p              raw prompt text (no template)\n"
        "  --prompt-ids    prompt as comma-separated token ids (output is printed as ids)\n"
        "  --print-ids     print generated token ids instead of text\n"
        "  --temperature T --top-p P --top-k K --seed S   sampling (default: greedy)\n"
        "  -n              new tokens to generate (default 32)\n"
        "  --dtype         activation precision: f32 (comparison mode, default) or bf16\n"
        "  --kv-cache-dtype f32|bf16   K/V cache elements (bf16, the default with --dtype bf16: half the "
        "memory,\n"
        "                              K/V rounded as HF's bf16 forward does; f32: as computed)\n"
        "  --quantization int8|int4|int4-sym   quantize the weight matrices at load (int8: 8.5 bits/weight;\n"
        "                  int4: 4.5-bit int4-k, int6-k where 4 bits hurt most, ~5 overall; int4-sym: 4.5, "
        "int8 lm_head)\n"
        "  --speculative-config JSON  speculative decoding, vLLM's JSON: '{\"method\": \"mtp\", "
        "\"num_speculative_tokens\": 2}'\n"
        "                  or '{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"prompt_lookup_max\": "
        "4}'\n"
        "  --threads       worker threads (default: all cores)\n"
        "  --dump-logits   write logits of every prompt position, raw little-endian f32 [n_prompt, vocab]\n"
        "  --ignore-eos    keep generating past an end-of-sequence token\n");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int cmd_run(int argc, char** argv) {
    auto args = Args::parse(argc, argv,
                            {"--model", "--prompt-ids", "-p", "--chat", "--system", "--enable-thinking", "-n",
                             "--dtype", "--kv-cache-dtype", "--threads", "--dump-logits", "--temperature",
                             "--top-p", "--top-k", "--seed", "--quantization", "--speculative-config"},
                            {"--help", "--ignore-eos", "--print-ids"});
    if (!args) {
        std::fprintf(stderr, "gdn run: %s\n", args.message().c_str());
        usage();
        return 2;
    }
    if (args->has("--help")) {
        usage();
        return 0;
    }
    const int n_prompt_kinds = args->has("--prompt-ids") + args->has("-p") + args->has("--chat");
    if (!args->has("--model") || n_prompt_kinds != 1) {
        std::fprintf(stderr, "gdn run: --model and exactly one of --chat, -p, --prompt-ids are required\n");
        usage();
        return 2;
    }
    auto n_new = args->get_int("-n", 32);
    auto temperature = args->get_double("--temperature", 0.0), top_p = args->get_double("--top-p", 1.0);
    auto top_k = args->get_int("--top-k", 0), seed = args->get_int("--seed", 0);
    if (!temperature || !top_p || !top_k || !seed) {
        std::fprintf(stderr, "gdn run: %s%s%s%s\n", temperature.message().c_str(), top_p.message().c_str(),
                     top_k.message().c_str(), seed.message().c_str());
        return 2;
    }
    auto threads = args->get_int("--threads", default_thread_count());
    Result<std::vector<int>> ids = std::vector<int>{};
    if (args->has("--prompt-ids")) ids = parse_id_list(args->get("--prompt-ids"));
    if (!n_new || !threads || !ids) {
        std::fprintf(stderr, "gdn run: %s%s%s\n", n_new.message().c_str(), threads.message().c_str(),
                     ids.message().c_str());
        return 2;
    }
    std::optional<bool> thinking;
    if (args->has("--enable-thinking")) {
        const std::string v = args->get("--enable-thinking");
        if (v != "true" && v != "false") {
            std::fprintf(stderr, "gdn run: --enable-thinking must be true or false\n");
            return 2;
        }
        thinking = v == "true";
    }
    if (*n_new < 0 || *threads < 1 || *threads > 256) {
        std::fprintf(stderr, "gdn run: -n must be >= 0 and --threads in 1..256\n");
        return 2;
    }
    ForwardOptions fo;
    std::string dt = args->get("--dtype", "f32");
    if (dt == "bf16")
        fo.bf16_activations = true;
    else if (dt != "f32") {
        std::fprintf(stderr, "gdn run: --dtype must be f32 or bf16, got '%s'\n", dt.c_str());
        return 2;
    }
    auto kv_dtype = kv_cache_dtype(*args, fo.bf16_activations);
    if (!kv_dtype) {
        std::fprintf(stderr, "gdn run: %s\n", kv_dtype.message().c_str());
        return 2;
    }
    auto spec = speculative_config(*args);
    if (!spec) {
        std::fprintf(stderr, "gdn run: %s\n", spec.message().c_str());
        return 2;
    }
    set_global_threads(static_cast<int>(*threads));

    if (Status ks = configure_kernels_from_env(); !ks) {
        std::fprintf(stderr, "gdn run: %s\n", ks.message().c_str());
        return 2;
    }
    auto model = load_model_for_tool(*args);
    if (!model) {
        std::fprintf(stderr, "gdn run: %s\n", model.message().c_str());
        return 1;
    }
    const ModelConfig& c = (*model)->config();
    GDN_LOG_INFO("activations %s, %d threads", dt.c_str(), static_cast<int>(*threads));
    log_kernel_selection();

    // Text prompts go through the checkpoint's tokenizer (and chat template for --chat).
    std::shared_ptr<const Tokenizer> tok;
    const bool text_io = !args->has("--prompt-ids") && !args->has("--print-ids");
    if (!args->has("--prompt-ids") || text_io) {
        auto t = Tokenizer::load(args->get("--model"));
        if (!t) {
            std::fprintf(stderr, "gdn run: %s\n", t.message().c_str());
            return 1;
        }
        tok = *t;
    }
    std::vector<int32_t> prompt(ids->begin(), ids->end());
    if (args->has("-p")) prompt = tok->encode(args->get("-p"));
    if (args->has("--chat")) {
        auto ct = ChatTemplate::create(*tok);
        if (!ct) {
            std::fprintf(stderr, "gdn run: %s\n", ct.message().c_str());
            return 1;
        }
        ChatRequest req;
        if (args->has("--system"))
            req.messages.push_back({{"role", "system"}, {"content", args->get("--system")}});
        req.messages.push_back({{"role", "user"}, {"content", args->get("--chat")}});
        req.enable_thinking = thinking;
        auto text = (*ct)->render(req);
        if (!text) {
            std::fprintf(stderr, "gdn run: %s\n", text.message().c_str());
            return 1;
        }
        prompt = tok->encode(*text);
    }
    if (prompt.empty()) {
        std::fprintf(stderr, "gdn run: the prompt is empty\n");
        return 2;
    }
    const bool dump = args->has("--dump-logits");
    std::vector<float> logits;
    const int64_t V = c.vocab;
    if (dump) {
        // All prompt positions' logits, from one prefill on a standalone sequence state.
        SequenceState st = (*model)->new_state(*kv_dtype);
        Status s =
            (*model)->forward({{&st, prompt.data(), static_cast<int64_t>(prompt.size()), true}}, fo, &logits);
        if (!s) {
            std::fprintf(stderr, "gdn run: %s\n", s.message().c_str());
            return 1;
        }
        std::string path = args->get("--dump-logits");
        FILE* f = std::fopen(path.c_str(), "wb");
        if (!f || std::fwrite(logits.data(), sizeof(float), logits.size(), f) != logits.size() ||
            std::fclose(f) != 0) {
            std::fprintf(stderr, "gdn run: cannot write %s\n", path.c_str());
            return 1;
        }
        GDN_LOG_INFO("wrote logits [%zu, %lld] to %s", prompt.size(), (long long)V, path.c_str());
    }
    auto t0 = std::chrono::steady_clock::now();
    // Generation runs on the engine (one request): the same path the server uses.
    EngineConfig ec;
    ec.bf16 = fo.bf16_activations;
    ec.kv_dtype = *kv_dtype;
    ec.max_num_seqs = 1;
    ec.max_num_batched_tokens = 512 + 1;
    ec.max_model_len = static_cast<int>(std::min<int64_t>(prompt.size() + *n_new + 1, 1 << 30));
    ec.speculative = *spec;
    ec.enable_prefix_caching = false;  // one request: nothing to share
    ec.max_num_batched_tokens += spec->num_speculative_tokens;
    ec.cache_memory = Engine::cache_bytes_for(c, 1, ec.max_model_len, *kv_dtype, ec.block_size, *spec);
    std::shared_ptr<const Model> shared(std::move(*model));
    auto engine = Engine::create(shared, tok, ec);
    if (!engine) {
        std::fprintf(stderr, "gdn run: %s\n", engine.message().c_str());
        return 1;
    }
    SamplingParams sp;
    sp.temperature = static_cast<float>(*temperature);
    sp.top_p = static_cast<float>(*top_p);
    sp.top_k = static_cast<int>(*top_k);
    if (args->has("--seed")) sp.seed = static_cast<uint64_t>(*seed);
    sp.max_tokens = static_cast<int>(std::max<long long>(1, *n_new));
    sp.ignore_eos = args->has("--ignore-eos");
    auto id = (*engine)->add_request(Prompt::from_ids(prompt), sp);
    if (!id) {
        std::fprintf(stderr, "gdn run: %s\n", id.message().c_str());
        return 1;
    }
    std::vector<int32_t> out;
    auto t1 = std::chrono::steady_clock::now();
    double ttft = -1, first_gen = 0;
    while ((*engine)->has_unfinished() && *n_new > 0) {
        for (const RequestOutput& o : (*engine)->step()) {
            if (o.new_tokens.empty()) continue;
            if (ttft < 0) {
                ttft = seconds_since(t0);
                first_gen = seconds_since(t1);
            }
            for (int32_t t : o.new_tokens) {
                if (!text_io) std::printf("%s%d", out.empty() ? "" : ",", t);
                out.push_back(t);
            }
            if (text_io) std::fwrite(o.text_delta.data(), 1, o.text_delta.size(), stdout);
            std::fflush(stdout);
        }
    }
    std::printf("\n");
    std::fflush(stdout);
    const double t_gen = seconds_since(t1);
    std::fprintf(
        stderr,
        "prompt %zu tokens, time to first token %.3f s; generated %zu tokens in %.3f s (%.1f tok/s)\n",
        prompt.size(), ttft < 0 ? 0.0 : ttft, out.size(), t_gen,
        out.size() > 1 ? (out.size() - 1) / std::max(t_gen - first_gen, 1e-9) : 0.0);
    if (const std::string sp_line = speculation_summary((*engine)->stats()); !sp_line.empty())
        std::fprintf(stderr, "%s\n", sp_line.c_str());
    return 0;
}

}  // namespace gdn
