// The modes of `gdn bench` that run in process on a loaded model (cmd_bench.cpp parses and dispatches):
// what they share, and one entry point per mode.
#pragma once

#include <memory>
#include <string>

#include "core/dtype.h"
#include "model/model.h"
#include "tools/args.h"
#include "tools/machine_limits.h"

namespace gdn {

// "gdn bench: what" on stderr; returns code (the exit code).
int bench_fail(const std::string& what, int code);

// The options every in-process mode reads, parsed and checked once.
struct BenchSetup {
    const Args* args = nullptr;
    long long pp = 512, tg = 128, reps = 5, depth = 0;
    int threads = 1;
    MachineLimits limits;  // zeros with --no-limits
    ForwardOptions forward;
    DType kv_dtype = DType::BF16;
};

// --pp / --tg: llama-bench style prefill and decode throughput against the machine's roofline
// (cmd_bench.cpp).
int bench_prefill_decode(const BenchSetup& s, const Model& m);
// --concurrency 1,4,8: engine decode throughput per concurrency, with speculation and its A/B
// (cmd_bench_concurrency.cpp).
int bench_concurrency(const BenchSetup& s, std::shared_ptr<const Model> model);

}  // namespace gdn
