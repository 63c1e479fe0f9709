// Op profiler: when enabled, every op of the op API records (name, phase, start, duration). Reports a
// table per phase (prefill / decode): calls, total time, mean, share of step time; and writes one step
// as a Chrome trace (chrome://tracing, Perfetto). Disabled, an op costs one branch.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace gdn {

class Profiler {
  public:
    // The process's profiler (ExecContext::process() hands it to ops; `gdn profile` enables it). Ops and the
    // model reach a profiler only through their ExecContext.
    static Profiler& get();

    void enable(bool on) { enabled_ = on; }
    bool enabled() const { return enabled_; }
    void clear();

    // A step groups the ops of one forward call; phase names it ("prefill" / "decode").
    void begin_step(const char* phase);
    void end_step();

    void record(const char* op, int64_t t0_ns, int64_t t1_ns, int depth = 0);
    // Nesting depth of the calling thread's open scopes (nested ops are reported under their parent).
    static int& depth() {
        thread_local int d = 0;
        return d;
    }
    static int64_t now_ns() {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }

    // Per-phase table of op statistics.
    std::string report() const;
    // Chrome trace JSON of step `index` of `phase` (0 = first).
    std::string chrome_trace(const char* phase, int index) const;

  private:
    struct Event {
        const char* op;
        int64_t t0, t1;
        int step;
        int depth;
    };
    struct Step {
        const char* phase;
        int64_t t0, t1;
    };
    bool enabled_ = false;
    std::vector<Event> events_;
    std::vector<Step> steps_;
    int current_ = -1;
};

// One forward as a step of `profiler` (null: nothing): begin_step on construction, end_step at scope end.
class ProfiledStep {
  public:
    ProfiledStep(Profiler* profiler, const char* phase) : profiler_(profiler) {
        if (profiler_) profiler_->begin_step(phase);
    }
    ~ProfiledStep() {
        if (profiler_) profiler_->end_step();
    }
    ProfiledStep(const ProfiledStep&) = delete;
    ProfiledStep& operator=(const ProfiledStep&) = delete;

  private:
    Profiler* profiler_;
};

// Times the enclosing scope as op `name` on `profiler` when it is not null and enabled.
class ProfileScope {
  public:
    ProfileScope(Profiler* profiler, const char* name)
        : profiler_(profiler && profiler->enabled() ? profiler : nullptr), name_(name) {
        if (profiler_) {
            t0_ = Profiler::now_ns();
            ++Profiler::depth();
        }
    }
    ~ProfileScope() {
        if (profiler_) profiler_->record(name_, t0_, Profiler::now_ns(), --Profiler::depth());
    }
    ProfileScope(const ProfileScope&) = delete;
    ProfileScope& operator=(const ProfileScope&) = delete;

  private:
    Profiler* profiler_;
    const char* name_;
    int64_t t0_ = 0;
};

}  // namespace gdn

#define GDN_PROFILE_CONCAT2(a, b) a##b
#define GDN_PROFILE_CONCAT(a, b) GDN_PROFILE_CONCAT2(a, b)
// GDN_PROFILE(ctx, "op"): times the enclosing scope on the profiler of ExecContext ctx.
#define GDN_PROFILE(ctx, name) \
    ::gdn::ProfileScope GDN_PROFILE_CONCAT(_gdn_prof_, __LINE__)((ctx).profiler(), name)
