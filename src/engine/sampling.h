// Sampling parameters (the OpenAI set plus vLLM's extras) and the sampler applied to one logits row.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "core/status.h"
#include "structured/grammar.h"

namespace gdn {

struct SamplingParams {
    float temperature = 1.0f;         // 0: greedy
    float top_p = 1.0f;               // (0, 1]
    int top_k = 0;                    // 0 or -1: off
    float min_p = 0.0f;               // [0, 1]
    float repetition_penalty = 1.0f;  // > 0; 1: off (prompt and output tokens)
    float presence_penalty = 0.0f;    // [-2, 2] (output tokens)
    float frequency_penalty = 0.0f;   // [-2, 2] (output tokens)
    int max_tokens = 16;
    int min_tokens = 0;  // end-of-sequence ids are masked until this many tokens
    std::vector<int32_t> stop_token_ids;
    std::vector<std::string> stop;  // stop strings, matched on the detokenized text (not emitted)
    bool ignore_eos = false;
    std::optional<uint64_t> seed;  // per-request: same seed, same output, whatever the batch
    int logprobs = -1;             // -1: none; n >= 0: the sampled token's logprob + top-n alternatives
    // -1: none; n >= 0: every prompt token's logprob under the model (raw logits, temperature 1) + the
    // top-n alternatives at its position; the first token's is NaN (nothing precedes it). Returned in
    // the output that carries the first generated token; the request then takes no prefix-cache hit.
    int prompt_logprobs = -1;
    bool skip_special_tokens = true;
    // Stop strings that stay in the text whatever include_stop_str_in_output says: the server's own (the
    // closing tag of a tool call when parallel_tool_calls is false).
    std::vector<std::string> stop_inclusive;
    bool include_stop_str_in_output =
        false;  // vLLM: a matched stop string ends the text instead of being cut
    // OpenAI logit_bias: added to the token's logit before penalties, masks and sampling ([-100, 100]).
    std::vector<std::pair<int32_t, float>> logit_bias;
    // Structured outputs: the output must be a sentence of this grammar (token_mask.h); with
    // grammar_after_reasoning, only what follows "</think>" (the prompt opened a think block).
    std::shared_ptr<const Grammar> grammar;
    bool grammar_after_reasoning = false;

    // Clear errors for impossible values (negative temperature, top_p outside (0, 1], ...).
    Status validate(int32_t vocab_size) const;
    bool greedy() const { return temperature == 0.0f; }
};

struct TokenLogprob {
    int32_t token;
    float logprob;
};

// lp = {chosen's log-softmax, then the top-n tokens' (ties: the lower id first)} of one logits row.
// `order`: scratch for the top-n sort.
void token_logprobs(const float* logits, int32_t V, int32_t chosen, int n, std::vector<TokenLogprob>* lp,
                    std::vector<int32_t>* order);

// Per-request sampling state: its RNG and its output-token counts (for the penalties).
struct SamplerState {
    std::mt19937_64 rng;
    std::vector<int32_t> out_counts;  // [V] (allocated on the first penalty use)
};

class Sampler {
  public:
    // ctx: where the greedy argmax over the vocabulary runs (the engine's model's context).
    explicit Sampler(const ExecContext& ctx = ExecContext::process()) : ctx_(ctx) {}

    // Samples from `logits` ([V], modified in place by penalties and masks). `prompt` and `output` are
    // the request's tokens so far; `eos` are the ids masked while output.size() < min_tokens.
    // Fills `lp` (when params.logprobs >= 0) with the sampled token first, then the top-n.
    // Equals prepare(), draw(), logprobs().
    int32_t sample(float* logits, int32_t V, const SamplingParams& p, SamplerState& st,
                   const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                   const std::vector<int32_t>& eos, std::vector<TokenLogprob>* lp);

    // The steps of sample(), for verifying speculative drafts against the target distribution:
    // prepare() applies penalties and masks to `logits` (kept until the next prepare) and builds the
    // distribution that sample() draws from (temperature, top-k, top-p, min-p; greedy: the argmax).
    void prepare(float* logits, int32_t V, const SamplingParams& p, SamplerState& st,
                 const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                 const std::vector<int32_t>& eos);
    // Probability of token t under the prepared distribution (greedy: 1 for the argmax, else 0).
    double prob(int32_t t) const;
    // One draw from the prepared distribution, leaving out token `exclude` when >= 0 (the normalised
    // residual p - p(d) of a rejected deterministic draft d). One uniform from st.rng (none when greedy).
    int32_t draw(SamplerState& st, int32_t exclude = -1);
    // The chosen token's logprob and the top-n of the prepared (penalised) logits at temperature 1.
    void logprobs(int32_t chosen, std::vector<TokenLogprob>* lp);

  private:
    std::vector<int32_t> idx_, order_;
    std::vector<float> probs_;
    std::vector<uint8_t> seen_;
    // The prepared distribution: candidates idx_[0, n_) with weights probs_[.], summing to total_.
    const float* logits_ = nullptr;
    int32_t V_ = 0, n_ = 0, greedy_id_ = -1, logprobs_n_ = -1;
    double total_ = 0;
    ExecContext ctx_;
};

}  // namespace gdn
