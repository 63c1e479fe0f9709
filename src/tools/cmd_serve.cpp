// gdn serve: the OpenAI-compatible server.
#include <signal.h>

#include <cstdio>
#include <thread>

#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "ops/dispatch.h"
#include "server/arrival_wait.h"
#include "server/openai_server.h"
#include "server/output_parser.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/model_loading.h"

namespace gdn {

int cmd_serve(int argc, char** argv) {
    std::set<std::string> options = {"--model",
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
                                     "--max-connections",
                                     "--http-threads",
                                     "--quantization",
                                     "--speculative-config",
                                     "--reasoning-parser",
                                     "--tool-call-parser",
                                     "--default-chat-template-kwargs",
                                     "--chat-template"};
    std::set<std::string> flags = {"--help", "--metrics-public", "--enable-auto-tool-choice"};
    options.insert(kPrefixCacheOptions.begin(), kPrefixCacheOptions.end());
    flags.insert(kPrefixCacheFlags.begin(), kPrefixCacheFlags.end());
    auto args = Args::parse(argc, argv, options, flags);
    if (!args || args->has("--help") || !args->has("--model")) {
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
            "                 [--default-chat-template-kwargs '{\"enable_thinking\": false}']\n"
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
    auto port = args->get_int("--port", 8000), mml = args->get_int("--max-model-len", 4096),
         mns = args->get_int("--max-num-seqs", 16), mnbt = args->get_int("--max-num-batched-tokens", 512),
         apt = args->get_int("--admit-prompt-tokens", 128), psm = args->get_int("--prefill-step-ms", 200),
         awm = args->get_int("--arrival-wait-ms", kServeArrivalWaitMs),
         mem = args->get_int("--cache-memory", 1024),
         threads = args->get_int("--threads", default_thread_count()), bs = args->get_int("--block-size", 16),
         mq = args->get_int("--max-queue", 1024), mc = args->get_int("--max-connections", 1024),
         ht = args->get_int("--http-threads", 4);
    for (auto* r : {&port, &mml, &mns, &mnbt, &apt, &psm, &awm, &mem, &threads, &bs, &mq, &mc, &ht})
        if (!*r) {
            std::fprintf(stderr, "gdn serve: %s\n", r->message().c_str());
            return 2;
        }
    if (*port < 0 || *port > 65535 || *mem < 1 || *threads < 1 || *apt < 0 || *apt > (1 << 30) || *psm < 0 ||
        *psm > 3600000 || *awm < 0 || *awm > 1000 || *mq < 0 || *mq > (1 << 20) || *mc < 1 ||
        *mc > (1 << 20) || *ht < 1 || *ht > 256) {
        std::fprintf(stderr,
                     "gdn serve: --port must be 0..65535, --cache-memory and --threads positive, "
                     "--admit-prompt-tokens "
                     ">= 0, --prefill-step-ms 0..3600000, --arrival-wait-ms 0..1000, --max-queue 0..1048576, "
                     "--max-connections 1..1048576, --http-threads 1..256\n");
        return 2;
    }
    // Parser names are checked before the model loads (the template only decides "auto").
    if (auto pc = choose_parsers("", args->get("--reasoning-parser", "auto"),
                                 args->get("--tool-call-parser", "auto"));
        !pc) {
        std::fprintf(stderr, "gdn serve: %s\n", pc.message().c_str());
        return 2;
    }
    if (Status ks = configure_kernels_from_env(); !ks) {
        std::fprintf(stderr, "gdn serve: %s\n", ks.message().c_str());
        return 2;
    }
    // Signals are handled by one thread (sigwait); every other thread blocks them.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    signal(SIGPIPE, SIG_IGN);

    set_global_threads(static_cast<int>(*threads));
    const std::string dir = args->get("--model");
    auto model = load_model_for_tool(*args);
    if (!model) {
        std::fprintf(stderr, "gdn serve: %s\n", model.message().c_str());
        return 1;
    }
    std::string chat_template;
    if (args->has("--chat-template")) {
        auto t = read_text_file(args->get("--chat-template"));
        if (!t || t->empty()) {
            std::fprintf(stderr, "gdn serve: --chat-template: %s\n",
                         t ? "the file is empty" : t.message().c_str());
            return 2;
        }
        chat_template = *t;
    }
    auto tok = Tokenizer::load(dir, chat_template);
    if (!tok) {
        std::fprintf(stderr, "gdn serve: %s\n", tok.message().c_str());
        return 1;
    }
    log_kernel_selection();
    EngineConfig ec;
    ec.max_model_len = static_cast<int>(*mml);
    ec.max_num_seqs = static_cast<int>(*mns);
    ec.max_num_batched_tokens = static_cast<int>(*mnbt);
    ec.admit_prompt_tokens = static_cast<int>(*apt);
    ec.prefill_step_ms = static_cast<int>(*psm);
    ec.cache_memory = static_cast<size_t>(*mem) << 20;
    ec.block_size = static_cast<int>(*bs);
    ec.prefault_memory = true;  // a server's first requests should not pay for page faults
    ec.bf16 = args->get("--dtype", "bf16") == "bf16";
    auto kv = kv_cache_dtype(*args, ec.bf16);
    if (!kv) {
        std::fprintf(stderr, "gdn serve: %s\n", kv.message().c_str());
        return 2;
    }
    ec.kv_dtype = *kv;
    auto spec = speculative_config(*args);
    if (!spec) {
        std::fprintf(stderr, "gdn serve: %s\n", spec.message().c_str());
        return 2;
    }
    ec.speculative = *spec;
    if (Status ps = apply_prefix_cache_options(*args, &ec); !ps) {
        std::fprintf(stderr, "gdn serve: %s\n", ps.message().c_str());
        return 2;
    }
    auto engine = Engine::create(std::shared_ptr<const Model>(std::move(*model)), *tok, ec);
    if (!engine) {
        std::fprintf(stderr, "gdn serve: %s\n", engine.message().c_str());
        return 1;
    }
    ServerConfig sc;
    sc.host = args->get("--host", "127.0.0.1");
    sc.port = static_cast<int>(*port);
    sc.api_key = args->get("--api-key");
    sc.metrics_public = args->has("--metrics-public");
    sc.max_queue = static_cast<int>(*mq);
    sc.arrival_wait_ms = static_cast<double>(*awm);
    sc.max_connections = static_cast<size_t>(*mc);
    sc.http_threads = static_cast<int>(*ht);
    std::string name = args->get("--served-model-name");
    if (name.empty()) {
        name = dir;
        while (!name.empty() && name.back() == '/') name.pop_back();
        if (auto p = name.rfind('/'); p != std::string::npos) name = name.substr(p + 1);
    }
    sc.served_model_name = name;
    sc.reasoning_parser = args->get("--reasoning-parser", "auto");
    sc.tool_call_parser = args->get("--tool-call-parser", "auto");
    if (args->has("--default-chat-template-kwargs")) {
        auto kw = parse_json(args->get("--default-chat-template-kwargs"), "--default-chat-template-kwargs");
        if (!kw || !kw->is_object()) {
            std::fprintf(stderr, "gdn serve: --default-chat-template-kwargs must be a JSON object%s%s\n",
                         kw ? "" : ": ", kw ? "" : kw.message().c_str());
            return 2;
        }
        sc.default_chat_template_kwargs = *kw;
    }
    OpenAIServer server(std::move(*engine), *tok, sc);
    std::thread watcher([&] {
        int sig = 0;
        sigwait(&sigs, &sig);
        GDN_LOG_INFO("signal %d: shutting down (in-flight requests are aborted)", sig);
        server.stop();
    });
    Status st = server.run();
    if (!st) {
        std::fprintf(stderr, "gdn serve: %s\n", st.message().c_str());
        pthread_kill(watcher.native_handle(), SIGTERM);
        watcher.join();
        return 1;
    }
    // run() returned after stop(): if it stopped for another reason, release the watcher.
    pthread_kill(watcher.native_handle(), SIGTERM);
    watcher.join();
    GDN_LOG_INFO("server stopped");
    return 0;
}

}  // namespace gdn
