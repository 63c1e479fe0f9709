// gdn bench --concurrency: engine decode throughput with C requests decoding together, the host time per
// step outside the forward, and with --speculative-config the drafts' acceptance (--speculation-ab: plain
// and speculative engines on the same prompts, their steps interleaved A B B A).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include "core/clock.h"
#include "core/log.h"
#include "core/profiler.h"
#include "engine/engine.h"
#include "engine/gguf_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tools/bench_modes.h"
#include "tools/model_loading.h"
#include "util/json_file.h"

namespace gdn {

namespace {

// One chat message per line of `path`, rendered with the checkpoint's template and tokenized.
Result<std::vector<std::vector<int32_t>>> read_chat_prompts(const std::string& path, const Tokenizer& tok) {
    GDN_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
    GDN_ASSIGN_OR_RETURN(auto ct, ChatTemplate::create(tok));
    std::vector<std::vector<int32_t>> prompts;
    size_t b = 0;
    for (size_t e; b < text.size(); b = e + 1) {
        e = text.find('\n', b);
        if (e == std::string::npos) e = text.size();
        if (e == b) continue;
        ChatRequest req;
        req.messages = Json::array({{{"role", "user"}, {"content", text.substr(b, e - b)}}});
        GDN_ASSIGN_OR_RETURN(std::string rendered, ct->render(req));
        prompts.push_back(tok.encode(rendered));
    }
    return prompts;
}

// One engine at one concurrency: its requests, and what its timed steps produced.
struct Run {
    std::unique_ptr<Engine> engine;
    size_t next_prompt = 0;
    int64_t tokens = 0, steps = 0;
    double total = 0, host = 0, fwd = 0;
    EngineStats before;
};

// The engines of one concurrency level C and their timed steps. Random prompts: C requests, prefilled
// first, then --tg steps timed. Chat prompts: all of them, C at a time, timed from the first decode to
// the end (prefills of later prompts included).
class Level {
  public:
    Level(const BenchSetup& s, std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tok,
          const std::vector<std::vector<int32_t>>& chat_prompts, const SpeculativeConfig& spec, int C)
        : s_(s), model_(std::move(model)), tok_(std::move(tok)), chat_(chat_prompts), C_(C) {
        sp_.temperature = 0;
        sp_.ignore_eos = chat_.empty();
        sp_.max_tokens = chat_.empty() ? static_cast<int>(s.tg) * (1 + spec.num_speculative_tokens) + 4
                                       : static_cast<int>(s.tg);
    }

    Status make_run(const SpeculativeConfig& sc, Run* r) const {
        EngineConfig ec;
        ec.bf16 = s_.forward.bf16_activations;
        ec.kv_dtype = s_.kv_dtype;
        ec.max_num_seqs = C_;
        ec.max_num_batched_tokens = std::max(512, C_ * (1 + sc.num_speculative_tokens) + kPrefillChunkAlign);
        int64_t longest = 32;
        for (const auto& p : chat_) longest = std::max<int64_t>(longest, p.size());
        ec.max_model_len = static_cast<int>(longest + sp_.max_tokens + 2 + sc.num_speculative_tokens);
        ec.speculative = sc;
        ec.prefault_memory = true;  // as gdn serve: no page faults inside the timed steps
        ec.cache_memory =
            Engine::cache_bytes_for(model_->config(), C_, ec.max_model_len, s_.kv_dtype, ec.block_size, sc);
        GDN_RETURN_IF_ERROR(apply_prefix_cache_options(*s_.args, &ec));
        GDN_ASSIGN_OR_RETURN(r->engine, Engine::create(model_, tok_, ec));
        return Status::ok();
    }
    void start(Run& r) {
        rng_.seed(static_cast<uint32_t>(C_));  // both runs of an A/B pair get the same prompts
        for (int i = 0; i < C_; ++i) add(r);
        for (int i = 0; i < 3; ++i) r.engine->step();  // prefills (32 tokens each) + first decodes
        r.before = r.engine->stats();
    }
    bool more(const Run& r) const {
        return (chat_.empty() ? r.steps < s_.tg : true) && r.engine->has_unfinished();
    }
    void timed_step(Run& r) {
        const double t0 = now_seconds();
        auto outs = r.engine->step();
        r.total += now_seconds() - t0;
        r.host += r.engine->last_step_host_seconds();
        r.fwd += r.engine->last_step_forward_seconds();
        ++r.steps;
        for (const RequestOutput& o : outs) {
            r.tokens += static_cast<int64_t>(o.new_tokens.size());
            if (o.finish != FinishReason::NONE) add(r);
        }
    }
    // The run's table row (printed) and JSON record.
    Json report(const Run& r, const char* label) const {
        const EngineStats after = r.engine->stats();
        SpecCounters d = after.spec;  // this run's counters (the warm-up steps excluded)
        d.verify_steps -= r.before.spec.verify_steps;
        d.drafted -= r.before.spec.drafted;
        d.accepted -= r.before.spec.accepted;
        std::string per;
        for (size_t i = 0; i < d.drafted_at.size(); ++i) {
            const auto& b = r.before.spec;
            const int64_t dr = d.drafted_at[i] - (i < b.drafted_at.size() ? b.drafted_at[i] : 0);
            const int64_t ac = d.accepted_at[i] - (i < b.accepted_at.size() ? b.accepted_at[i] : 0);
            per += strprintf("%s%.2f", per.empty() ? "" : " ", dr ? double(ac) / dr : 0.0);
        }
        const double tps = r.tokens / r.total;
        std::printf("| %d%s | %.1f | %.1f | %.2f | %.2f | %.3f | %.2f%% | %.2f | %s |\n", C_, label, tps,
                    tps / C_, 1e3 * r.total / r.steps, 1e3 * r.fwd / r.steps, 1e3 * r.host / r.steps,
                    100.0 * r.host / r.total, d.mean_acceptance_length(), per.empty() ? "-" : per.c_str());
        if (!after.spec_cost_model.empty()) std::printf("cost model: %s\n", after.spec_cost_model.c_str());
        return Json{{"concurrency", C_},
                    {"decode_tps", tps},
                    {"step_ms", 1e3 * r.total / r.steps},
                    {"forward_ms", 1e3 * r.fwd / r.steps},
                    {"host_ms_per_step", 1e3 * r.host / r.steps},
                    {"host_share", r.host / r.total},
                    {"tokens", r.tokens},
                    {"drafted", d.drafted},
                    {"accepted", d.accepted},
                    {"mean_acceptance_length", d.mean_acceptance_length()}};
    }

