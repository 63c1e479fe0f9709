// Loading a model for a CLI subcommand: --quantization parsed, a progress bar on a terminal, and the
// memory plan logged (load time, bytes per weight format, peak RSS), one implementation for every tool.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/speculative.h"
#include "model/model.h"

namespace gdn {

class Args;

// --quantization int8|int4|int4-sym|none (vLLM's flag name). Unknown values are an error naming the choices.
// The MTP layer is loaded when --speculative-config asks for MTP drafts.
Result<LoadOptions> load_options(const Args& a);

// --speculative-config JSON (vLLM's): disabled when absent.
Result<SpeculativeConfig> speculative_config(const Args& a);

// Prefix caching, vLLM's flags: --enable-prefix-caching / --no-enable-prefix-caching (on by default),
// --prefix-cache-memory MiB (GDN state snapshots, beside --cache-memory), --prefix-snapshot-interval N.
// The option and flag names, for Args::parse.
extern const std::set<std::string> kPrefixCacheOptions, kPrefixCacheFlags;
Status apply_prefix_cache_options(const Args& a, EngineConfig* ec);
// "prefix cache: 9120 of 12000 prompt tokens from the cache (76.0%), 31 snapshots held (598 MiB)" (empty
// when off or nothing was looked up).
std::string prefix_cache_summary(const EngineStats& s);

// "speculation: 812 drafts verified in 420 steps, 574 accepted (70.7%), per position 0.82 0.64 0.50, mean
// acceptance length 2.37" (empty when nothing was drafted).
std::string speculation_summary(const EngineStats& s);

// Loads --model with load_options(a); logs "loaded DIR in T s", the weights summary and peak RSS.
// Errors are prefixed with nothing: the caller prints "gdn TOOL: message".
Result<std::unique_ptr<Model>> load_model_for_tool(const Args& a);

// The process's peak resident set (VmHWM) in bytes, 0 if unknown.
int64_t peak_rss_bytes();

// "\rLABEL [#####     ] done/total SUFFIX" on stderr when it is a terminal (a newline once done == total).
void print_progress(const std::string& label, int64_t done, int64_t total, const std::string& suffix = "");

}  // namespace gdn
