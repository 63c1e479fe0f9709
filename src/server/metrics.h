// Prometheus text-format helpers for /metrics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/log.h"

namespace gdn {

// Prometheus histogram with fixed buckets (seconds).
struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;
    double sum = 0;
    uint64_t n = 0;
    explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
    void observe(double v) {
        size_t i = 0;
        while (i < bounds.size() && v > bounds[i]) ++i;
        counts[i]++;
        sum += v;
        n++;
    }
    std::string text(const std::string& name, const std::string& help) const {
        std::string s = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
        uint64_t c = 0;
        for (size_t i = 0; i < bounds.size(); ++i) {
            c += counts[i];
            s += strprintf("%s_bucket{le=\"%g\"} %llu\n", name.c_str(), bounds[i], (unsigned long long)c);
        }
        c += counts.back();
        s += strprintf("%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name.c_str(),
                       (unsigned long long)c, name.c_str(), sum, name.c_str(), (unsigned long long)n);
        return s;
    }
};

}  // namespace gdn
