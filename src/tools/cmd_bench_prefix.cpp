// gdn bench --multi-turn / --shared-prefix: the workloads prefix caching is for, through the chat API.
//   --multi-turn: N simultaneous conversations (--conversations) of T turns (--turns); each turn sends the
//     whole history, the previous answer and a new user message of ~--turn-tokens tokens, through the
//     chat template. Reports TTFT per turn and the prompt tokens the server computed against those it
//     was sent (from its /metrics prefix-cache counters).
//   --shared-prefix: --num-prompts requests behind one system prompt of ~--system-tokens tokens, each
//     with its own question of ~--input-len tokens: the first alone, the rest at --max-concurrency.
//     Reports the first request's TTFT against the others'.
// Messages are random English words, sized with the server's /tokenize. Greedy; answers of
// --output-len tokens (end-of-turn ignored unless --no-ignore-eos).
#include <httplib.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "core/clock.h"
#include "core/log.h"
#include "tools/args.h"
#include "tools/bench_target.h"
#include "tools/commands.h"
#include "util/json_file.h"

namespace gdn {

namespace {

struct ChatResult {
    bool ok = false;
    double ttft = 0, e2e = 0;
    std::string text, error;
    int64_t prompt_tokens = 0, completion_tokens = 0;
};

httplib::Headers auth(const BenchTarget& t) {
    httplib::Headers h;
    if (!t.api_key.empty()) h.emplace("Authorization", "Bearer " + t.api_key);
    return h;
}

// One streaming chat completion; TTFT is the first chunk with content (the serving benchmark's "first
// text"; its TTFT, vLLM's, is the first chunk: here the role chunk, sent with the first token). The
// multi-turn and shared-prefix reports compare TTFTs of one run with each other, so either serves.
ChatResult send_chat(const BenchTarget& t, const Json& messages, int max_tokens, bool ignore_eos) {
    ChatResult r;
    Json body = {{"model", t.model_name},
                 {"messages", messages},
                 {"max_tokens", max_tokens},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}},
                 {"ignore_eos", ignore_eos},
                 {"temperature", 0}};
    const double t0 = now_seconds();
    StreamOutcome o = post_stream(t, "/chat/completions", body, [&](const Json& j) {
        if (j.contains("usage") && j["usage"].is_object()) {
            r.prompt_tokens = j["usage"].value("prompt_tokens", int64_t(0));
            r.completion_tokens = j["usage"].value("completion_tokens", int64_t(0));
        }
        if (j.contains("choices") && !j["choices"].empty()) {
            const Json& delta = j["choices"][0]["delta"];
            if (delta.is_object() && delta.contains("content") && delta["content"].is_string()) {
                const std::string piece = delta["content"].get<std::string>();
                if (!piece.empty() && r.ttft == 0) r.ttft = now_seconds() - t0;
                r.text += piece;
            }
        }
    });
    r.e2e = o.seconds;
    r.error = o.error;
    r.ok = r.error.empty();
    if (r.ok && r.ttft == 0) r.ttft = r.e2e;
    return r;
}

Result<int64_t> count_tokens(const BenchTarget& t, const std::string& text) {
    httplib::Client c(t.host, t.port);
    auto res = c.Post("/tokenize", auth(t), Json{{"prompt", text}}.dump(), "application/json");
    if (!res || res->status != 200)
        return Status::error("POST /tokenize failed (the conversation modes size messages with it)");
    auto j = parse_json(res->body, "tokenize");
    if (!j || !j->contains("count")) return Status::error("POST /tokenize: no 'count' in the reply");
    return (*j)["count"].get<int64_t>();
}

