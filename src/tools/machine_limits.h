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
// bandwidth moves between windows (45-80 GB/s on the CI VM), so a ratio is only meaningful against the
// bandwidth of the same minutes. On the Zen 4 VM of 2026-12-02 consecutive 512 MiB stretches of one
// allocation, each read in ~20 ms, gave 26-30 or 48-54 GB/s, and whole passes moved between the two:
// a window of time or the host's placement of the pages (the guest sees one NUMA node and cannot
// tell), so a decode step is also compared with the bandwidth of the memory it streams: the second
// form reads existing memory (the weights).
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
