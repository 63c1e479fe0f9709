// Speculative decoding, the parts that need no model: vLLM's --speculative-config JSON, the n-gram
// (prompt lookup) proposer and the acceptance counters. The cost model that decides how many drafts a
// step verifies is in spec_cost_model.h; the draft-verify loop in engine_speculative.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "core/status.h"
#include "engine/spec_cost_model.h"
#include "ops/weight_format.h"

namespace gdn {

enum class SpecMethod { NONE, MTP, NGRAM };
const char* spec_method_name(SpecMethod m);

struct SpeculativeConfig {
    SpecMethod method = SpecMethod::NONE;
    int num_speculative_tokens = 0;  // k: drafts per sequence and step, at most
    int prompt_lookup_min = 0;       // n-gram: shortest suffix matched
    int prompt_lookup_max = 0;       // n-gram: longest suffix matched (tried first)
    // gdn's key "adaptive" (default true): the cost model picks k per step; false drafts k every step
    // (for measuring verify costs, and for tests).
    bool adaptive = true;
    // gdn's key "draft_head": "int8" (default) | "int4" (int4-k) | "int4-sym" | "none": the lm_head copy the
    // MTP drafts take their argmax from, in that format (none: the lm_head itself; see
    // LoadOptions::mtp_draft_head).
    std::optional<WeightFormat> draft_head = WeightFormat::Q8;
    // gdn's key "draft_layer": "int8" (default) | "int4" | "int4-sym" | "none": the scheme of the MTP layer's
    // matrices in a float model (none: the model's; see LoadOptions::mtp_layer).
    std::optional<WeightFormat> draft_layer = WeightFormat::Q8;
    bool enabled() const { return method != SpecMethod::NONE && num_speculative_tokens > 0; }
    bool uses_mtp() const { return enabled() && method == SpecMethod::MTP; }
    int max_drafts() const { return enabled() ? num_speculative_tokens : 0; }
    // Tokens one sequence's step may run when it verifies: its real token and up to k drafts (also the
    // logits rows it may ask for).
    int tokens_per_verify() const { return 1 + max_drafts(); }

    static constexpr int kMaxDrafts = 8;
    // '{"method": "mtp" | "qwen3_next_mtp" | "ngram", "num_speculative_tokens": k, "prompt_lookup_min": m,
    // "prompt_lookup_max": M, "adaptive": true}' (vLLM's keys and n-gram defaults: both 5 when neither is
    // given, else the one given). Unknown keys are an error, never ignored.
    static Result<SpeculativeConfig> parse(const std::string& json);
    std::string describe() const;
};

// Prompt lookup: the longest suffix of `tokens` (prompt_lookup_max down to prompt_lookup_min tokens) that
// occurred earlier in `tokens`; the up to k tokens that followed its most recent earlier occurrence are
// appended to *out. Nothing when no suffix recurs.
void ngram_propose(const std::vector<int32_t>& tokens, int min_n, int max_n, int k,
                   std::vector<int32_t>* out);

// Counters of drafts and acceptances, per draft position (position i: the (i+1)-th draft of a step,
// counted when the drafts before it were all accepted).
struct SpecCounters {
    int64_t verify_steps = 0;                      // sequence-steps that verified at least one draft
    int64_t drafted = 0, accepted = 0;             // draft tokens verified / accepted
    std::vector<int64_t> drafted_at, accepted_at;  // [k]
    void count(int n_drafted, int n_accepted);
    // 1 + accepted / verify_steps: tokens a verifying sequence-step yields.
    double mean_acceptance_length() const {
        return verify_steps ? 1.0 + double(accepted) / verify_steps : 1.0;
    }
};

}  // namespace gdn