// Random English words, about n tokens of them (within a few per cent).
Result<std::string> random_text(const BenchTarget& t, int64_t n, std::mt19937& rng) {
    static const char* kWords[] = {
        "the",     "of",     "and",     "a",     "to",       "in",     "is",      "you",     "that",
        "it",      "he",     "was",     "for",   "on",       "are",    "as",      "with",    "his",
        "they",    "at",     "be",      "this",  "have",     "from",   "or",      "one",     "had",
        "by",      "word",   "but",     "not",   "what",     "all",    "were",    "we",      "when",
        "your",    "can",    "said",    "there", "use",      "an",     "each",    "which",   "she",
        "do",      "how",    "their",   "if",    "will",     "up",     "other",   "about",   "out",
        "many",    "then",   "them",    "these", "so",       "some",   "her",     "would",   "make",
        "like",    "him",    "into",    "time",  "has",      "look",   "two",     "more",    "write",
        "go",      "see",    "number",  "no",    "way",      "could",  "people",  "my",      "than",
        "first",   "water",  "been",    "call",  "who",      "oil",    "its",     "now",     "find",
        "long",    "down",   "day",     "did",   "get",      "come",   "made",    "may",     "part",
        "over",    "new",    "sound",   "take",  "only",     "little", "work",    "know",    "place",
        "year",    "live",   "me",      "back",  "give",     "most",   "very",    "after",   "thing",
        "our",     "just",   "name",    "good",  "sentence", "man",    "think",   "say",     "great",
        "where",   "help",   "through", "much",  "before",   "line",   "right",   "too",     "mean",
        "old",     "any",    "same",    "tell",  "boy",      "follow", "came",    "want",    "show",
        "also",    "around", "form",    "three", "small",    "set",    "put",     "end",     "does",
        "another", "well",   "large",   "must",  "big",      "even",   "such",    "because", "turn",
        "here",    "why",    "ask",     "went",  "men",      "read",   "need",    "land",    "different",
        "home",    "us",     "move",    "try",   "kind",     "hand",   "picture", "again",   "change",
        "off",     "play",   "spell",   "air",   "away",     "animal", "house",   "point",   "page",
        "letter",  "mother", "answer",  "found", "study",    "still",  "learn",   "should",  "world"};
    constexpr size_t kN = sizeof(kWords) / sizeof(kWords[0]);
    std::vector<std::string> words;
    auto text_of = [&](size_t k) {
        std::string s;
        for (size_t i = 0; i < k; ++i) s += (i ? " " : "") + words[i];
        return s;
    };
    while (static_cast<int64_t>(words.size()) < 2 * n + 8) words.push_back(kWords[rng() % kN]);
    GDN_ASSIGN_OR_RETURN(int64_t all, count_tokens(t, text_of(words.size())));
    size_t k = std::max<size_t>(1, static_cast<size_t>(double(n) * words.size() / std::max<int64_t>(1, all)));
    k = std::min(k, words.size());
    for (int iter = 0; iter < 6; ++iter) {
        GDN_ASSIGN_OR_RETURN(int64_t have, count_tokens(t, text_of(k)));
        if (std::abs(have - n) <= std::max<int64_t>(2, n / 50)) break;
        const double per_word = double(have) / k;
        k = std::clamp<size_t>(static_cast<size_t>(k + (n - have) / std::max(0.5, per_word)), 1,
                               words.size());
    }
    return text_of(k);
}

// The server's prefix-cache counters (tokens), when it has them.
struct CacheCounters {
    bool present = false;
    double queries = 0, hits = 0;
};

CacheCounters read_cache_counters(const BenchTarget& t) {
    CacheCounters c;
    httplib::Client cl(t.host, t.port);
    auto res = cl.Get("/metrics", auth(t));
    if (!res || res->status != 200) return c;
    auto value = [&](const std::string& name, double* v) {
        const size_t p = res->body.find("\n" + name + " ");
        if (p == std::string::npos) return false;
        *v = std::atof(res->body.c_str() + p + name.size() + 2);
        return true;
    };
    c.present =
        value("gdn_prefix_cache_queries_total", &c.queries) && value("gdn_prefix_cache_hits_total", &c.hits);
    return c;
}

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / v.size();
}

int fail(const std::string& m) {
    std::fprintf(stderr, "gdn bench: %s\n", m.c_str());
    return 1;
}

