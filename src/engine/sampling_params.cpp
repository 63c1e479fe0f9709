// SamplingParams::validate apart from the sampler: the request validators (and their fuzz target) use
// it without linking the sampling kernels.
#include <cmath>

#include "core/log.h"
#include "engine/sampling.h"

namespace gdn {

Status SamplingParams::validate(int32_t V) const {
    auto bad = [](const std::string& m) { return Status::error(m); };
    if (!(temperature >= 0.0f) || !std::isfinite(temperature))
        return bad(strprintf("temperature must be >= 0 (got %g)", temperature));
    if (!(top_p > 0.0f && top_p <= 1.0f)) return bad(strprintf("top_p must be in (0, 1] (got %g)", top_p));
    if (top_k < -1) return bad(strprintf("top_k must be -1, 0 (off) or positive (got %d)", top_k));
    if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad(strprintf("min_p must be in [0, 1] (got %g)", min_p));
    if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
        return bad(strprintf("repetition_penalty must be > 0 (got %g)", repetition_penalty));
    if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
        return bad(strprintf("presence_penalty must be in [-2, 2] (got %g)", presence_penalty));
    if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
        return bad(strprintf("frequency_penalty must be in [-2, 2] (got %g)", frequency_penalty));
    if (max_tokens < 1) return bad(strprintf("max_tokens must be >= 1 (got %d)", max_tokens));
    if (min_tokens < 0 || min_tokens > max_tokens)
        return bad(strprintf("min_tokens must be in [0, max_tokens] (got %d, max_tokens %d)", min_tokens,
                             max_tokens));
    if (logprobs < -1 || logprobs > 20)
        return bad(strprintf("logprobs must be in [0, 20] (got %d)", logprobs));
    if (prompt_logprobs < -1 || prompt_logprobs > 20)
        return bad(strprintf("prompt_logprobs must be in [0, 20] (got %d)", prompt_logprobs));
    for (int32_t id : stop_token_ids)
        if (id < 0 || id >= V)
            return bad(strprintf("stop_token_ids: %d is not a token id (vocabulary %d)", id, V));
    for (const auto& s : stop)
        if (s.empty()) return bad("stop strings must not be empty");
    for (const auto& s : stop_inclusive)
        if (s.empty()) return bad("stop strings must not be empty");
    for (const auto& [id, bias] : logit_bias) {
        if (id < 0 || id >= V)
            return bad(strprintf("logit_bias: %d is not a token id (vocabulary %d)", id, V));
        if (!(bias >= -100.0f && bias <= 100.0f))
            return bad(strprintf("logit_bias values must be in [-100, 100] (got %g)", bias));
    }
    return Status::ok();
}

}  // namespace gdn
