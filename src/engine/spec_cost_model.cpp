#include "engine/spec_cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/log.h"

namespace gdn {

namespace {
constexpr double kEma = 0.1;             // weight of a new draft-step time
constexpr int kWindow = 8;               // step-time samples kept per (bucket, k)
constexpr double kDecay = 0.995;         // per observation, for the acceptance counts (~200 recent drafts)
constexpr double kPriorSeen = 1.0;       // weight of position 0's acceptance prior (0.5), in drafts
constexpr double kPriorSeenLater = 4.0;  // weight of a later position's prior (the position before it)
}  // namespace

void SpecCostModel::reset(int max_k) {
    max_k_ = max_k;
    for (auto& v : step_s_) v.assign(max_k + 1, 0.0);
    for (auto& v : samples_) v.assign(max_k + 1, 0);
    for (auto& v : recent_) {
        v.assign(max_k + 1, {});
        for (auto& ring : v) ring.reserve(kWindow);  // no allocation in a step
    }
    for (auto& s : steps_) s = 0;
    for (auto& k : best_) k = -1;
    for (auto& p : period_) p = kExplorePeriod / 2;
    for (auto& n : next_explore_) n = kExplorePeriod;
    draft_s_ = 0;
    first_drafts_seen_ = 0;
    last_bucket_ = last_k_ = run_bucket_ = -1;
    run_left_ = 0;
    acc_.assign(max_k, 0.0);
    seen_.assign(max_k, 0.0);
}

int SpecCostModel::bucket(int batch) {
    int b = 0;
    for (int cap = 1; b < kBuckets - 1 && batch > cap; cap *= 2) ++b;
    return b;
}

// Position i's acceptance with a prior: 0.5 worth kPriorSeen drafts for position 0, position i-1's worth
// kPriorSeenLater for the others: a position rarely reached is assumed about as good as the one before
// it, and one tried k's first one or two drafts there (a single rejection read 0.34 for a true 0.75 and
// kept k = 3 from being tried) do not decide it.
double SpecCostModel::acceptance(int i) const {
    if (i >= max_k_) return 0.0;
    const double prior = i == 0 ? 0.5 : acceptance(i - 1);
    const double w = i == 0 ? kPriorSeen : kPriorSeenLater;
    return (acc_[i] + prior * w) / (seen_[i] + w);
}

double SpecCostModel::expected_tokens(int k) const {
    double e = 1.0, reach = 1.0;
    for (int i = 0; i < k; ++i) {
        reach *= acceptance(i);
        e += reach;
    }
    return e;
}

int SpecCostModel::run(int b, int k) {
    run_bucket_ = b;
    run_k_ = k;
    run_left_ = kSwitchSteps - 1;
    return k;
}

int SpecCostModel::choose(int batch) {
    if (probe_) last_k_ = -1;  // the last step was a probe, not timed: the next one is not "in a row"
    probe_ = false;
    if (max_k_ == 0) return 0;
    const int b = bucket(batch);
    if (run_left_ > 0 && run_bucket_ == b) {  // an explored or tried k's next step
        --run_left_;
        return run_k_;
    }
    run_left_ = 0;
    const std::vector<double>& t = step_s_[b];
    const std::vector<int>& n = samples_[b];
    if (n[0] < kPlainFirst) return 0;  // plain decoding first: the baseline every other k is judged against
    // Then the acceptance, from one-sequence probes (at B = 1 a probe is a k = 1 step), kInitialProbes of
    // them unless the first ones already show that drafting cannot pay: even at its cheapest (the plain
    // step plus one draft step) k = 1 would lose to plain decoding at the acceptance seen so far. Each
    // probe costs a draft step (a fifth to a third of a plain step at the 0.8B shape) and the MTP
    // catch-up: with acceptance ~0 the probes past the second only cost.
    if (first_drafts_seen_ < kInitialProbes) {
        const bool hopeless = first_drafts_seen_ >= kMinProbes && draft_s_ > 0 &&
                              expected_tokens(1) / (t[0] + draft_s_) < expected_tokens(0) / t[0];
        if (!hopeless) {
            probe_ = batch > 1;
            return 1;
        }
    }
    // Measured cells by their expected rate; an unmeasured k only when even at the plain step's cost (a
    // verify never costs less) it could beat the best measured one: with low acceptance nothing is tried.
    // A measured cell is never taken as cheaper than the plain step plus its drafting: a verify step is
    // a forward of at least the plain step's and k draft steps, so a sample below that came from a faster
    // moment of the machine, not from the verify (this VM's bandwidth moves by 30-50% between seconds;
    // k = 1 at acceptance ~0 was once measured at 33.2 ms against plain 35.7 and then used throughout).
    auto cost = [&](int k) { return std::max(t[k], t[0] + k * draft_s_); };
    int best = 0;
    double best_rate = expected_tokens(0) / t[0];
    for (int k = 1; k <= max_k_; ++k)
        if (n[k] >= 2 && expected_tokens(k) / cost(k) > best_rate) {
            best_rate = expected_tokens(k) / cost(k);
            best = k;
        }
    best_[b] = best;
    // An unmeasured k: before any verify is measured, only at a floor of its cost (the plain step plus
    // its drafting; a verify costs at least what fewer drafts cost) and by kTryMargin. Past a measured
    // k = m >= 1, at an estimate: t[m] plus, per further draft, the measured cost of a draft so far ((t[m]
    // - t[0]) / m, at least a draft step), and tried when that comes within kNearMargin of the best: on
    // the demo model k = 1, 2, 3 cost 0.45, 0.52, 0.57 ms against 0.35 plain (acceptance ~0.75), so the
    // floor alone made k = 3 look 1.13x better than k = 2 (short of kTryMargin) and it was reached only
    // by the exploration ~190 steps later; a try is kSwitchSteps steps, cheap next to that.
    double floor_t = t[0];
    int m = 0;  // the largest measured k so far
    for (int k = 1; k <= max_k_; ++k) {
        floor_t += draft_s_;
        if (n[k] >= 2) {
            floor_t = std::max(floor_t, t[k]);
            m = k;
            continue;
        }
        if (m == 0) {
            if (expected_tokens(k) / floor_t > kTryMargin * best_rate) return run(b, k);
            continue;
        }
        const double per_draft = std::max(draft_s_, (t[m] - t[0]) / m);
        const double estimate = std::max(floor_t, t[m] + (k - m) * per_draft);
        if (expected_tokens(k) / estimate > kNearMargin * best_rate) return run(b, k);
    }
    // Now and then a neighbour of the best k is re-measured (its acceptance and cost drift with the
    // text and the context length): k = 1 when plain decoding is best, so acceptance stays known.
    probe_ = false;
    if (++steps_[b] >= next_explore_[b]) {
        if (best == 0) {
            // One sequence drafts one token: the acceptance stays known for almost nothing. While plain
            // decoding keeps winning the probes come at doubling intervals (up to kMaxExplorePeriod).
            period_[b] = std::min(period_[b] * 2, kMaxExplorePeriod);
            next_explore_[b] = steps_[b] + period_[b];
            probe_ = true;
            return 1;
        }
        // Speculating: every other exploration re-measures plain decoding, the baseline (its cell would
        // otherwise keep the times of the first steps, which run cold after a prefill), the others a
        // neighbour of the best k.
        period_[b] = kExplorePeriod;
        next_explore_[b] = steps_[b] + period_[b];
        const int64_t e = steps_[b] / kExplorePeriod;
        if (e % 2 == 0) return run(b, 0);
        return run(b, (e / 2) % 2 == 0 || best == max_k_ ? best - 1 : best + 1);
    }
    return best;
}

void SpecCostModel::observe_step(int batch, int k, double seconds) {
    if (max_k_ == 0 || k < 0 || k > max_k_ || !(seconds > 0)) return;
    const int b = bucket(batch);
    const bool in_a_row = b == last_bucket_ && k == last_k_;
    last_bucket_ = b;
    last_k_ = k;
    if (!in_a_row) return;  // the first step after a change of k (or batch bucket) is not timed
    // The lower median of the cell's last kWindow samples: noise on a shared machine (other processes,
    // the first step after a prefill) mostly adds time, but the minimum favoured the cells with more
    // samples (each one more draw at a lucky moment): on the demo model plain decoding kept 1.2 ms from
    // its first two (cold) steps against a verify's minimum over many, and speculation ran at 0.92 of
    // plain while the model expected 1.9x. Old samples roll out as the context grows.
    std::vector<double>& ring = recent_[b][k];
    if (static_cast<int>(ring.size()) < kWindow)
        ring.push_back(seconds);
    else
        ring[samples_[b][k] % kWindow] = seconds;
    double sorted[kWindow];
    const int n = static_cast<int>(ring.size());
    std::copy(ring.begin(), ring.end(), sorted);
    std::nth_element(sorted, sorted + (n - 1) / 2, sorted + n);
    step_s_[b][k] = sorted[(n - 1) / 2];
    samples_[b][k]++;
}

void SpecCostModel::observe_draft(double seconds) {
    if (seconds > 0) draft_s_ = draft_s_ == 0 ? seconds : (1 - kEma) * draft_s_ + kEma * seconds;
}

void SpecCostModel::observe_acceptance(int i, bool accepted) {
    if (i < 0 || i >= max_k_) return;
    if (i == 0) ++first_drafts_seen_;
    acc_[i] = acc_[i] * kDecay + (accepted ? 1.0 : 0.0);
    seen_[i] = seen_[i] * kDecay + 1.0;
}

const char* SpecCostModel::bucket_name(int b) {
    static const char* names[kBuckets] = {"1", "2", "3-4", "5-8", "9-16", "17-32", "33+"};
    return b >= 0 && b < kBuckets ? names[b] : "?";
}

SpecCostModel::Snapshot SpecCostModel::snapshot() const {
    Snapshot s;
    for (int i = 0; i < max_k_; ++i) s.acceptance.push_back(acceptance(i));
    s.draft_seconds = draft_s_;
    for (int b = 0; b < kBuckets; ++b) s.step_seconds.push_back(step_s_[b]);
    s.best_k.assign(best_, best_ + kBuckets);
    return s;
}

std::string SpecCostModel::Snapshot::decisions() const {
    std::string s;
    for (size_t b = 0; b < best_k.size(); ++b)
        if (best_k[b] >= 0)
            s += strprintf("%sB=%s k=%d", s.empty() ? "" : ", ", bucket_name(static_cast<int>(b)), best_k[b]);
    return s;
}

std::string SpecCostModel::describe() const {
    std::string s = "acceptance";
    for (int i = 0; i < max_k_; ++i) s += strprintf(" %.2f", acceptance(i));
    if (draft_s_ > 0) s += strprintf("; draft step %.3g ms", draft_s_ * 1e3);
    for (int b = 0; b < kBuckets; ++b) {
        bool any = false;
        for (double t : step_s_[b]) any |= t > 0;
        if (!any) continue;
        s += strprintf("; B=%s:", bucket_name(b));
        for (int k = 0; k <= max_k_; ++k)
            if (step_s_[b][k] > 0) s += strprintf(" k%d %.3g ms", k, step_s_[b][k] * 1e3);
    }
    return s;
}

}  // namespace gdn
