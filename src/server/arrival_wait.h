// How long the engine thread holds the next step for the next requests of clients whose requests just
// ended. A client that keeps a fixed number of requests in flight (an agent pool, a batch job, a
// benchmark with a concurrency cap) sends its next request as soon as one ends; it reaches the server a
// few milliseconds after the step that ended it, by which time the next step has started, and a step
// that prefills a prompt beside the decodes is long: without a wait each such request sat through one
// whole step before the one that computed its prompt, so its TTFT was two steps instead of one
// (docs/perf.md, behind the constants: server/arrival_wait.h). The wait ends as soon as as many requests
// as ended have arrived.
#pragma once

#include <algorithm>

namespace gdn {

// `gdn serve --arrival-wait-ms`'s default: above the time a client's next request took to arrive.
inline constexpr int kServeArrivalWaitMs = 10;

class ArrivalWait {
  public:
    // max_ms <= 0: never wait. The wait is also at most step_fraction of the last step, so decodes
    // lose at most that share of their rate when nobody comes.
    explicit ArrivalWait(double max_ms, double step_fraction = 0.25)
        : max_ms_(max_ms), step_fraction_(step_fraction) {}

    // Milliseconds to wait before the next step: `ended` requests ended in the last step, which took
    // last_step_ms; `queued` requests (arrived before that step ended, or waiting in the engine)
    // already give the next step a prompt to start, so then nobody waits. When recent holds mostly
    // expired (open-loop traffic, the end of a batch job), only every kProbeEvery-th chance waits, to
    // notice when clients start answering again.
    double budget_ms(int ended, double last_step_ms, int queued) {
        if (max_ms_ <= 0 || ended <= 0 || queued > 0 || last_step_ms <= 0) return 0;
        if (answered_ < kMinAnswered && ++skipped_ % kProbeEvery != 0) return 0;
        return std::min(max_ms_, step_fraction_ * last_step_ms);
    }
    // Whether a hold ended with its requests arrived (true) or at its budget (false).
    void observe(bool answered) { answered_ = (1 - kDecay) * answered_ + kDecay * (answered ? 1.0 : 0.0); }
    // The server has nothing to run: what the holds learned described the traffic that just ended. The
    // end of every closed-loop batch expires its last holds (its clients have nothing more to send), and
    // kept, that history made the next batch's clients miss their step for up to kProbeEvery chances
    // each (docs/perf.md, behind the constants: server/arrival_wait.h).
    void idle() {
        answered_ = 1;
        skipped_ = 0;
    }
    double answered_share() const { return answered_; }

    static constexpr double kMinAnswered = 0.3;  // below: holds mostly cost, so probe only
    static constexpr int kProbeEvery = 8;
    static constexpr double kDecay = 0.3;  // moving average over the last ~3 holds

  private:
    double max_ms_;
    double step_fraction_;
    double answered_ = 1;  // recent holds' share that their requests answered
    int skipped_ = 0;
};

}  // namespace gdn
