// The speculative cost model: how many drafts each decode step verifies, from this machine's and model's
// observed step times and acceptance (engine_speculative.cpp asks it every step).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gdn {

// How many drafts a decode step of B sequences should verify, from what this machine and model showed:
// the step time T(B, k) (verify forward plus drafting, an average per batch-size bucket and k) and the
// per-position acceptance a_i (recent average). It picks the k that maximises the expected tokens per
// second B (1 + a_0 + a_0 a_1 + ...) / T(B, k); k = 0 is plain decoding, so speculation is used only
// where it was faster. Plain decoding is timed first; another k is timed only while its rate at a floor
// of its cost (the plain step plus its drafting) would beat the best timed rate by kTryMargin, so with
// low acceptance the costly cells are never tried. Every kExplorePeriod steps of a bucket plain decoding
// or a neighbour of the best k is timed again; when plain decoding is best, one sequence drafts one token
// instead (a probe of the acceptance), at doubling intervals while plain keeps winning. A cell's time is
// the lower median of its recent samples, each from a step that ran the same k (and batch bucket) as the
// step before it: a step right after a change of k runs with the other k's working set in the caches
// (docs/perf.md, behind the constants), so an explored or newly tried k runs kSwitchSteps steps and only
// the later ones are timed.
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
    // "B=1: k=3 (<tokens per step>, <step time>) ..." for the logs and bench.
    std::string describe() const;
    static int bucket(int batch);
    // What the choices rest on, for /metrics: the acceptance estimate per draft position, one drafting
    // forward's seconds, and the step seconds per batch bucket (bucket_name) and k (0: unmeasured); and
    // what they are: per bucket the k with the best measured rate (-1: none decided yet), the k steps
    // run outside exploration, tries and probes.
    struct Snapshot {
        std::vector<double> acceptance;
        double draft_seconds = 0;
        std::vector<std::vector<double>> step_seconds;  // [bucket][k]
        std::vector<int> best_k;                        // [bucket]
        std::string decisions() const;                  // "B=1 k=0, B=5-8 k=2"
    };
    Snapshot snapshot() const;
    static const char* bucket_name(int b);

  private:
    int max_k_ = 0;
    std::vector<double> step_s_[kBuckets];  // [k + 1]: step seconds (recent lower median); 0 = unmeasured
    std::vector<std::vector<double>> recent_[kBuckets];  // [k + 1]: the last samples
    std::vector<int> samples_[kBuckets];                 // [k + 1]: measurements so far
    int64_t steps_[kBuckets] = {};
    int best_[kBuckets] = {};  // the last choose()'s best measured k per bucket (-1: none yet)
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
