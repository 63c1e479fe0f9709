#include "core/profiler.h"

#include <algorithm>
#include <map>

#include "core/log.h"

namespace gdn {

Profiler& Profiler::get() {
    static Profiler p;
    return p;
}

void Profiler::clear() {
    events_.clear();
    steps_.clear();
    current_ = -1;
}

void Profiler::begin_step(const char* phase) {
    if (!enabled_) return;
    steps_.push_back({phase, now_ns(), 0});
    current_ = static_cast<int>(steps_.size()) - 1;
}

void Profiler::end_step() {
    if (!enabled_ || current_ < 0) return;
    steps_[current_].t1 = now_ns();
    current_ = -1;
}

void Profiler::record(const char* op, int64_t t0, int64_t t1, int depth) {
    if (current_ >= 0) events_.push_back({op, t0, t1, current_, depth});
}

std::string Profiler::report() const {
    std::string out;
    std::vector<std::string> phases;
    for (const Step& s : steps_)
        if (std::find(phases.begin(), phases.end(), s.phase) == phases.end()) phases.push_back(s.phase);
    for (const std::string& ph : phases) {
        double step_total = 0;
        int n_steps = 0;
        for (const Step& s : steps_)
            if (ph == s.phase && s.t1) {
                step_total += (s.t1 - s.t0) / 1e6;
                ++n_steps;
            }
        struct Row {
            int64_t calls = 0;
            double ms = 0;
            int depth = 0;
        };
        std::map<std::string, Row> rows;
        double op_total = 0;
        for (const Event& e : events_) {
            if (ph != steps_[e.step].phase) continue;
            Row& r = rows[e.op];
            r.calls++;
            r.ms += (e.t1 - e.t0) / 1e6;
            r.depth = e.depth;
            if (e.depth == 0) op_total += (e.t1 - e.t0) / 1e6;  // nested ops are inside their parent
        }
        std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
        std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second.ms > b.second.ms; });
        out += strprintf("%s: %d steps, %.3f ms total (%.3f ms per step)\n", ph.c_str(), n_steps, step_total,
                         n_steps ? step_total / n_steps : 0.0);
        out += strprintf("  %-16s %8s %12s %12s %8s\n", "op (. nested)", "calls", "total ms", "mean us",
                         "share");
        for (const auto& [name, r] : sorted)
            out += strprintf("  %-16s %8lld %12.3f %12.1f %7.1f%%\n",
                             ((r.depth ? "  . " : "") + name).c_str(), (long long)r.calls, r.ms,
                             r.ms * 1e3 / r.calls, step_total > 0 ? 100.0 * r.ms / step_total : 0.0);
        out += strprintf("  %-16s %8s %12.3f %12s %7.1f%%\n", "(outside ops)", "", step_total - op_total, "",
                         step_total > 0 ? 100.0 * (step_total - op_total) / step_total : 0.0);
    }
    return out;
}

std::string Profiler::chrome_trace(const char* phase, int index) const {
    int seen = -1, step = -1;
    for (int i = 0; i < static_cast<int>(steps_.size()); ++i)
        if (std::string(steps_[i].phase) == phase && ++seen == index) step = i;
    std::string out = "{\"traceEvents\": [\n";
    if (step >= 0) {
        const int64_t base = steps_[step].t0;
        out += strprintf(
            "  {\"name\": \"%s step\", \"ph\": \"X\", \"ts\": 0, \"dur\": %.3f, \"pid\": 0, \"tid\": 0}",
            phase, (steps_[step].t1 - base) / 1e3);
        for (const Event& e : events_)
            if (e.step == step)
                out += strprintf(
                    ",\n  {\"name\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": 0, "
                    "\"tid\": %d}",
                    e.op, (e.t0 - base) / 1e3, (e.t1 - e.t0) / 1e3, 1 + e.depth);
    }
    return out + "\n], \"displayTimeUnit\": \"ms\"}\n";
}

}  // namespace gdn
