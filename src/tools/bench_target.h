// The server a serving benchmark talks to: one at --base-url, or an in-process one on --model (an
// engine sized for the benchmark, with the tools' engine flags). One implementation for the random-
// dataset mode (cmd_bench_serve.cpp) and the conversation modes (cmd_bench_prefix.cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"
#include "server/openai_server.h"
#include "util/json_file.h"

namespace gdn {

class Args;

struct BenchTarget {
    std::string host = "127.0.0.1", prefix = "/v1", model_name, api_key;
    int port = 0;
    int32_t vocab = 1000;
    std::unique_ptr<OpenAIServer> server;  // in-process only
    std::thread server_thread;
    ~BenchTarget();
};

// What an in-process engine must hold.
struct BenchSizing {
    int max_num_seqs = 1;
    int max_model_len = 4096;
};

// Errors say what was wrong (an unreachable --base-url, flags that only apply to a local --model, ...).
Result<std::unique_ptr<BenchTarget>> open_bench_target(const Args& a, const BenchSizing& size);

// POSTs a streaming request (body with "stream": true) to the target's prefix + path and hands every SSE
// event but [DONE] to on_event, parsed, as it arrives. error: the server's error message, the HTTP
// status or the connection failure; "" when the stream ended with [DONE].
struct StreamOutcome {
    std::string error;
    double seconds = 0;  // until the response ended
};
StreamOutcome post_stream(const BenchTarget& t, const std::string& path, const Json& body,
                          const std::function<void(const Json&)>& on_event);

}  // namespace gdn