// gdn bench --multi-turn / --shared-prefix options, checked.
struct PrefixBenchOptions {
    long long convs = 4, turns = 8, turn_tokens = 300, sys_tokens = 0, out_len = 64, n_prompts = 8,
              in_len = 64, seed = 0;
    int concurrency = 1;
    bool ignore_eos = true;
};

Result<PrefixBenchOptions> prefix_bench_options(const Args& a, bool multi) {
    PrefixBenchOptions o;
    GDN_ASSIGN_OR_RETURN(o.convs, a.get_int("--conversations", 4));
    GDN_ASSIGN_OR_RETURN(o.turns, a.get_int("--turns", 8));
    GDN_ASSIGN_OR_RETURN(o.turn_tokens, a.get_int("--turn-tokens", 300));
    GDN_ASSIGN_OR_RETURN(o.sys_tokens, a.get_int("--system-tokens", multi ? 0 : 2000));
    GDN_ASSIGN_OR_RETURN(o.out_len, a.get_int("--output-len", 64));
    GDN_ASSIGN_OR_RETURN(o.n_prompts, a.get_int("--num-prompts", 8));
    GDN_ASSIGN_OR_RETURN(o.in_len, a.get_int("--input-len", 64));
    GDN_ASSIGN_OR_RETURN(o.seed, a.get_int("--seed", 0));
    if (o.convs < 1 || o.turns < 1 || o.turn_tokens < 1 || o.sys_tokens < 0 || o.out_len < 1 ||
        o.n_prompts < 2 || o.in_len < 1)
        return Status::error(
            "--conversations, --turns, --turn-tokens, --output-len and --input-len must be >= 1, "
            "--system-tokens >= 0, --num-prompts >= 2");
    if (a.has("--max-concurrency")) {
        auto l = parse_id_list(a.get("--max-concurrency"));
        if (!l || l->size() != 1 || (*l)[0] < 1)
            return Status::error("--max-concurrency: one positive number in this mode");
        o.concurrency = (*l)[0];
    }
    o.ignore_eos = !a.has("--no-ignore-eos");
    return o;
}