  private:
    void add(Run& r) {
        if (chat_.empty()) {
            std::vector<int32_t> p(32);
            for (auto& t : p) t = static_cast<int32_t>(rng_() % model_->config().vocab);
            r.engine->add_request(Prompt::from_ids(p), sp_);
        } else if (r.next_prompt < chat_.size()) {
            r.engine->add_request(Prompt::from_ids(chat_[r.next_prompt++]), sp_);
        }
    }

    const BenchSetup& s_;
    std::shared_ptr<const Model> model_;
    std::shared_ptr<const Tokenizer> tok_;
    const std::vector<std::vector<int32_t>>& chat_;
    const int C_;
    SamplingParams sp_;
    std::mt19937 rng_{1};
};

}  // namespace

int bench_concurrency(const BenchSetup& s, std::shared_ptr<const Model> model) {
    const Args& args = *s.args;
    auto levels = parse_id_list(args.get("--concurrency"));
    if (!levels) return bench_fail("--concurrency: " + levels.message(), 2);
    auto spec = speculative_config(args);
    if (!spec) return bench_fail(spec.message(), 2);
    const bool ab = args.has("--speculation-ab");
    if (ab && !spec->enabled())
        return bench_fail("--speculation-ab compares against --speculative-config: give one", 2);
    // Chat prompts from a file (rendered with the checkpoint's template), else random 32-token prompts.
    std::vector<std::vector<int32_t>> chat_prompts;
    std::shared_ptr<const Tokenizer> tok;
    if (args.has("--prompts-file")) {
        auto t = load_model_tokenizer(args.get("--model"));
        if (!t) return bench_fail(t.message(), 1);
        tok = *t;
        auto p = read_chat_prompts(args.get("--prompts-file"), *tok);
        if (!p) return bench_fail(p.message(), 1);
        if (p->empty()) return bench_fail(args.get("--prompts-file") + " holds no prompts", 2);
        chat_prompts = std::move(*p);
    }
    std::printf("speculation: %s\n", spec->describe().c_str());
    std::printf(
        "| concurrency | decode t/s | per-sequence t/s | step ms | forward ms | host ms outside forward | "
        "host share | mean acceptance length | acceptance per position |\n"
        "|---|---|---|---|---|---|---|---|---|\n");
    Json rows = Json::array();
    double single = 0;
    for (int C : *levels) {
        if (C < 1) continue;
        Level level(s, model, tok, chat_prompts, *spec, C);
        if (args.has("--profile")) {
            Profiler::get().clear();
            Profiler::get().enable(true);
        }
        if (!ab) {
            Run r;
            if (Status st = level.make_run(*spec, &r); !st) return bench_fail(st.message(), 1);
            level.start(r);
            while (level.more(r)) level.timed_step(r);
            Json row = level.report(r, "");
            const double tps = row["decode_tps"].get<double>();
            if (C == 1) single = tps;
            row["speedup_vs_1"] = single > 0 ? tps / single : 0.0;
            rows.push_back(row);
        } else {
            // Plain (A) and speculative (B) engines on the same prompts, their steps interleaved A B B A:
            // the VM's bandwidth drifts over seconds, so only a paired ratio means anything.
            Run a, b;
            for (auto [sc, r] : {std::pair{SpeculativeConfig{}, &a}, std::pair{*spec, &b}})
                if (Status st = level.make_run(sc, r); !st) return bench_fail(st.message(), 1);
            level.start(a);
            level.start(b);
            for (int64_t i = 0; level.more(a) || level.more(b); ++i) {
                Run& first = i % 2 == 0 ? a : b;
                Run& second = i % 2 == 0 ? b : a;
                if (level.more(first)) level.timed_step(first);
                if (level.more(second)) level.timed_step(second);
            }
            Json ra = level.report(a, " plain"), rb = level.report(b, " spec");
            const double ratio = rb["decode_tps"].get<double>() / ra["decode_tps"].get<double>();
            std::printf("| %d | speculation / plain tokens/s: **%.3f** | | | | | | | |\n", C, ratio);
            rows.push_back({{"concurrency", C}, {"plain", ra}, {"speculative", rb}, {"ratio", ratio}});
        }
        if (args.has("--profile")) {
            Profiler::get().enable(false);
            std::printf("concurrency %d:\n%s", C, Profiler::get().report().c_str());
        }
    }
    if (args.has("--json")) {
        Json out = Json::object();
        out["concurrency"] = rows;
        std::ofstream f(args.get("--json"));
        f << out.dump(2) << "\n";
    }
    return 0;
}

}  // namespace gdn
