// The engine's record of one request (private to engine*.cpp): what it asked for, what it produced, and
// the state its sampler, detokenizer and MTP drafts carry between steps.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/huge_page_allocator.h"
#include "engine/engine.h"
#include "structured/token_mask.h"

namespace gdn {

struct Engine::Request {
    std::shared_ptr<SchedRequest> sched;
    SamplingParams params;
    SamplerState sampler;
    std::vector<int32_t> prompt;  // a copy for the repetition penalty
    std::vector<int32_t> output;
    std::unique_ptr<StreamDecoder> decoder;
    std::unique_ptr<TokenConstraint> constraint;  // structured outputs: masks its logits, reads its tokens
    std::string text;                             // generated text so far (decoded)
    size_t emitted = 0;                           // bytes of `text` already returned
    size_t max_stop = 0;                          // longest stop string
    FinishReason finish = FinishReason::NONE;
    // params.prompt_logprobs: one entry per prompt token computed so far (SamplingParams says the form).
    std::vector<std::vector<TokenLogprob>> prompt_logprobs;
    // MTP: its KV holds slots [0, mtp_done); mtp_hidden holds h_t of the following slots (rows of H) that
    // the MTP layer has yet to see.
    int64_t mtp_done = 0;
    std::vector<float, HugePageAllocator<float>> mtp_hidden;
    bool mtp_stale = false;  // rows were dropped (Engine::kMaxPendingMtpRows): no more drafts
};

}  // namespace gdn