// --multi-turn: conversations that each send their turns one after another; TTFT per turn, and the
// prompt tokens the prefix cache spared. Fills report; counts failed requests.
Status run_multi_turn(const PrefixBenchOptions& o, BenchTarget& t, const Json& system, std::mt19937& rng,
                      Json* out, int* failed_out) {
    Json& report = *out;
    int& failed = *failed_out;
    // All user messages first (sizing them takes /tokenize round trips, not part of the measurement).
    std::vector<std::vector<std::string>> user(o.convs);
    for (auto& c : user)
        for (long long i = 0; i < o.turns; ++i) {
            auto s = random_text(t, o.turn_tokens, rng);
            if (!s) return s.status();
            c.push_back(*s);
        }
    std::vector<std::vector<ChatResult>> res(o.convs, std::vector<ChatResult>(o.turns));
    const CacheCounters before = read_cache_counters(t);
    const double t0 = now_seconds();
    std::vector<std::thread> th;
    for (long long ci = 0; ci < o.convs; ++ci)
        th.emplace_back([&, ci] {
            Json msgs = system;
            for (long long ti = 0; ti < o.turns; ++ti) {
                msgs.push_back({{"role", "user"}, {"content", user[ci][ti]}});
                res[ci][ti] = send_chat(t, msgs, static_cast<int>(o.out_len), o.ignore_eos);
                if (!res[ci][ti].ok) return;
                msgs.push_back({{"role", "assistant"}, {"content", res[ci][ti].text}});
                if (isatty(2))
                    std::fprintf(stderr, "\rconversation %lld: turn %lld/%lld ", ci + 1, ti + 1,
                                 (long long)o.turns);
            }
        });
    for (auto& x : th) x.join();
    if (isatty(2)) std::fprintf(stderr, "\n");
    const double duration = now_seconds() - t0;
    const CacheCounters after = read_cache_counters(t);
    std::printf("| turn | prompt tokens (mean) | TTFT mean ms | TTFT min / max ms |\n|---|---|---|---|\n");
    Json per_turn_json = Json::array();
    int64_t prompt_total = 0;
    std::vector<double> ttft_of_turn(o.turns);
    for (long long ti = 0; ti < o.turns; ++ti) {
        std::vector<double> tt;
        double ptok = 0;
        for (long long ci = 0; ci < o.convs; ++ci) {
            const ChatResult& r = res[ci][ti];
            if (!r.ok) {
                ++failed;
                if (!r.error.empty())
                    std::fprintf(stderr, "conversation %lld turn %lld: %s\n", ci + 1, ti + 1,
                                 r.error.c_str());
                continue;
            }
            tt.push_back(1e3 * r.ttft);
            ptok += r.prompt_tokens;
            prompt_total += r.prompt_tokens;
        }
        ttft_of_turn[ti] = mean(tt);
        const double mn = tt.empty() ? 0 : *std::min_element(tt.begin(), tt.end());
        const double mx = tt.empty() ? 0 : *std::max_element(tt.begin(), tt.end());
        std::printf("| %lld | %.0f | %.1f | %.1f / %.1f |\n", ti + 1, tt.empty() ? 0.0 : ptok / tt.size(),
                    ttft_of_turn[ti], mn, mx);
        per_turn_json.push_back({{"turn", ti + 1},
                                 {"mean_prompt_tokens", tt.empty() ? 0.0 : ptok / tt.size()},
                                 {"mean_ttft_ms", ttft_of_turn[ti]},
                                 {"min_ttft_ms", mn},
                                 {"max_ttft_ms", mx}});
    }
    report = {{"mode", "multi-turn"},
              {"conversations", o.convs},
              {"turns", o.turns},
              {"turn_tokens", o.turn_tokens},
              {"system_tokens", o.sys_tokens},
              {"output_len", o.out_len},
              {"duration_s", duration},
              {"per_turn", per_turn_json},
              {"prompt_tokens", prompt_total},
              {"ttft_last_over_first", ttft_of_turn[0] > 0 ? ttft_of_turn.back() / ttft_of_turn[0] : 0.0}};
    std::printf("\nTTFT of turn %lld / turn 1: %.2f; %lld prompt tokens sent in %.1f s", (long long)o.turns,
                report["ttft_last_over_first"].get<double>(), (long long)prompt_total, duration);
    if (after.present && before.present) {
        const double q = after.queries - before.queries, h = after.hits - before.hits;
        report["prefix_cache_queried_tokens"] = q;
        report["prefix_cache_hit_tokens"] = h;
        report["prefill_computed_over_prompt"] = q > 0 ? (q - h) / q : 0.0;
        std::printf("; prefill computed %.0f of %.0f prompt tokens (%.1f%%)", q - h, q,
                    q > 0 ? 100 * (q - h) / q : 0.0);
    } else {
        std::printf("; the server reports no gdn prefix-cache counters");
    }
    std::printf("\n");
    return Status::ok();
}

