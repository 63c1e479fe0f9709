// gdn serve: the OpenAI-compatible server.
#include <signal.h>

#include <cstdio>
#include <thread>

#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/gguf_tokenizer.h"
#include "ops/dispatch.h"
#include "server/arrival_wait.h"
#include "server/openai_server.h"
#include "server/output_parser.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/model_loading.h"

namespace gdn {

namespace {

// Every option of gdn serve (declared once: Args::parse rejects anything else).
const std::set<std::string> kServeOptions = {"--model",
                                             "--host",
                                             "--port",
                                             "--api-key",
                                             "--served-model-name",
                                             "--max-model-len",
                                             "--max-num-seqs",
                                             "--max-num-batched-tokens",
                                             "--admit-prompt-tokens",
                                             "--prefill-step-ms",
                                             "--arrival-wait-ms",
                                             "--cache-memory",
                                             "--threads",
                                             "--dtype",
                                             "--kv-cache-dtype",
                                             "--block-size",
                                             "--max-queue",
                                             "--grammar-cache-mib",
                                             "--max-connections",
                                             "--http-threads",
                                             "--quantization",
                                             "--speculative-config",
                                             "--reasoning-parser",
                                             "--tool-call-parser",
                                             "--default-chat-template-kwargs",
                                             "--chat-template"};
const std::set<std::string> kServeFlags = {"--help", "--metrics-public", "--enable-auto-tool-choice"};

int usage(Result<Args>& args) {
    std::fprintf(
        stderr,
        "usage: gdn serve --model DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY]\n"
        "                 [--served-model-name NAME] [--max-model-len 4096] [--max-num-seqs 16]\n"
        "                 [--max-num-batched-tokens 512] [--admit-prompt-tokens 128] [--prefill-step-ms "
        "200]\n"
        "                 [--arrival-wait-ms 10]\n"
        "                 [--cache-memory MiB (1024)] [--threads N]\n"
        "                 [--dtype bf16|f32] [--kv-cache-dtype f32|bf16] [--quantization "
        "int8|int4|int4-sym] [--block-size 16]\n"
        "                 [--max-queue 1024] [--max-connections 1024] [--http-threads 4] "
        "[--metrics-public]\n"
        "                 [--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 2}']\n"
        "                 [--no-enable-prefix-caching] [--prefix-cache-memory MiB (1024)]\n"
        "                 [--prefix-snapshot-interval 1024]\n"
        "                 [--chat-template FILE] [--reasoning-parser auto|qwen3|none] "
        "[--tool-call-parser auto|qwen3_coder|hermes|none]\n"
        "                 [--default-chat-template-kwargs '{\"enable_thinking\": false}'] "
        "[--grammar-cache-mib 256]\n"
        "  Output parsers (vLLM's names; auto: read from the chat template): <think>...</think> becomes\n"
        "  reasoning_content, tool calls become tool_calls whenever a request has tools\n"
        "  (--enable-auto-tool-choice is accepted for vLLM compatibility and changes nothing).\n"
        "  --speculative-config: vLLM's JSON; methods mtp (qwen3_next_mtp) and ngram "
        "(prompt_lookup_min/max).\n"
        "  Prefix caching (on by default): KV blocks shared by content and GDN state snapshots at "
        "message,\n"
        "  prompt and generation ends and every --prefix-snapshot-interval prompt tokens, in\n"
        "  --prefix-cache-memory beside --cache-memory; a request prefills only what follows its "
        "longest\n"
        "  cached prefix.\n"
        "  --max-queue: requests admitted beyond --max-num-seqs; more get 503 with Retry-After.\n"
        "  --grammar-cache-mib: compiled structured-output grammars (schemas, forced tool calls) kept for\n"
        "  requests that send the same constraint again, least recently used out (0: none kept).\n"
        "  --admit-prompt-tokens: a step starts waiting prompts while their tokens in it stay within "
        "this\n"
        "  (the first always starts; 0: no limit), so a burst gets first tokens a prompt or two per "
        "step.\n"
        "  --prefill-step-ms: while requests decode, a step prefills only as many prompt tokens as this\n"
        "  many ms compute at the measured rate (at least 64; 0: no limit), so a long prompt does not\n"
        "  stretch the running requests' time per token.\n"
        "  --arrival-wait-ms: after a step that ended requests, wait up to this long (and at most a "
        "quarter\n"
        "  of that step) for new requests before the next step, so a client that sends its next request\n"
        "  as soon as one ends joins that step instead of waiting through it (0: never wait).\n"
        "  With --api-key, /metrics needs the key too unless --metrics-public; /health is always open.\n"
        "  Endpoints: POST /v1/completions, /v1/chat/completions (stream: true for SSE), GET "
        "/v1/models,\n"
        "  /health, /metrics (Prometheus), POST /tokenize, /detokenize. SIGINT/SIGTERM shut down "
        "cleanly.\n");
    if (!args) std::fprintf(stderr, "gdn serve: %s\n", args.message().c_str());
    return args && args->has("--help") ? 0 : 2;
}

int fail(const std::string& what, int code) {
    std::fprintf(stderr, "gdn serve: %s\n", what.c_str());
    return code;
}

// What the options ask for, every one checked before anything loads: a bad option costs no model load.
struct ServePlan {
    int threads = 1;
    std::string chat_template;  // --chat-template's text ("": the checkpoint's)
    EngineConfig engine;
    ServerConfig server;
};

Result<ServePlan> plan_from_args(const Args& a) {
    auto port = a.get_int("--port", 8000), mml = a.get_int("--max-model-len", 4096),
         mns = a.get_int("--max-num-seqs", 16), mnbt = a.get_int("--max-num-batched-tokens", 512),
         apt = a.get_int("--admit-prompt-tokens", 128), psm = a.get_int("--prefill-step-ms", 200),
         awm = a.get_int("--arrival-wait-ms", kServeArrivalWaitMs), mem = a.get_int("--cache-memory", 1024),
         threads = a.get_int("--threads", default_thread_count()), bs = a.get_int("--block-size", 16),
         mq = a.get_int("--max-queue", 1024), mc = a.get_int("--max-connections", 1024),
         ht = a.get_int("--http-threads", 4), gcm = a.get_int("--grammar-cache-mib", 256);
    for (auto* r : {&port, &mml, &mns, &mnbt, &apt, &psm, &awm, &mem, &threads, &bs, &mq, &mc, &ht, &gcm})
        if (!*r) return r->status();
    if (*port < 0 || *port > 65535 || *mem < 1 || *threads < 1 || *apt < 0 || *apt > (1 << 30) || *psm < 0 ||
        *psm > 3600000 || *awm < 0 || *awm > 1000 || *mq < 0 || *mq > (1 << 20) || *mc < 1 ||
        *mc > (1 << 20) || *ht < 1 || *ht > 256 || *gcm < 0 || *gcm > (1 << 20)) {
        return Status::error(
            "--port must be 0..65535, --cache-memory and --threads positive, "
            "--admit-prompt-tokens "
            ">= 0, --prefill-step-ms 0..3600000, --arrival-wait-ms 0..1000, --max-queue 0..1048576, "
            "--max-connections 1..1048576, --http-threads 1..256, --grammar-cache-mib 0..1048576");
    }
    // Parser names are checked before the model loads (the template only decides "auto").
    GDN_RETURN_IF_ERROR(
        choose_parsers("", a.get("--reasoning-parser", "auto"), a.get("--tool-call-parser", "auto"))
            .status());
    ServePlan plan;
    plan.threads = static_cast<int>(*threads);
    if (a.has("--chat-template")) {
        auto t = read_text_file(a.get("--chat-template"));
        if (!t || t->empty())
            return Status::error(std::string("--chat-template: ") + (t ? "the file is empty" : t.message()));
        plan.chat_template = *t;
    }
    EngineConfig& ec = plan.engine;
    ec.max_model_len = static_cast<int>(*mml);
    ec.max_num_seqs = static_cast<int>(*mns);
    ec.max_num_batched_tokens = static_cast<int>(*mnbt);
    ec.admit_prompt_tokens = static_cast<int>(*apt);
    ec.prefill_step_ms = static_cast<int>(*psm);
    ec.cache_memory = static_cast<size_t>(*mem) << 20;
    ec.block_size = static_cast<int>(*bs);
    ec.prefault_memory = true;  // a server's first requests should not pay for page faults
    ec.bf16 = a.get("--dtype", "bf16") == "bf16";
    GDN_ASSIGN_OR_RETURN(ec.kv_dtype, kv_cache_dtype(a, ec.bf16));
    GDN_ASSIGN_OR_RETURN(ec.speculative, speculative_config(a));
    GDN_RETURN_IF_ERROR(apply_prefix_cache_options(a, &ec));
    ServerConfig& sc = plan.server;
    sc.host = a.get("--host", "127.0.0.1");
    sc.port = static_cast<int>(*port);
    sc.api_key = a.get("--api-key");
    sc.metrics_public = a.has("--metrics-public");
    sc.max_queue = static_cast<int>(*mq);
    sc.arrival_wait_ms = static_cast<double>(*awm);
    sc.max_connections = static_cast<size_t>(*mc);
    sc.http_threads = static_cast<int>(*ht);
    sc.grammar_cache_bytes = static_cast<size_t>(*gcm) << 20;
    std::string name = a.get("--served-model-name");
    if (name.empty()) {
        name = a.get("--model");
        while (!name.empty() && name.back() == '/') name.pop_back();
        if (auto p = name.rfind('/'); p != std::string::npos) name = name.substr(p + 1);
    }
    sc.served_model_name = name;
    sc.reasoning_parser = a.get("--reasoning-parser", "auto");
    sc.tool_call_parser = a.get("--tool-call-parser", "auto");
    if (a.has("--default-chat-template-kwargs")) {
        auto kw = parse_json(a.get("--default-chat-template-kwargs"), "--default-chat-template-kwargs");
        if (!kw || !kw->is_object())
            return Status::error(std::string("--default-chat-template-kwargs must be a JSON object") +
                                 (kw ? "" : ": " + kw.message()));
        sc.default_chat_template_kwargs = *kw;
    }
    return plan;
}

// Runs the server until SIGINT / SIGTERM (handled by one thread with sigwait; `sigs` are blocked in
// every other thread).
int serve_until_signal(OpenAIServer& server, sigset_t sigs) {
    std::thread watcher([&] {
        int sig = 0;
        sigwait(&sigs, &sig);
        GDN_LOG_INFO("signal %d: shutting down (in-flight requests are aborted)", sig);
        server.stop();
    });
    Status st = server.run();
    // run() returned after stop(), or for another reason: release the watcher either way.
    pthread_kill(watcher.native_handle(), SIGTERM);
    watcher.join();
    if (!st) return fail(st.message(), 1);
    GDN_LOG_INFO("server stopped");
    return 0;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
    std::set<std::string> options = kServeOptions, flags = kServeFlags;
    options.insert(kPrefixCacheOptions.begin(), kPrefixCacheOptions.end());
    flags.insert(kPrefixCacheFlags.begin(), kPrefixCacheFlags.end());
    auto args = Args::parse(argc, argv, options, flags);
    if (!args || args->has("--help") || !args->has("--model")) return usage(args);
    auto plan = plan_from_args(*args);
    if (!plan) return fail(plan.message(), 2);
    if (Status ks = configure_kernels_from_env(); !ks) return fail(ks.message(), 2);
    // Signals are handled by one thread (sigwait); every other thread blocks them.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    signal(SIGPIPE, SIG_IGN);

    set_global_threads(plan->threads);
    auto model = load_model_for_tool(*args);
    if (!model) return fail(model.message(), 1);
    auto tok = load_model_tokenizer(args->get("--model"), plan->chat_template);
    if (!tok) return fail(tok.message(), 1);
    log_kernel_selection();
    auto engine = Engine::create(std::shared_ptr<const Model>(std::move(*model)), *tok, plan->engine);
    if (!engine) return fail(engine.message(), 1);
    OpenAIServer server(std::move(*engine), *tok, plan->server);
    return serve_until_signal(server, sigs);
}

}  // namespace gdn
