// gdn bench (serving mode), in the manner of `vllm bench serve`: a random dataset sent to a running server
// (--base-url) or to an in-process server on the model (--model), at one or more concurrency levels, with
// Poisson arrivals; reports TTFT / TPOT / ITL and throughput, as a table, JSON (vLLM's key names) and SVG.
// --multi-turn and --shared-prefix are the conversation workloads of cmd_bench_prefix.cpp.
#include <httplib.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "core/clock.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "ops/dispatch.h"
#include "server/openai_server.h"
#include "server/sse_reader.h"
#include "tools/args.h"
#include "tools/bench_target.h"
#include "tools/commands.h"
#include "tools/model_loading.h"
#include "util/json_file.h"

namespace gdn {

namespace {

struct RequestResult {
    bool ok = false;
    int64_t input_tokens = 0, output_tokens = 0;
    double start = 0;  // seconds after the run's start, when the request was sent
    double ttft = 0, e2e = 0;
    double ttft_text = 0;  // the first chunk with text (later than ttft when the first tokens complete none)
    std::vector<double> itl;
    std::string error;
};

struct Summary {
    Json json;
    std::string table_row;
};

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double idx = p / 100.0 * (v.size() - 1);
    const size_t lo = static_cast<size_t>(idx);
    const double f = idx - lo;
    return lo + 1 < v.size() ? v[lo] * (1 - f) + v[lo + 1] * f : v[lo];
}
double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / v.size();
}

// One streaming completion; measures TTFT, ITL (between token chunks) and end to end. As vLLM's
// benchmark_serving: the TTFT is the first chunk with a choice, whether or not its tokens completed any
// text yet (a partial UTF-8 character, a token the tokenizer has no text for); the first text is kept too.
RequestResult send_one(const BenchTarget& t, const std::vector<int32_t>& prompt, int max_tokens,
                       bool ignore_eos) {
    RequestResult r;
    r.input_tokens = static_cast<int64_t>(prompt.size());
    Json body = {{"model", t.model_name},
                 {"prompt", prompt},
                 {"max_tokens", max_tokens},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}},
                 {"ignore_eos", ignore_eos},
                 {"temperature", 0}};
    const double t0 = now_seconds();
    double last = 0;
    StreamOutcome o = post_stream(t, "/completions", body, [&](const Json& j) {
        if (j.contains("usage") && j["usage"].is_object())
            r.output_tokens = j["usage"].value("completion_tokens", int64_t(0));
        if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
            const double now = now_seconds();
            if (r.ttft == 0)
                r.ttft = now - t0;
            else
                r.itl.push_back(now - last);
            last = now;
            if (r.ttft_text == 0 && j["choices"][0].value("text", "") != "") r.ttft_text = now - t0;
        }
    });
    r.e2e = o.seconds;
    r.error = o.error;
    r.ok = r.error.empty() && r.output_tokens > 0;
    if (r.ok && r.ttft == 0) r.ttft = r.e2e;
    if (r.ok && r.ttft_text == 0) r.ttft_text = r.e2e;
    return r;
}

Json summarize(int concurrency, double rate, const std::vector<RequestResult>& rs, double duration) {
    std::vector<double> ttft, ttft_text, tpot, itl, e2e;
    int64_t in = 0, out = 0, ok = 0;
    for (const auto& r : rs) {
        if (!r.ok) continue;
        ++ok;
        in += r.input_tokens;
        out += r.output_tokens;
        ttft.push_back(1e3 * r.ttft);
        ttft_text.push_back(1e3 * r.ttft_text);
        e2e.push_back(1e3 * r.e2e);
        if (r.output_tokens > 1) tpot.push_back(1e3 * (r.e2e - r.ttft) / (r.output_tokens - 1));
        for (double x : r.itl) itl.push_back(1e3 * x);
    }
    Json j = {{"max_concurrency", concurrency},
              {"request_rate", std::isinf(rate) ? Json("inf") : Json(rate)},
              {"completed", ok},
              {"failed", static_cast<int64_t>(rs.size()) - ok},
              {"duration", duration},
              {"total_input_tokens", in},
              {"total_output_tokens", out},
              {"request_throughput", ok / duration},
              {"output_throughput", out / duration},
              {"total_token_throughput", (in + out) / duration}};
    for (auto [name, v] : {std::pair<const char*, std::vector<double>*>{"ttft", &ttft},
                           {"ttft_text", &ttft_text},
                           {"tpot", &tpot},
                           {"itl", &itl},
                           {"e2el", &e2e}}) {
        j[std::string("mean_") + name + "_ms"] = mean(*v);
        j[std::string("median_") + name + "_ms"] = percentile(*v, 50);
        j[std::string("p99_") + name + "_ms"] = percentile(*v, 99);
    }
    // Per request, in the order sent (as vLLM's benchmark_serving saves them): when a TTFT depends on what
    // else was in flight, the timeline says why.
    Json starts = Json::array(), ttfts = Json::array(), e2els = Json::array(), outs = Json::array();
    for (const auto& r : rs) {
        starts.push_back(1e3 * r.start);
        ttfts.push_back(r.ok ? Json(1e3 * r.ttft) : Json());
        e2els.push_back(r.ok ? Json(1e3 * r.e2e) : Json());
        outs.push_back(r.output_tokens);
    }
    j["start_ms"] = starts;
    j["ttfts_ms"] = ttfts;
    j["e2els_ms"] = e2els;
    j["output_lens"] = outs;
    return j;
}

