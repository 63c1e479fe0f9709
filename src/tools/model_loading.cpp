#include "tools/model_loading.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "core/log.h"
#include "ops/linear_quant.h"
#include "tools/args.h"

namespace gdn {

Result<LoadOptions> load_options(const Args& a) {
    LoadOptions o;
    const std::string v = a.get("--quantization", "none");
    if (!parse_quantization(v, &o.quantization))
        return Status::error("--quantization must be int8, int4, int4-sym or none, got '" + v + "'");
    GDN_ASSIGN_OR_RETURN(SpeculativeConfig spec, speculative_config(a));
    o.mtp = spec.uses_mtp();
    o.mtp_draft_head = spec.draft_head;
    o.mtp_layer = spec.draft_layer;
    return o;
}

Result<SpeculativeConfig> speculative_config(const Args& a) {
    if (!a.has("--speculative-config")) return SpeculativeConfig{};
    return SpeculativeConfig::parse(a.get("--speculative-config"));
}

const std::set<std::string> kPrefixCacheOptions = {"--prefix-cache-memory", "--prefix-snapshot-interval"};
const std::set<std::string> kPrefixCacheFlags = {"--enable-prefix-caching", "--no-enable-prefix-caching"};

Status apply_prefix_cache_options(const Args& a, EngineConfig* ec) {
    if (a.has("--enable-prefix-caching") && a.has("--no-enable-prefix-caching"))
        return Status::error("--enable-prefix-caching and --no-enable-prefix-caching contradict each other");
    ec->enable_prefix_caching = !a.has("--no-enable-prefix-caching");
    GDN_ASSIGN_OR_RETURN(long long mem, a.get_int("--prefix-cache-memory",
                                                  static_cast<long long>(ec->prefix_cache_memory >> 20)));
    GDN_ASSIGN_OR_RETURN(long long interval,
                         a.get_int("--prefix-snapshot-interval", ec->prefix_snapshot_interval));
    const long long ram_mib = static_cast<long long>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) >> 20;
    if (mem < 0 || (ram_mib > 0 && mem > ram_mib))
        return Status::error(strprintf(
            "--prefix-cache-memory must be 0..%lld MiB (this machine's RAM), got %lld", ram_mib, mem));
    if (interval < 0 || interval > (1ll << 30))
        return Status::error(strprintf(
            "--prefix-snapshot-interval must be 0 (none) or a positive token count, got %lld", interval));
    if (!ec->enable_prefix_caching && (a.has("--prefix-cache-memory") || a.has("--prefix-snapshot-interval")))
        return Status::error(
            "--prefix-cache-memory and --prefix-snapshot-interval need prefix caching, which "
            "--no-enable-prefix-caching turns off");
    ec->prefix_cache_memory = static_cast<size_t>(mem) << 20;
    ec->prefix_snapshot_interval = static_cast<int>(interval);
    return Status::ok();
}

std::string prefix_cache_summary(const EngineStats& st) {
    const PrefixCacheStats& p = st.prefix;
    if (p.query_tokens == 0) return "";
    return strprintf(
        "prefix cache: %lld of %lld prompt tokens from the cache (%.1f%%), %d snapshots held (%.0f MiB), "
        "%lld snapshots and %lld blocks evicted",
        (long long)p.hit_tokens, (long long)p.query_tokens, 100.0 * p.hit_tokens / p.query_tokens,
        p.snapshots, p.snapshots * double(st.prefix_snapshot_bytes) / 1048576.0,
        (long long)p.snapshot_evictions, (long long)p.block_evictions);
}

std::string speculation_summary(const EngineStats& st) {
    const SpecCounters& c = st.spec;
    if (c.drafted == 0) return "";
    std::string per;
    for (size_t i = 0; i < c.drafted_at.size(); ++i)
        per += strprintf(" %.2f", c.drafted_at[i] ? double(c.accepted_at[i]) / c.drafted_at[i] : 0.0);
    return strprintf(
        "speculation: %lld drafts verified in %lld sequence-steps, %lld accepted (%.1f%%), per position%s, "
        "mean acceptance length %.2f",
        (long long)c.drafted, (long long)c.verify_steps, (long long)c.accepted,
        100.0 * c.accepted / c.drafted, per.c_str(), c.mean_acceptance_length());
}

int64_t peak_rss_bytes() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
    return 0;
}

void print_progress(const std::string& label, int64_t done, int64_t total, const std::string& suffix) {
    static const bool tty = isatty(2);
    if (!tty || total <= 0) return;
    const int width = 30, fill = static_cast<int>(done * width / total);
    std::fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld%s", label.c_str(), fill, "##############################",
                 width - fill, "", (long long)done, (long long)total, suffix.c_str());
    if (done == total) std::fprintf(stderr, "\n");
}

Result<std::unique_ptr<Model>> load_model_for_tool(const Args& a) {
    GDN_ASSIGN_OR_RETURN(LoadOptions opt, load_options(a));
    const std::string dir = a.get("--model");
    const auto t0 = std::chrono::steady_clock::now();
    const std::string label =
        (opt.quantization ? std::string("quantizing to ") + quantization_name(*opt.quantization)
                          : std::string("loading")) +
        " " + dir;
    auto model = Model::load(
        ExecContext::process(), dir, [&](int done, int total) { print_progress(label, done, total); }, opt);
    if (!model) return model.status();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& q = (*model)->weights().quantization;
    const std::string how = !q ? ""
                            : opt.quantization && !(*model)->weights().prepacked
                                ? std::string(" (quantized at load to ") + quantization_name(*q) + ")"
                                : std::string(" (") + quantization_name(*q) + ", as gdn quantize wrote it)";
    GDN_LOG_INFO("loaded %s in %.2f s%s: %s", dir.c_str(), s, how.c_str(),
                 (*model)->config().summary().c_str());
    for (const auto& [what, n] : (*model)->weights().gguf_packing)
        GDN_LOG_INFO("gguf: %s: %d matrices", what.c_str(), n);
    GDN_LOG_INFO("%s; peak RSS %.1f MB", weights_summary((*model)->weights()).c_str(),
                 peak_rss_bytes() / 1e6);
    if (q) {
        const std::string rep = quant_kernel_report();
        size_t b = 0;
        for (size_t e; (e = rep.find('\n', b)) != std::string::npos; b = e + 1)
            GDN_LOG_INFO("%s", rep.substr(b, e - b).c_str());
    }
    return model;
}

}  // namespace gdn