// --shared-prefix: requests that share a long system prompt; the first one's TTFT against the others'.
Status run_shared_prefix(const PrefixBenchOptions& o, BenchTarget& t, const Json& system, std::mt19937& rng,
                         Json* out, int* failed_out) {
    Json& report = *out;
    int& failed = *failed_out;
    std::vector<std::string> questions;
    for (long long i = 0; i < o.n_prompts; ++i) {
        auto s = random_text(t, o.in_len, rng);
        if (!s) return s.status();
        questions.push_back(*s);
    }
    auto msgs_of = [&](size_t i) {
        Json m = system;
        m.push_back({{"role", "user"}, {"content", questions[i]}});
        return m;
    };
    const CacheCounters before = read_cache_counters(t);
    std::vector<ChatResult> res(questions.size());
    res[0] = send_chat(t, msgs_of(0), static_cast<int>(o.out_len), o.ignore_eos);
    std::atomic<size_t> next{1};
    std::vector<std::thread> th;
    for (int w = 0; w < o.concurrency; ++w)
        th.emplace_back([&] {
            for (size_t i; (i = next++) < questions.size();)
                res[i] = send_chat(t, msgs_of(i), static_cast<int>(o.out_len), o.ignore_eos);
        });
    for (auto& x : th) x.join();
    const CacheCounters after = read_cache_counters(t);
    std::vector<double> rest;
    for (size_t i = 0; i < res.size(); ++i) {
        if (!res[i].ok) {
            ++failed;
            if (!res[i].error.empty()) std::fprintf(stderr, "request %zu: %s\n", i + 1, res[i].error.c_str());
        } else if (i > 0) {
            rest.push_back(1e3 * res[i].ttft);
        }
    }
    const double first = 1e3 * res[0].ttft;
    std::sort(rest.begin(), rest.end());
    const double med = rest.empty() ? 0 : rest[rest.size() / 2];
    std::printf(
        "| requests | prompt tokens (first) | TTFT first ms | TTFT others mean / median / max ms | "
        "others / first |\n"
        "|---|---|---|---|---|\n| %zu | %lld | %.1f | %.1f / %.1f / %.1f | %.3f |\n",
        res.size(), (long long)res[0].prompt_tokens, first, mean(rest), med, rest.empty() ? 0.0 : rest.back(),
        first > 0 ? mean(rest) / first : 0.0);
    report = {{"mode", "shared-prefix"},
              {"requests", res.size()},
              {"system_tokens", o.sys_tokens},
              {"input_len", o.in_len},
              {"output_len", o.out_len},
              {"max_concurrency", o.concurrency},
              {"first_prompt_tokens", res[0].prompt_tokens},
              {"first_ttft_ms", first},
              {"others_mean_ttft_ms", mean(rest)},
              {"others_median_ttft_ms", med},
              {"others_over_first", first > 0 ? mean(rest) / first : 0.0}};
    if (after.present && before.present) {
        const double q = after.queries - before.queries, h = after.hits - before.hits;
        report["prefix_cache_queried_tokens"] = q;
        report["prefix_cache_hit_tokens"] = h;
        std::printf("prefill computed %.0f of %.0f prompt tokens (%.1f%%)\n", q - h, q,
                    q > 0 ? 100 * (q - h) / q : 0.0);
    }
    return Status::ok();
}

}  // namespace

int cmd_bench_prefix(Args& a) {
    const bool multi = a.has("--multi-turn");
    if (multi && a.has("--shared-prefix"))
        return fail("--multi-turn and --shared-prefix are separate runs: pick one");
    auto opts = prefix_bench_options(a, multi);
    if (!opts) return fail(opts.message());
    const PrefixBenchOptions& o = *opts;
    BenchSizing size;
    size.max_num_seqs = multi ? static_cast<int>(o.convs) : o.concurrency;
    const int64_t per_turn = o.turn_tokens * 11 / 10 + o.out_len + 32;
    size.max_model_len =
        static_cast<int>(multi ? o.sys_tokens * 11 / 10 + o.turns * per_turn + 64
                               : o.sys_tokens * 11 / 10 + o.in_len * 11 / 10 + o.out_len + 64);
    auto target_or = open_bench_target(a, size);
    if (!target_or) return fail(target_or.message());
    BenchTarget& t = **target_or;
    std::mt19937 rng(static_cast<uint32_t>(o.seed));
    auto system = Json::array();
    if (o.sys_tokens > 0) {
        auto s = random_text(t, o.sys_tokens, rng);
        if (!s) return fail(s.message());
        system.push_back({{"role", "system"}, {"content", *s}});
    }
    // Warm-up (not measured): one short chat.
    send_chat(t, Json::array({{{"role", "user"}, {"content", "hello there"}}}), 4, true);
    Json report;
    int failed = 0;
    Status st = multi ? run_multi_turn(o, t, system, rng, &report, &failed)
                      : run_shared_prefix(o, t, system, rng, &report, &failed);
    if (!st) return fail(st.message());
    if (a.has("--json")) {
        std::ofstream f(a.get("--json"));
        f << report.dump(2) << "\n";
    }
    return failed ? 1 : 0;
}

}  // namespace gdn