// Throughput and latency against concurrency, as a two-panel SVG.
std::string plot_svg(const std::vector<Json>& runs) {
    const int W = 900, H = 360, pad = 60, pw = (W - 3 * pad) / 2, ph = H - 2 * pad;
    std::string s = strprintf(
        "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif' "
        "font-size='12'><rect width='100%%' height='100%%' fill='white'/>\n",
        W, H);
    double cmax = 1, tmax = 1, lmax = 1;
    for (const Json& r : runs) {
        cmax = std::max(cmax, r["max_concurrency"].get<double>());
        tmax = std::max(tmax, r["output_throughput"].get<double>());
        lmax = std::max({lmax, r["median_ttft_ms"].get<double>(), r["median_tpot_ms"].get<double>()});
    }
    auto panel = [&](int x0, const char* title, const char* ylabel, double ymax,
                     std::vector<std::pair<std::string, std::string>> series) {
        s += strprintf("<text x='%d' y='%d' font-weight='bold'>%s</text>\n", x0, pad - 20, title);
        s += strprintf("<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='black'/>", x0, pad + ph, x0 + pw,
                       pad + ph);
        s += strprintf("<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='black'/>\n", x0, pad, x0, pad + ph);
        s += strprintf("<text x='%d' y='%d'>concurrency</text><text x='%d' y='%d'>%s</text>\n",
                       x0 + pw / 2 - 30, pad + ph + 35, x0 - 50, pad - 5, ylabel);
        for (int i = 0; i <= 4; ++i)
            s += strprintf("<text x='%d' y='%d' text-anchor='end'>%.0f</text>", x0 - 4,
                           pad + ph - i * ph / 4 + 4, ymax * i / 4);
        const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c"};
        int ci = 0;
        for (auto& [key, label] : series) {
            std::string pts;
            for (const Json& r : runs) {
                const double x = x0 + pw * r["max_concurrency"].get<double>() / cmax;
                const double y = pad + ph - ph * r[key].get<double>() / ymax;
                pts += strprintf("%.1f,%.1f ", x, y);
                s += strprintf("<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>", x, y, colors[ci]);
                s += strprintf("<text x='%.1f' y='%d' font-size='10' text-anchor='middle'>%g</text>", x,
                               pad + ph + 14, r["max_concurrency"].get<double>());
            }
            s += strprintf("<polyline points='%s' fill='none' stroke='%s' stroke-width='2'/>\n", pts.c_str(),
                           colors[ci]);
            s += strprintf("<text x='%d' y='%d' fill='%s'>%s</text>\n", x0 + 10, pad + 15 + 15 * ci,
                           colors[ci], label.c_str());
            ++ci;
        }
    };
    panel(pad, "Output throughput", "tok/s", tmax * 1.1, {{"output_throughput", "output tokens/s"}});
    panel(2 * pad + pw, "Latency (median)", "ms", lmax * 1.1,
          {{"median_ttft_ms", "TTFT ms"}, {"median_tpot_ms", "TPOT ms"}});
    return s + "</svg>\n";
}

}  // namespace

