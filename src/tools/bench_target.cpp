#include "tools/bench_target.h"
#include "engine/gguf_tokenizer.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>

#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "ops/dispatch.h"
#include "server/arrival_wait.h"
#include "server/sse_reader.h"
#include "tools/args.h"
#include "tools/model_loading.h"
#include "util/json_file.h"

namespace gdn {

BenchTarget::~BenchTarget() {
    if (server) {
        server->stop();
        server_thread.join();
    }
}

Result<std::unique_ptr<BenchTarget>> open_bench_target(const Args& a, const BenchSizing& size) {
    auto t = std::make_unique<BenchTarget>();
    t->model_name = a.get("--served-model-name");
    t->api_key = a.get("--api-key");
    if (a.has("--base-url")) {
        for (const char* f :
             {"--quantization", "--speculative-config", "--prefix-cache-memory", "--prefix-snapshot-interval",
              "--enable-prefix-caching", "--no-enable-prefix-caching"})
            if (a.has(f))
                return Status::error(
                    std::string(f) +
                    " applies to a local --model; the server at --base-url chose it when it started");
        std::string url = a.get("--base-url");
        const std::string scheme = "http://";
        if (url.rfind(scheme, 0) != 0) return Status::error("--base-url must start with http://");
        url = url.substr(scheme.size());
        const size_t slash = url.find('/');
        const std::string hp = url.substr(0, slash);
        t->prefix = slash == std::string::npos ? "/v1" : url.substr(slash);
        const size_t colon = hp.find(':');
        t->host = hp.substr(0, colon);
        t->port = colon == std::string::npos ? 80 : std::atoi(hp.c_str() + colon + 1);
        httplib::Client c(t->host, t->port);
        auto r = c.Get((t->prefix + "/models").c_str());
        if (!r || r->status != 200) return Status::error("cannot reach " + a.get("--base-url") + "/models");
        auto j = parse_json(r->body, "models");
        if (j && (*j)["data"].is_array() && !(*j)["data"].empty()) {
            if (t->model_name.empty()) t->model_name = (*j)["data"][0].value("id", "");
            t->vocab = (*j)["data"][0].value("vocab_size", t->vocab);
        }
        return t;
    }
    if (!a.has("--model")) return Status::error("serving mode needs --base-url URL or --model DIR");
    GDN_RETURN_IF_ERROR(configure_kernels_from_env());
    GDN_ASSIGN_OR_RETURN(long long threads, a.get_int("--threads", default_thread_count()));
    GDN_ASSIGN_OR_RETURN(long long mem, a.get_int("--cache-memory", 2048));
    if (threads < 1 || mem < 1) return Status::error("--threads and --cache-memory must be positive");
    set_global_threads(static_cast<int>(threads));
    GDN_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, load_model_for_tool(a));
    GDN_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tok, load_model_tokenizer(a.get("--model")));
    // Prompt ids the server accepts: below both the model's and the tokenizer's vocabulary (a random
    // checkpoint pairs a 248k embedding with a 151k tokenizer).
    t->vocab = std::min(model->config().vocab, tok->vocab_size());
    EngineConfig ec;
    ec.max_num_seqs = size.max_num_seqs;
    ec.max_model_len = size.max_model_len;
    ec.max_num_batched_tokens = std::max(512, ec.max_num_seqs + kPrefillChunkAlign);
    ec.cache_memory = static_cast<size_t>(mem) << 20;
    ec.prefault_memory = true;  // as gdn serve
    GDN_ASSIGN_OR_RETURN(ec.speculative, speculative_config(a));
    GDN_RETURN_IF_ERROR(apply_prefix_cache_options(a, &ec));
    GDN_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                         Engine::create(std::shared_ptr<const Model>(std::move(model)), tok, ec));
    ServerConfig sc;
    sc.port = 0;
    sc.served_model_name = t->model_name = "bench";
    sc.http_threads = ec.max_num_seqs + 8;
    sc.arrival_wait_ms = kServeArrivalWaitMs;  // as gdn serve
    t->server = std::make_unique<OpenAIServer>(std::move(engine), tok, sc);
    OpenAIServer* s = t->server.get();
    t->server_thread = std::thread([s] { s->run(); });
    for (int i = 0; i < 500 && s->bound_port() == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    t->port = s->bound_port();
    if (t->port == 0) return Status::error("the in-process server did not start");
    return t;
}

StreamOutcome post_stream(const BenchTarget& t, const std::string& path, const Json& body,
                          const std::function<void(const Json&)>& on_event) {
    StreamOutcome out;
    httplib::Client c(t.host, t.port);
    c.set_read_timeout(3600, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = t.prefix + path;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    if (!t.api_key.empty()) req.set_header("Authorization", "Bearer " + t.api_key);
    const auto t0 = std::chrono::steady_clock::now();
    SseReader sse;
    bool done = false;
    std::string head;  // the first bytes as sent: an error status carries a JSON body, not events
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
        if (head.size() < 4096) head.append(d, std::min(n, 4096 - head.size()));
        return sse.feed(d, n, [&](const std::string& ev) {
            if (ev == "[DONE]") {
                done = true;
                return true;
            }
            auto j = parse_json(ev, "chunk");
            if (!j) return true;
            if (j->contains("error")) {
                out.error = (*j)["error"].value("message", "error");
                return true;
            }
            on_event(*j);
            return true;
        });
    };
    auto res = c.send(req);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!res)
        out.error = "connection failed: " + httplib::to_string(res.error());
    else if (res->status != 200 && out.error.empty())
        out.error = strprintf("HTTP %d: %s", res->status, (res->body.empty() ? head : res->body).c_str());
    else if (out.error.empty() && !done)
        out.error = "the stream ended without [DONE]";
    return out;
}

}  // namespace gdn
