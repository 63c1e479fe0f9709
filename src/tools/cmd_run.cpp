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
#include "engine/gguf_tokenizer.h"
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

int fail(const std::string& what, int code) {
    std::fprintf(stderr, "gdn run: %s\n", what.c_str());
    return code;
}

// What the options ask for, every one checked before the model loads.
struct RunPlan {
    long long n_new = 32;
    int threads = 1;
    std::optional<bool> thinking;  // --enable-thinking
    std::string dtype;             // "f32" | "bf16"
    ForwardOptions forward;
    DType kv_dtype = DType::F32;
    SpeculativeConfig spec;
    SamplingParams sampling;
    std::vector<int32_t> prompt_ids;  // --prompt-ids
};

Result<RunPlan> plan_from_args(const Args& a) {
    const int n_prompt_kinds = a.has("--prompt-ids") + a.has("-p") + a.has("--chat");
    if (!a.has("--model") || n_prompt_kinds != 1)
        return Status::error("--model and exactly one of --chat, -p, --prompt-ids are required");
    RunPlan plan;
    auto n_new = a.get_int("-n", 32);
    auto temperature = a.get_double("--temperature", 0.0), top_p = a.get_double("--top-p", 1.0);
    auto top_k = a.get_int("--top-k", 0), seed = a.get_int("--seed", 0);
    if (!temperature || !top_p || !top_k || !seed)
        return Status::error(temperature.message() + top_p.message() + top_k.message() + seed.message());
    auto threads = a.get_int("--threads", default_thread_count());
    Result<std::vector<int>> ids = std::vector<int>{};
    if (a.has("--prompt-ids")) ids = parse_id_list(a.get("--prompt-ids"));
    if (!n_new || !threads || !ids) return Status::error(n_new.message() + threads.message() + ids.message());
    if (a.has("--enable-thinking")) {
        const std::string v = a.get("--enable-thinking");
        if (v != "true" && v != "false") return Status::error("--enable-thinking must be true or false");
        plan.thinking = v == "true";
    }
    if (*n_new < 0 || *threads < 1 || *threads > 256)
        return Status::error("-n must be >= 0 and --threads in 1..256");
    plan.n_new = *n_new;
    plan.threads = static_cast<int>(*threads);
    plan.prompt_ids.assign(ids->begin(), ids->end());
    plan.dtype = a.get("--dtype", "f32");
    if (plan.dtype == "bf16")
        plan.forward.bf16_activations = true;
    else if (plan.dtype != "f32")
        return Status::error("--dtype must be f32 or bf16, got '" + plan.dtype + "'");
    GDN_ASSIGN_OR_RETURN(plan.kv_dtype, kv_cache_dtype(a, plan.forward.bf16_activations));
    GDN_ASSIGN_OR_RETURN(plan.spec, speculative_config(a));
    SamplingParams& sp = plan.sampling;
    sp.temperature = static_cast<float>(*temperature);
    sp.top_p = static_cast<float>(*top_p);
    sp.top_k = static_cast<int>(*top_k);
    if (a.has("--seed")) sp.seed = static_cast<uint64_t>(*seed);
    sp.max_tokens = static_cast<int>(std::max<long long>(1, plan.n_new));
    sp.ignore_eos = a.has("--ignore-eos");
    return plan;
}

// The prompt's ids: --prompt-ids as given, -p tokenized, --chat rendered with the checkpoint's template.
Result<std::vector<int32_t>> prompt_of(const Args& a, const RunPlan& plan, const Tokenizer* tok) {
    if (a.has("-p")) return tok->encode(a.get("-p"));
    if (!a.has("--chat")) return plan.prompt_ids;
    GDN_ASSIGN_OR_RETURN(auto ct, ChatTemplate::create(*tok));
    ChatRequest req;
    if (a.has("--system")) req.messages.push_back({{"role", "system"}, {"content", a.get("--system")}});
    req.messages.push_back({{"role", "user"}, {"content", a.get("--chat")}});
    req.enable_thinking = plan.thinking;
    GDN_ASSIGN_OR_RETURN(std::string text, ct->render(req));
    return tok->encode(text);
}

