// One admitted request's link between an HTTP worker (which formats its answer) and the engine thread
// (which fills it and calls wake()).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/engine.h"
#include "server/completion_request.h"
#include "server/http_server.h"

namespace gdn {

struct Job {
    std::vector<int32_t> ids;
    std::vector<int64_t> message_ends;  // chat: where the prefix cache keeps states
    SamplingParams params;
    Waker wake;
    std::mutex mu;
    std::deque<RequestOutput> outs;  // RequestOutput::id tells the sample (engine_ids)
    bool accepted = false, done = false;
    std::optional<ApiError> error;  // the engine refused it, or the server is shutting down
    int64_t engine_id = -1;         // the first sample's
    int n = 1;                      // samples (OpenAI's n); the engine ids in choice order
    std::vector<int64_t> engine_ids;
    int finished = 0;  // samples that ended
    std::atomic<bool> cancelled{false};
    double t_arrival = 0, t_first = 0, t_last = 0;
};

}  // namespace gdn
