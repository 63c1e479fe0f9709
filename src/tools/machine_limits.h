// The machine's own limits, measured in-process so every benchmark can quote its fraction of them.
#pragma once

#include <string>

namespace gdn {

struct MachineLimits {
    int threads = 1;
    double read_gbps = 0;      // streaming DRAM read, all threads
    double fp32_gflops = 0;    // FMA chains, all threads
    double bf16_gflops = 0;    // vdpbf16ps chains, all threads (0 without AVX-512 BF16)
    std::string summary() const;
};

// buffer_bytes: the streaming buffer (must exceed the last-level cache by far; default 1 GiB).
MachineLimits measure_machine_limits(size_t buffer_bytes = 1ull << 30, int repetitions = 3);

}  // namespace gdn
