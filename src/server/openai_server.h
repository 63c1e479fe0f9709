// OpenAI-compatible HTTP server: HTTP threads only parse and enqueue; one engine thread owns the model
// and steps. Streaming uses Server-Sent Events; a client that disconnects mid-stream aborts its request
// (its blocks and slot are freed within one step).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "engine/engine.h"

namespace gdn {

struct ServerConfig {
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string api_key;             // empty: no authentication
    std::string served_model_name;   // the name /v1/models lists and requests must use
    size_t max_body_bytes = 8u << 20;
    int http_threads = 16;
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