// --dump-logits: every prompt position's logits from one prefill on a standalone sequence state, raw
// little-endian f32 [n_prompt, vocab].
Status dump_prompt_logits(const Model& m, const RunPlan& plan, const std::vector<int32_t>& prompt,
                          const std::string& path) {
    std::vector<float> logits;
    SequenceState st = m.new_state(plan.kv_dtype);
    GDN_RETURN_IF_ERROR(
        m.forward({{&st, prompt.data(), static_cast<int64_t>(prompt.size()), true}}, plan.forward, &logits));
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(logits.data(), sizeof(float), logits.size(), f) != logits.size() ||
        std::fclose(f) != 0)
        return Status::error("cannot write " + path);
    GDN_LOG_INFO("wrote logits [%zu, %lld] to %s", prompt.size(), (long long)m.config().vocab, path.c_str());
    return Status::ok();
}

// Generation on the engine (one request: the same path the server uses), streamed to stdout as text
// (or ids), then the summary line on stderr.
int generate(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tok, const RunPlan& plan,
             const std::vector<int32_t>& prompt, bool text_io) {
    auto t0 = std::chrono::steady_clock::now();
    EngineConfig ec;
    ec.bf16 = plan.forward.bf16_activations;
    ec.kv_dtype = plan.kv_dtype;
    ec.max_num_seqs = 1;
    ec.max_num_batched_tokens = 512 + 1 + plan.spec.num_speculative_tokens;
    ec.max_model_len = static_cast<int>(std::min<int64_t>(prompt.size() + plan.n_new + 1, 1 << 30));
    ec.speculative = plan.spec;
    ec.enable_prefix_caching = false;  // one request: nothing to share
    ec.cache_memory = Engine::cache_bytes_for(model->config(), 1, ec.max_model_len, plan.kv_dtype,
                                              ec.block_size, plan.spec);
    auto engine = Engine::create(model, tok, ec);
    if (!engine) return fail(engine.message(), 1);
    auto id = (*engine)->add_request(Prompt::from_ids(prompt), plan.sampling);
    if (!id) return fail(id.message(), 1);
    std::vector<int32_t> out;
    auto t1 = std::chrono::steady_clock::now();
    double ttft = -1, first_gen = 0;
    while ((*engine)->has_unfinished() && plan.n_new > 0) {
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
    auto plan = plan_from_args(*args);
    if (!plan) {
        std::fprintf(stderr, "gdn run: %s\n", plan.message().c_str());
        if (!args->has("--model") || args->has("--prompt-ids") + args->has("-p") + args->has("--chat") != 1)
            usage();
        return 2;
    }
    set_global_threads(plan->threads);
    if (Status ks = configure_kernels_from_env(); !ks) return fail(ks.message(), 2);
    auto model = load_model_for_tool(*args);
    if (!model) return fail(model.message(), 1);
    GDN_LOG_INFO("activations %s, %d threads", plan->dtype.c_str(), plan->threads);
    log_kernel_selection();
    // Text prompts go through the checkpoint's tokenizer (and chat template for --chat).
    std::shared_ptr<const Tokenizer> tok;
    const bool text_io = !args->has("--prompt-ids") && !args->has("--print-ids");
    if (!args->has("--prompt-ids") || text_io) {
        auto t = load_model_tokenizer(args->get("--model"));
        if (!t) return fail(t.message(), 1);
        tok = *t;
    }
    auto prompt = prompt_of(*args, *plan, tok.get());
    if (!prompt) return fail(prompt.message(), 1);
    if (prompt->empty()) return fail("the prompt is empty", 2);
    if (args->has("--dump-logits"))
        if (Status s = dump_prompt_logits(**model, *plan, *prompt, args->get("--dump-logits")); !s)
            return fail(s.message(), 1);
    return generate(std::shared_ptr<const Model>(std::move(*model)), tok, *plan, *prompt, text_io);
}

}  // namespace gdn
