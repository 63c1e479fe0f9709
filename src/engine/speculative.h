// Speculative decoding, the parts that need no model: vLLM's --speculative-config JSON, the n-gram
// (prompt lookup) proposer, the acceptance counters, and the measured cost model that decides how many
// drafts a step verifies. The draft-verify loop itself is in engine_speculative.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "core/status.h"
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

// How many drafts a decode step of B sequences should verify, from measurements on this machine and
// model: the step time T(B, k) (verify forward plus drafting, an average per batch-size bucket and k)
// and the per-position acceptance a_i (recent average). It picks the k that maximises the expected
// tokens per second B (1 + a_0 + a_0 a_1 + ...) / T(B, k); k = 0 is plain decoding, so speculation is
// used only where it measured faster. Plain decoding is measured first; another k is measured only while
// its rate at a floor of its cost (the plain step plus its drafting) would beat the best measured rate
// by kTryMargin, so with low acceptance the costly cells are never tried. Every kExplorePeriod steps of
// a bucket plain decoding or a neighbour of the best k is re-measured; when plain decoding is best, one
// sequence drafts one token instead (a probe of the acceptance), at doubling intervals while plain keeps
// winning. A cell's time is the lower median of its recent samples, each from a step that ran the same
// k (and batch bucket) as the step before it: a step right after a change of k runs with the other k's
// working set in the caches (on a cache-resident model a plain step after verify steps took 1.1 ms
// against 0.7 in a row), so an explored or newly tried k runs kSwitchSteps steps and only the later
// ones are timed.
class SpecCostModel {
  public:
    static constexpr int kBuckets = 7;  // B = 1, 2, 3-4, 5-8, 9-16, 17-32, 33+
    static constexpr int kExplorePeriod = 64;
    static constexpr int64_t kMaxExplorePeriod = 512;  // below Engine::kMaxPendingMtpRows
    // An unmeasured k is tried only if its optimistic rate beats the best measured one by this factor:
    // measuring a bad k costs whole steps at its price.
    static constexpr double kTryMargin = 1.25;
    // A k past a measured one is tried when its rate at an estimate from the measured costs is within
    // this factor of the best (choose() says why).
    static constexpr double kNearMargin = 0.97;
    static constexpr int kPlainFirst = 4;     // plain steps timed before anything else
    static constexpr int kInitialProbes = 4;  // acceptance probes at the start, at most ...
    static constexpr int kMinProbes = 2;      // ... and at least
    static constexpr int kSwitchSteps = 2;    // steps an explored or tried k runs (its first is not timed)

    explicit SpecCostModel(int max_k = 0) { reset(max_k); }
    void reset(int max_k);
    int choose(int batch);
    // The last choose() was an acceptance probe while plain decoding wins: draft 1 token for one
    // sequence only, and do not time the step as k = 1.
    bool probing() const { return probe_; }
    void observe_step(int batch, int k, double seconds);
    void observe_acceptance(int position, bool accepted);
    // Seconds of one drafting forward (one more draft token for every drafting sequence): with it a
    // verify of k drafts is known to cost at least T(B, 0) + k x that before it is ever measured.
    void observe_draft(double seconds);
    double acceptance(int position) const;
    double expected_tokens(int k) const;  // 1 + a_0 + a_0 a_1 + ... (k terms)
    // "B=1: k=3 (2.41 tok/step, 31.0 ms) ..." for the logs and bench.
    std::string describe() const;
    static int bucket(int batch);

  private:
    int max_k_ = 0;
    std::vector<double> step_s_[kBuckets];  // [k + 1]: step seconds (recent lower median); 0 = unmeasured
    std::vector<std::vector<double>> recent_[kBuckets];  // [k + 1]: the last samples
    std::vector<int> samples_[kBuckets];                 // [k + 1]: measurements so far
    int64_t steps_[kBuckets] = {};
    int64_t period_[kBuckets] = {}, next_explore_[kBuckets] = {};  // exploration schedule per bucket
    std::vector<double> acc_, seen_;  // per position: decayed accepted / reached counts
    int64_t first_drafts_seen_ = 0;   // drafts verified at position 0 so far (not decayed)
    bool probe_ = false;
    double draft_s_ = 0;                  // EMA of observe_draft()
    int last_bucket_ = -1, last_k_ = -1;  // the last timed step's (or -1: the last step was not timed)
    int run_bucket_ = -1, run_k_ = 0, run_left_ = 0;  // an explored or tried k's remaining steps
    int run(int b, int k);                            // starts kSwitchSteps steps of k in bucket b: returns k
};

}  // namespace gdn