int cmd_bench_serve(Args& a) {
    if (a.has("--multi-turn") || a.has("--shared-prefix")) return cmd_bench_prefix(a);
    auto num_prompts = a.get_int("--num-prompts", 64), in_len = a.get_int("--input-len", 256),
         out_len = a.get_int("--output-len", 64), warmups = a.get_int("--num-warmups", 2),
         threads = a.get_int("--threads", default_thread_count()), seed = a.get_int("--seed", 0);
    auto ratio = a.get_double("--range-ratio", 0.0);
    for (auto* r : {&num_prompts, &in_len, &out_len, &warmups, &threads, &seed})
        if (!*r) {
            std::fprintf(stderr, "gdn bench: %s\n", r->message().c_str());
            return 2;
        }
    if (!ratio || *ratio < 0 || *ratio >= 1 || *num_prompts < 1 || *in_len < 1 || *out_len < 1) {
        std::fprintf(stderr,
                     "gdn bench: --range-ratio in [0, 1), --num-prompts/--input-len/--output-len >= 1\n");
        return 2;
    }
    std::vector<int> levels = {1};
    if (a.has("--max-concurrency")) {
        auto l = parse_id_list(a.get("--max-concurrency"));
        if (!l) {
            std::fprintf(stderr, "gdn bench: --max-concurrency: %s\n", l.message().c_str());
            return 2;
        }
        levels.assign(l->begin(), l->end());
    }
    double rate = INFINITY;
    if (a.has("--request-rate") && a.get("--request-rate") != "inf") {
        auto r = a.get_double("--request-rate", 0);
        if (!r || *r <= 0) {
            std::fprintf(stderr, "gdn bench: --request-rate must be a positive number or inf\n");
            return 2;
        }
        rate = *r;
    }
    // Target: a running server, or an in-process one on --model.
    BenchSizing size;
    size.max_num_seqs = *std::max_element(levels.begin(), levels.end());
    size.max_model_len = static_cast<int>(*in_len * (1 + *ratio) + *out_len + 8);
    auto target = open_bench_target(a, size);
    if (!target) {
        std::fprintf(stderr, "gdn bench: %s\n", target.message().c_str());
        return 1;
    }
    const BenchTarget& tgt = **target;
    const int32_t vocab = tgt.vocab;
    std::mt19937 rng(static_cast<uint32_t>(*seed));
    auto make_prompt = [&](int64_t len) {
        std::vector<int32_t> p(len);
        for (auto& t : p) t = static_cast<int32_t>(rng() % std::max(1, vocab - 100));
        return p;
    };
    auto rand_len = [&](int64_t base) {
        const int64_t lo = static_cast<int64_t>(base * (1 - *ratio)),
                      hi = static_cast<int64_t>(base * (1 + *ratio));
        return lo + static_cast<int64_t>(rng() % (hi - lo + 1));
    };
    std::vector<Json> runs;
    std::printf(
        "| concurrency | ok / failed | duration s | req/s | output tok/s | total tok/s | TTFT mean / p50 / "
        "p99 ms | "
        "first text p50 ms | TPOT mean / p50 / p99 ms | ITL mean / p50 / p99 ms "
        "|\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (int C : levels) {
        // Warm-up requests (not measured).
        for (long long w = 0; w < *warmups; ++w) send_one(tgt, make_prompt(16), 4, true);
        struct Item {
            std::vector<int32_t> prompt;
            int max_tokens;
            double at;
        };
        std::vector<Item> items;
        double t_arr = 0;
        std::exponential_distribution<double> gap(std::isinf(rate) ? 1.0 : rate);
        for (long long i = 0; i < *num_prompts; ++i) {
            items.push_back({make_prompt(rand_len(*in_len)), static_cast<int>(rand_len(*out_len)), t_arr});
            if (!std::isinf(rate)) t_arr += gap(rng);
        }
        std::vector<RequestResult> results(items.size());
        std::atomic<size_t> next{0}, finished{0};
        const double t0 = now_seconds();
        std::vector<std::thread> workers;
        for (int w = 0; w < C; ++w)
            workers.emplace_back([&] {
                for (size_t i; (i = next++) < items.size();) {
                    const double wait = t0 + items[i].at - now_seconds();
                    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
                    const double sent = now_seconds() - t0;
                    results[i] =
                        send_one(tgt, items[i].prompt, items[i].max_tokens, !a.has("--no-ignore-eos"));
                    results[i].start = sent;
                    const size_t f = ++finished;
                    if (isatty(2))
                        std::fprintf(stderr, "\rconcurrency %d: %zu/%zu requests", C, f, items.size());
                    else if (f % std::max<size_t>(1, items.size() / 4) == 0)
                        std::fprintf(stderr, "concurrency %d: %zu/%zu requests\n", C, f, items.size());
                }
            });
        for (auto& t : workers) t.join();
        if (isatty(2)) std::fprintf(stderr, "\n");
        Json j = summarize(C, rate, results, now_seconds() - t0);
        for (const auto& r : results)
            if (!r.ok && !r.error.empty()) {
                std::fprintf(stderr, "first failure: %s\n", r.error.c_str());
                break;
            }
        std::printf(
            "| %d | %lld / %lld | %.2f | %.2f | %.1f | %.1f | %.1f / %.1f / %.1f | %.1f | %.1f / %.1f / %.1f "
            "| %.1f / "
            "%.1f / %.1f |\n",
            C, (long long)j["completed"], (long long)j["failed"], j["duration"].get<double>(),
            j["request_throughput"].get<double>(), j["output_throughput"].get<double>(),
            j["total_token_throughput"].get<double>(), j["mean_ttft_ms"].get<double>(),
            j["median_ttft_ms"].get<double>(), j["p99_ttft_ms"].get<double>(),
            j["median_ttft_text_ms"].get<double>(), j["mean_tpot_ms"].get<double>(),
            j["median_tpot_ms"].get<double>(), j["p99_tpot_ms"].get<double>(), j["mean_itl_ms"].get<double>(),
            j["median_itl_ms"].get<double>(), j["p99_itl_ms"].get<double>());
        std::fflush(stdout);
        runs.push_back(j);
    }
    target->reset();
    if (a.has("--json")) {
        std::ofstream f(a.get("--json"));
        f << (runs.size() == 1 ? runs[0] : Json(runs)).dump(2) << "\n";
    }
    if (a.has("--plot")) {
        std::ofstream f(a.get("--plot"));
        f << plot_svg(runs);
    }
    int failed = 0;
    for (const Json& r : runs) failed += r["failed"].get<int>();
    return failed ? 1 : 0;
}

}  // namespace gdn
