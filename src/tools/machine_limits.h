// The machine's own limits, measured in-process so every benchmark can quote its fraction of them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/buffer.h"

namespace gdn {

struct MachineLimits {
    int threads = 1;
    double read_gbps = 0;    // streaming DRAM read, all threads
    double fp32_gflops = 0;  // FMA chains, all threads
    double bf16_gflops = 0;  // vdpbf16ps chains, all threads (0 without AVX-512 BF16)
    double amx_gflops = 0;   // tdpbf16ps on tile-resident operands, all threads (0 where AMX is off)
    std::string summary() const;
};

// Streaming-read bandwidth of all threads over a buffer far larger than the last-level cache, kept
// allocated so a benchmark can measure it again right next to each repetition: on shared machines the
// bandwidth moves between windows of time and between stretches of memory (docs/perf.md, behind the
// constants: tools/machine_limits.h), so a ratio is only meaningful against the bandwidth of the same
// minutes and memory: the second form reads existing memory (the weights).
class ReadBandwidthProbe {
  public:
    explicit ReadBandwidthProbe(size_t buffer_bytes = 1ull << 30);  // a buffer of its own, touched
    explicit ReadBandwidthProbe(const std::vector<std::pair<const void*, size_t>>& ranges);  // not owned
    double measure_gbps(int repetitions = 3);  // the best of the repetitions
    size_t bytes() const { return bytes_; }

  private:
    size_t bytes_ = 0;
    Buffer buf_;
    std::vector<const float*> ranges_;
    std::vector<int64_t> starts_;  // floats before each range; back() = all of them
};

// buffer_bytes: the streaming buffer (must exceed the last-level cache by far; default 1 GiB).
MachineLimits measure_machine_limits(size_t buffer_bytes = 1ull << 30, int repetitions = 3);

}  // namespace gdn
