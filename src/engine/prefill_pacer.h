// How many prompt tokens a step may prefill beside running decodes (the scheduler's prefill room): what
// a step-time target allows at the prefill rate observed on earlier steps. A token budget alone cannot
// say it: the same 128 prompt tokens take a fraction of a second on the 0.8B shape and seconds on a 27B,
// while the decodes in the same step wait for all of them.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gdn {

class PrefillPacer {
  public:
    // target_seconds <= 0: no room limit.
    explicit PrefillPacer(double target_seconds) : target_(target_seconds) {}

    // A step computed prefill_tokens prompt tokens (beside any decodes) in `seconds`. Steps with fewer
    // than min_tokens say more about per-step overheads than about the rate and are not counted.
    void observe(int64_t prefill_tokens, double seconds, int64_t min_tokens) {
        if (target_ <= 0 || prefill_tokens < min_tokens || seconds <= 0) return;
        const double sample =
            seconds / static_cast<double>(prefill_tokens);  // decodes' share included: conservative
        seconds_per_token_ = seconds_per_token_ > 0 ? 0.7 * seconds_per_token_ + 0.3 * sample : sample;
    }
    // Prompt tokens per step that keep it near the target; 0 (no limit) until a rate is known.
    int64_t room() const {
        if (target_ <= 0 || seconds_per_token_ <= 0) return 0;
        return std::max<int64_t>(1, static_cast<int64_t>(target_ / seconds_per_token_));
    }
    double seconds_per_token() const { return seconds_per_token_; }

  private:
    double target_;
    double seconds_per_token_ = 0;  // moving average over recent steps
};

}  // namespace gdn
