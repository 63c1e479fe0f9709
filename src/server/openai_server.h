// OpenAI-compatible HTTP server over HttpServer (event-driven, hard limits): worker threads parse,
// validate, template and tokenize a request, so everything that can be wrong with it is answered
// before its response starts and nothing heavy runs on the engine thread; one engine thread owns the
// model and steps. Streaming uses Server-Sent Events; a client that disconnects (streaming or not)
// aborts its request (its blocks and slot are freed within one step).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "util/json_file.h"

namespace gdn {

struct ServerConfig {
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string api_key;            // empty: no authentication (/health is always open)
    bool metrics_public = false;    // /metrics without the API key
    std::string served_model_name;  // the name /v1/models lists and requests must use
    size_t max_body_bytes = 8u << 20;
    int http_threads = 4;  // request-preparing workers (JSON, template, tokenizer); not per connection
    size_t max_connections = 1024;
    // Requests admitted beyond the engine's running ones (--max-num-seqs); more get 503 + Retry-After.
    int max_queue = 1024;
    // Output parsers (vLLM's names): auto reads them from the chat template; none leaves the text as content.
    std::string reasoning_parser = "auto", tool_call_parser = "auto";
    // --default-chat-template-kwargs: template variables every chat request gets unless it sets them.
    Json default_chat_template_kwargs = Json::object();
    // After a step that ended requests, wait up to this long for their clients' next requests before
    // starting the next step (server/arrival_wait.h; at most a quarter of the last step); 0 = never
    // (the default here, so tests step without timing; `gdn serve` uses kServeArrivalWaitMs).
    double arrival_wait_ms = 0;
    double header_timeout_s = 10, request_timeout_s = 60, idle_timeout_s = 15, write_timeout_s = 60;
    // Compiled grammars kept for the requests that send the same constraint again (--grammar-cache-mib;
    // structured/grammar_cache.h); 0 keeps none.
    size_t grammar_cache_bytes = size_t{256} << 20;
};

class OpenAIServer {
  public:
    OpenAIServer(std::unique_ptr<Engine> engine, std::shared_ptr<const Tokenizer> tok, ServerConfig cfg);
    ~OpenAIServer();
    // Binds, then serves until stop(); returns an error if the port cannot be bound.
    Status run();
    // Graceful shutdown (callable from a signal-watching thread): stop accepting, abort in-flight requests.
    void stop();
    int bound_port() const;

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace gdn
