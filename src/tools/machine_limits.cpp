#include "tools/machine_limits.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "ops/cpu/limits_kernels.h"
#include "ops/dispatch.h"

namespace gdn {

std::string MachineLimits::summary() const {
    std::string s =
        strprintf("%d threads: streaming read %.1f GB/s, fp32 FMA %.0f GFLOP/s, bf16 dot %.0f GFLOP/s",
                  threads, read_gbps, fp32_gflops, bf16_gflops);
    if (amx_gflops > 0) s += strprintf(", AMX bf16 %.0f GFLOP/s", amx_gflops);
    return s;
}

namespace {
double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

ReadBandwidthProbe::ReadBandwidthProbe(size_t buffer_bytes)
    : bytes_(buffer_bytes), buf_(buffer_bytes, false) {
    const int64_t n = static_cast<int64_t>(bytes_ / sizeof(float));
    float* p = buf_.as<float>();
    global_pool().parallel_for(n, [&](int64_t b, int64_t e) {  // first touch by the thread that reads it
        for (int64_t i = b; i < e; ++i) p[i] = 1.0f;
    });
    ranges_ = {p};
    starts_ = {0, n};
}

ReadBandwidthProbe::ReadBandwidthProbe(const std::vector<std::pair<const void*, size_t>>& ranges) {
    starts_ = {0};
    for (const auto& [p, bytes] : ranges) {
        const int64_t n = static_cast<int64_t>(bytes / 64) * 16;  // whole 64-byte lines (buffers are aligned)
        if (!p || n == 0) continue;
        ranges_.push_back(static_cast<const float*>(p));
        starts_.push_back(starts_.back() + n);
    }
    bytes_ = static_cast<size_t>(starts_.back()) * sizeof(float);
}

double ReadBandwidthProbe::measure_gbps(int reps) {
    ThreadPool& pool = global_pool();
    const bool avx512 = cpu_isa() == Isa::AVX512;
    const int64_t n = starts_.back();
    if (n == 0) return 0.0;
    std::vector<float> sink(8 * pool.size(), 0.0f);
    double best = 0;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now();
        // Balanced like the decode GEMVs (the vCPUs do not stream at the same rate), 32 KiB smallest claims.
        pool.parallel_for_balanced(n, int64_t{8} << 10, [&](int ith, int64_t b, int64_t e) {
            // The ranges [b, e) crosses, read as one stream each.
            size_t k =
                static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), b) - starts_.begin()) -
                1;
            for (; b < e; ++k) {
                const int64_t end = std::min(e, starts_[k + 1]);
                const float* p = ranges_[k] + (b - starts_[k]);
                sink[ith * 8] +=
                    avx512 ? cpu::avx512::stream_read(p, end - b) : cpu::avx2::stream_read(p, end - b);
                b = end;
            }
        });
        best = std::max(best, bytes_ / (now() - t0) / 1e9);
    }
    return best;
}

MachineLimits measure_machine_limits(size_t buffer_bytes, int reps) {
    MachineLimits L;
    ThreadPool& pool = global_pool();
    L.threads = pool.size();
    const bool avx512 = cpu_isa() == Isa::AVX512;
    L.read_gbps = ReadBandwidthProbe(buffer_bytes).measure_gbps(reps);
    std::vector<float> sink(8 * pool.size(), 0.0f);
    enum Kind { FMA, BF16_DOT, AMX };
    auto peak = [&](Kind kind) {
        double best = 0;
        for (int r = 0; r < reps; ++r) {
            std::vector<double> flops(pool.size());
            const double t0 = now();
            pool.run([&](int ith, int) {
                const int64_t iters = kind == AMX ? 200'000 : 20'000'000;
                flops[ith] = kind == AMX        ? cpu::avx512::amx_dot_chains(iters, &sink[ith * 8])
                             : kind == BF16_DOT ? cpu::avx512::bf16_dot_chains(iters, &sink[ith * 8])
                             : avx512           ? cpu::avx512::fma_chains(iters, &sink[ith * 8])
                                                : cpu::avx2::fma_chains(iters, &sink[ith * 8]);
            });
            const double dt = now() - t0;
            double total = 0;
            for (double f : flops) total += f;
            best = std::max(best, total / dt / 1e9);
        }
        return best;
    };
    L.fp32_gflops = peak(FMA);
    L.bf16_gflops = has_bf16_dot() ? peak(BF16_DOT) : 0.0;
    L.amx_gflops = has_amx_bf16() ? peak(AMX) : 0.0;
    return L;
}

}  // namespace gdn
