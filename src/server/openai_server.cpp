#include "server/openai_server.h"

#include <malloc.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "server/arrival_wait.h"
#include "server/completion_request.h"
#include "server/completion_response.h"
#include "server/http_server.h"
#include "server/job.h"
#include "server/metrics.h"
#include "server/output_parser.h"
#include "tokenizer/chat_template.h"
#include "util/json_file.h"

namespace gdn {

namespace {

int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

ApiError shutting_down() {
    return {503, "the server is shutting down", "server_error", ""};
}

// Constant-time comparison: the time taken says nothing about how much of a guessed key was right.
bool same_secret(const std::string& a, const std::string& b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    const size_t n = std::max(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
        const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
        const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
        diff |= static_cast<unsigned char>(x ^ y);
    }
    return diff == 0;
}

// Gives the allocator's free memory back to the system: glibc keeps freed heap pages resident (in the
// probe of issue 53, 9.5 GB stayed after two hostile schemas were refused).
void release_free_memory() {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

}  // namespace

struct OpenAIServer::Impl {
    explicit Impl(size_t grammar_cache_bytes) : grammars(grammar_cache_bytes) {}
    std::unique_ptr<Engine> engine;
    std::shared_ptr<const Tokenizer> tok;
    ServerConfig cfg;
    RequestLimits limits;
    ParserChoice parsers;
    GrammarCache grammars;                // shared by the request workers (limits.grammars)
    Status config_status = Status::ok();  // run() answers it (an unknown parser name)
    std::unique_ptr<HttpServer> http;
    std::thread engine_thread;
    std::atomic<bool> stopping{false};
    std::atomic<int> port{0};

    std::mutex q_mu;
    std::condition_variable q_cv;
    std::deque<std::shared_ptr<Job>> incoming;
    std::map<int64_t, std::shared_ptr<Job>> active;  // engine id -> job (engine thread only)
    std::atomic<int64_t> next_response_id{1};
    std::atomic<int> in_flight{0};           // admitted and not finished (incoming + in the engine)
    std::atomic<uint64_t> requests_seen{0};  // completion requests, answered or refused (memory trim)

    // Metrics (engine thread writes, /metrics reads, under m_mu).
    std::mutex m_mu;
    EngineStats stats;
    uint64_t requests_ok = 0, requests_aborted = 0, requests_rejected = 0;
    // --arrival-wait-ms: steps held for the next requests of clients whose requests had just ended.
    uint64_t arrival_waits_answered = 0, arrival_waits_expired = 0;
    double arrival_wait_seconds = 0;
    double arrival_answered_share = 1;  // ArrivalWait::answered_share(): below kMinAnswered, holds only probe
    std::atomic<uint64_t> requests_refused{0};  // 503: over --max-queue
    Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
    Histogram tpot{{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1}};
    Histogram e2e{{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}};

    void engine_loop();
    // Logs what the speculative cost model decodes with when it changes (at most every 10 s): why a
    // server with --speculative-config drafts fewer tokens than asked, or none (engine thread).
    std::vector<int> logged_best_k;  // the decisions last logged (SpecCostModel::Snapshot::best_k)
    double logged_at = -1e9;
    void log_speculation_decisions(const EngineStats& st) {
        const std::vector<int>& k = st.spec_cost.best_k;
        if (k == logged_best_k || now_seconds() - logged_at < 10) return;
        logged_best_k = k;
        const std::string d = st.spec_cost.decisions();
        if (d.empty()) return;  // nothing decided yet
        GDN_LOG_INFO("speculation: the cost model decodes with %s (%s)", d.c_str(),
                     st.spec_cost_model.c_str());
        logged_at = now_seconds();
    }
    void finish_job(Job& job, std::optional<ApiError> error);
    HandlerResult handle_completion(const HttpRequest& req, const Waker& wake, bool chat);
    HandlerResult handle_tokenize(const HttpRequest& req);
    HandlerResult handle_detokenize(const HttpRequest& req);
    HttpResponse metrics_text();
    std::optional<ApiError> check_key(const HttpRequest& req) const;
    void register_routes();
    void cancel(const std::shared_ptr<Job>& job) {
        job->cancelled = true;
        std::vector<int64_t> ids;
        {
            std::lock_guard<std::mutex> lock(job->mu);
            ids = job->engine_ids;
        }
        for (int64_t id : ids) engine->abort(id);  // thread-safe: applied at the next step
        q_cv.notify_one();
    }
};

// Ends a job that never reached the engine, or that the engine refused.
void OpenAIServer::Impl::finish_job(Job& job, std::optional<ApiError> error) {
    {
        std::lock_guard<std::mutex> lock(job.mu);
        job.error = std::move(error);
        job.done = true;
    }
    in_flight--;
    job.wake();
}

void OpenAIServer::Impl::engine_loop() {
    std::vector<std::shared_ptr<Job>> fresh;
    ArrivalWait arrival_wait(cfg.arrival_wait_ms);
    int ended_last_step = 0;  // requests the last step ended (stop or length)
    double step_end = 0, last_step_ms = 0;
    int engine_waiting = 0;
    uint64_t trimmed_at = 0;
    double last_trim = 0;
    bool trim = false;
    while (true) {
        {
            std::unique_lock<std::mutex> lock(q_mu);
            auto arrived_since_step = [&](bool since) {
                int n = 0;
                for (const auto& j : incoming) n += (j->t_arrival >= step_end) == since;
                return n;
            };
            if (incoming.empty() && !engine->has_unfinished() && !stopping) {
                // Idle after requests: what they freed (a schema's grammar and JSON, prompts, outputs) goes
                // back to the system, once a second at most, outside the lock (a large heap takes a while).
                const uint64_t seen = requests_seen.load();
                trim = seen != trimmed_at && now_seconds() - last_trim > 1.0;
                if (trim) trimmed_at = seen, last_trim = now_seconds();
                arrival_wait.idle();
                {
                    std::lock_guard<std::mutex> ml(m_mu);
                    arrival_answered_share = arrival_wait.answered_share();
                }
                q_cv.wait_for(lock, std::chrono::milliseconds(50));
            } else if (const double budget = arrival_wait.budget_ms(
                           ended_last_step, last_step_ms, engine_waiting + arrived_since_step(false));
                       budget > 0 && !stopping) {
                const double t0 = now_seconds();
                const bool came = q_cv.wait_for(lock, std::chrono::duration<double, std::milli>(budget), [&] {
                    return stopping || arrived_since_step(true) >= ended_last_step;
                });
                arrival_wait.observe(came);
                std::lock_guard<std::mutex> ml(m_mu);
                arrival_wait_seconds += now_seconds() - t0;
                (came ? arrival_waits_answered : arrival_waits_expired)++;
                arrival_answered_share = arrival_wait.answered_share();
            }
            ended_last_step = 0;  // one wait per step
            fresh.assign(incoming.begin(), incoming.end());
            incoming.clear();
        }
        if (trim) release_free_memory();
        trim = false;
        if (stopping && fresh.empty() && active.empty() && !engine->has_unfinished()) break;
        for (auto& job : fresh) {
            if (job->cancelled || stopping) {  // the client left (or we stop) before it reached the engine
                {
                    std::lock_guard<std::mutex> ml(m_mu);
                    requests_aborted++;
                }
                finish_job(*job, stopping ? shutting_down() : ApiError::invalid("cancelled"));
                continue;
            }
            Prompt prompt = Prompt::from_ids(std::move(job->ids));
            prompt.message_ends = std::move(job->message_ends);
            auto id = engine->add_requests(prompt, job->params, job->n);
            if (!id) {
                // Everything a client controls was checked before admission: this is our bug or a limit
                // the checks missed, so it is logged, and the client hears what the engine said.
                GDN_LOG_WARN("engine refused an admitted request: %s", id.message().c_str());
                {
                    std::lock_guard<std::mutex> ml(m_mu);
                    requests_rejected++;
                }
                finish_job(*job, ApiError::invalid(id.message()));
                continue;
            }
            {
                std::lock_guard<std::mutex> lock(job->mu);
                job->engine_ids = *id;
                job->engine_id = (*id)[0];
                job->accepted = true;
            }
            for (int64_t eid : *id) {
                if (job->cancelled) engine->abort(eid);  // the client left while it was queued
                active[eid] = job;
            }
            job->wake();
        }
        if (stopping)
            for (auto& [id, job] : active) engine->abort(id);
        if (!engine->has_unfinished()) continue;
        const double t_step = now_seconds();
        const auto outs = engine->step();
        const double t = now_seconds();
        step_end = t;
        last_step_ms = 1e3 * (t - t_step);
        for (const RequestOutput& o : outs) {
            auto it = active.find(o.id);
            if (it == active.end()) continue;
            Job& job = *it->second;
            {
                std::lock_guard<std::mutex> lock(job.mu);
                if (!o.new_tokens.empty()) {
                    if (job.t_first == 0) job.t_first = t;
                    job.t_last = t;
                }
                job.outs.push_back(o);
                if (o.finish != FinishReason::NONE && ++job.finished == job.n) job.done = true;
            }
            if (o.finish != FinishReason::NONE && job.done) {  // the last of its samples
                in_flight--;
                std::lock_guard<std::mutex> ml(m_mu);
                if (o.finish == FinishReason::ABORT) {
                    requests_aborted++;
                } else {
                    requests_ok++;
                    ended_last_step++;
                    if (job.t_first > 0) ttft.observe(job.t_first - job.t_arrival);
                    if (o.completion_tokens > 1)
                        tpot.observe((job.t_last - job.t_first) / (o.completion_tokens - 1));
                    e2e.observe(t - job.t_arrival);
                }
            }
            job.wake();
            if (o.finish != FinishReason::NONE) active.erase(it);
        }
        std::lock_guard<std::mutex> ml(m_mu);
        stats = engine->stats();
        engine_waiting = stats.waiting;
        log_speculation_decisions(stats);
    }
    std::lock_guard<std::mutex> ml(m_mu);
    stats = engine->stats();
}

std::optional<ApiError> OpenAIServer::Impl::check_key(const HttpRequest& req) const {
    if (cfg.api_key.empty()) return std::nullopt;
    const std::string h(req.header("authorization"));
    if (same_secret(h, "Bearer " + cfg.api_key)) return std::nullopt;
    return ApiError{
        401, h.empty() ? "Missing API key: send 'Authorization: Bearer <key>'" : "Incorrect API key provided",
        "authentication_error", ""};
}

namespace {

// The body as a JSON object, or the error to answer.
std::optional<ApiError> parse_body(const HttpRequest& req, Json* out) {
    auto parsed = parse_json_limited(req.body, "request body", kRequestObjectLimits);
    if (!parsed) return ApiError::invalid(parsed.message());
    if (!parsed->is_object()) return ApiError::invalid("the request body must be a JSON object");
    *out = std::move(*parsed);
    return std::nullopt;
}

}  // namespace

HandlerResult OpenAIServer::Impl::handle_completion(const HttpRequest& req, const Waker& wake, bool chat) {
    requests_seen++;
    if (auto e = check_key(req)) return error_response(*e);
    Json body;
    if (auto e = parse_body(req, &body)) return error_response(*e);
    if (chat && !cfg.default_chat_template_kwargs.empty()) {  // the request's own kwargs win
        Json& kw = body["chat_template_kwargs"];
        if (kw.is_null()) kw = Json::object();
        if (kw.is_object())
            for (auto it = cfg.default_chat_template_kwargs.begin();
                 it != cfg.default_chat_template_kwargs.end(); ++it)
                if (!kw.contains(it.key())) kw[it.key()] = it.value();
    }
    CompletionRequest cr;
    if (auto e = parse_completion_request(body, chat, limits, &cr)) return error_response(*e);
    auto job = std::make_shared<Job>();
    if (auto e = tokenize_prompt(&cr, *tok, engine->chat_template(), limits, &job->ids,
                                 engine->config().enable_prefix_caching ? &job->message_ends : nullptr))
        return error_response(*e);
    // Admission: beyond the running requests, at most max_queue wait.
    if (in_flight.fetch_add(1) >= engine->config().max_num_seqs + cfg.max_queue) {
        in_flight--;
        requests_refused++;
        return error_response(
            {503,
             strprintf("the server is at capacity (%d requests running or queued); retry later",
                       engine->config().max_num_seqs + cfg.max_queue),
             "server_error", ""});
    }
    if (stopping) {
        in_flight--;
        return error_response(shutting_down());
    }
    job->params = cr.params;
    job->n = cr.n;
    job->wake = wake;
    job->t_arrival = now_seconds();
    const std::string rid = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_response_id++);
    ResponseOptions ro;
    ro.id = rid;
    ro.model = cfg.served_model_name;
    ro.parsers = parsers;
    if (cr.echo) {
        if (!cr.prompt.text.empty()) {
            ro.echo = cr.prompt.text;
        } else {
            auto text = tok->decode(job->ids, false);
            ro.echo = text ? *text : std::string();
        }
    }
    ro.cancel = [this, job] { cancel(job); };
    auto resp = make_completion_response(job, cr, std::move(ro), tok);
    {
        std::lock_guard<std::mutex> lock(q_mu);
        incoming.push_back(job);
    }
    q_cv.notify_one();
    return resp;
}

HandlerResult OpenAIServer::Impl::handle_tokenize(const HttpRequest& req) {
    if (auto e = check_key(req)) return error_response(*e);
    Json b;
    if (auto e = parse_body(req, &b)) return error_response(*e);
    std::string text;
    if (auto m = b.find("messages"); m != b.end()) {
        if (Status st = validate_messages(*m); !st)
            return error_response(ApiError::invalid(st.message(), "messages"));
        const ChatTemplate* ct = engine->chat_template();
        if (!ct) return error_response(ApiError::invalid("this model has no chat template", "messages"));
        ChatRequest cr;
        cr.messages = *m;
        auto rendered = ct->render(cr);
        if (!rendered) return error_response(ApiError::invalid(rendered.message(), "messages"));
        text = *rendered;
    } else if (auto p = b.find("prompt"); p != b.end() && p->is_string()) {
        text = p->get<std::string>();
    } else {
        return error_response(ApiError::invalid("'prompt' (a string) or 'messages' is required"));
    }
    auto ids = tok->encode(text);
    return json_response(
        200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine->config().max_model_len}});
}

HandlerResult OpenAIServer::Impl::handle_detokenize(const HttpRequest& req) {
    if (auto e = check_key(req)) return error_response(*e);
    Json b;
    if (auto e = parse_body(req, &b)) return error_response(*e);
    auto t = b.find("tokens");
    if (t == b.end())
        return error_response(ApiError::invalid("'tokens' (a list of integers) is required", "tokens"));
    std::vector<int32_t> ids;
    if (auto e = read_token_ids(*t, "tokens", limits.vocab, &ids)) return error_response(*e);
    auto text = tok->decode(ids, false);
    if (!text) return error_response(ApiError::invalid(text.message(), "tokens"));
    return json_response(200, {{"prompt", *text}});
}

HttpResponse OpenAIServer::Impl::metrics_text() {
    std::string t;
    auto gauge = [&](const char* name, const char* help, double v, const char* type = "gauge") {
        t += strprintf("# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
    };
    {
        std::lock_guard<std::mutex> lock(m_mu);
        const EngineStats& st = stats;
        gauge("gdn_requests_running", "requests being processed", st.running);
        gauge("gdn_requests_waiting", "requests waiting to be scheduled", st.waiting);
        gauge("gdn_requests_finished_total", "requests finished (stop or length)", double(requests_ok),
              "counter");
        gauge("gdn_requests_aborted_total", "requests aborted (client gone, shutdown)",
              double(requests_aborted), "counter");
        gauge("gdn_requests_rejected_total", "admitted requests the engine rejected",
              double(requests_rejected), "counter");
        gauge("gdn_arrival_waits_total",
              "steps held for new requests after a step that ended requests (--arrival-wait-ms)",
              double(arrival_waits_answered + arrival_waits_expired), "counter");
        gauge("gdn_arrival_waits_expired_total", "of those, holds that ended without the requests arriving",
              double(arrival_waits_expired), "counter");
        gauge("gdn_arrival_wait_seconds_total", "time steps were held for new requests", arrival_wait_seconds,
              "counter");
        gauge("gdn_arrival_wait_answered_share",
              "recent holds' share that their requests answered (below 0.3 holds only probe; 1 again when "
              "idle)",
              arrival_answered_share);
        gauge("gdn_prompt_tokens_total", "prompt tokens received", double(st.prompt_tokens), "counter");
        gauge("gdn_generation_tokens_total", "tokens generated", double(st.generation_tokens), "counter");
        gauge("gdn_kv_blocks_total", "KV cache blocks", st.kv_blocks_total);
        gauge("gdn_kv_blocks_free", "free KV cache blocks", st.kv_blocks_free);
        gauge("gdn_kv_cache_usage", "fraction of KV blocks in use",
              st.kv_blocks_total ? 1.0 - double(st.kv_blocks_free) / st.kv_blocks_total : 0.0);
        gauge("gdn_state_slots_total", "GDN state slots", st.state_slots_total);
        gauge("gdn_state_slots_free", "free GDN state slots", st.state_slots_free);
        gauge("gdn_preemptions_total", "requests pre-empted (recompute)", double(st.preemptions), "counter");
        // Prefix caching (vLLM's prefix_cache_queries / prefix_cache_hits, in tokens).
        const PrefixCacheStats& pc = st.prefix;
        gauge("gdn_prefix_cache_queries_total", "prompt tokens looked up in the prefix cache",
              double(pc.query_tokens), "counter");
        gauge("gdn_prefix_cache_hits_total", "prompt tokens found in the prefix cache (not computed)",
              double(pc.hit_tokens), "counter");
        gauge("gdn_prefix_cache_snapshots", "GDN state snapshots held", pc.snapshots);
        gauge("gdn_prefix_cache_snapshots_capacity", "GDN state snapshots --prefix-cache-memory holds",
              pc.snapshot_capacity);
        gauge("gdn_prefix_cache_snapshot_bytes", "memory held by GDN state snapshots",
              double(pc.snapshots) * double(st.prefix_snapshot_bytes));
        gauge("gdn_prefix_cache_snapshots_taken_total", "GDN state snapshots taken",
              double(pc.snapshots_taken), "counter");
        gauge("gdn_prefix_cache_snapshot_evictions_total", "GDN state snapshots evicted",
              double(pc.snapshot_evictions), "counter");
        gauge("gdn_prefix_cache_block_evictions_total", "cached KV blocks evicted for reuse",
              double(pc.block_evictions), "counter");
        gauge("gdn_prefix_cache_blocks", "KV blocks registered in the prefix cache (in use or not)",
              pc.cached_blocks);
        // Speculative decoding (vLLM's spec_decode counters): a "draft" is one sequence-step that verified
        // drafts; mean acceptance length = 1 + accepted tokens / drafts.
        const SpecCounters& sc = st.spec;
        gauge("gdn_spec_decode_num_drafts_total", "sequence-steps that verified draft tokens",
              double(sc.verify_steps), "counter");
        gauge("gdn_spec_decode_num_draft_tokens_total", "draft tokens verified", double(sc.drafted),
              "counter");
        gauge("gdn_spec_decode_num_accepted_tokens_total", "draft tokens accepted", double(sc.accepted),
              "counter");
        gauge("gdn_spec_decode_mean_acceptance_length",
              "1 + accepted draft tokens per verifying sequence-step", sc.mean_acceptance_length());
        if (!sc.drafted_at.empty()) {
            t += "# HELP gdn_spec_decode_num_accepted_tokens_per_pos draft tokens accepted at each draft "
                 "position\n"
                 "# TYPE gdn_spec_decode_num_accepted_tokens_per_pos counter\n";
            for (size_t i = 0; i < sc.accepted_at.size(); ++i)
                t += strprintf("gdn_spec_decode_num_accepted_tokens_per_pos{position=\"%zu\"} %lld\n", i,
                               (long long)sc.accepted_at[i]);
            t += "# HELP gdn_spec_decode_num_drafted_tokens_per_pos draft tokens verified at each draft "
                 "position\n"
                 "# TYPE gdn_spec_decode_num_drafted_tokens_per_pos counter\n";
            for (size_t i = 0; i < sc.drafted_at.size(); ++i)
                t += strprintf("gdn_spec_decode_num_drafted_tokens_per_pos{position=\"%zu\"} %lld\n", i,
                               (long long)sc.drafted_at[i]);
        }
        gauge("gdn_spec_decode_draft_tokens_per_seq",
              "drafts per sequence the cost model chose for the last step", st.spec_k_last_step);
        // Why the cost model chose it: drafts are verified only where the measured step times and the
        // acceptance estimate make speculation faster than plain decoding (k = 0).
        const SpecCostModel::Snapshot& cm = st.spec_cost;
        if (!cm.acceptance.empty()) {
            t += "# HELP gdn_spec_decode_acceptance_estimate the cost model's acceptance estimate per draft "
                 "position\n# TYPE gdn_spec_decode_acceptance_estimate gauge\n";
            for (size_t i = 0; i < cm.acceptance.size(); ++i)
                t += strprintf("gdn_spec_decode_acceptance_estimate{position=\"%zu\"} %.6g\n", i,
                               cm.acceptance[i]);
            gauge("gdn_spec_decode_draft_step_seconds", "one drafting forward, as the cost model measured it",
                  cm.draft_seconds);
            t += "# HELP gdn_spec_decode_step_seconds the cost model's measured step time per batch size and "
                 "drafts per sequence (k = 0: plain decoding)\n# TYPE gdn_spec_decode_step_seconds gauge\n";
            for (size_t b = 0; b < cm.step_seconds.size(); ++b)
                for (size_t k = 0; k < cm.step_seconds[b].size(); ++k)
                    if (cm.step_seconds[b][k] > 0)
                        t += strprintf("gdn_spec_decode_step_seconds{batch=\"%s\",k=\"%zu\"} %.6g\n",
                                       SpecCostModel::bucket_name(static_cast<int>(b)), k,
                                       cm.step_seconds[b][k]);
            t += "# HELP gdn_spec_decode_chosen_k the drafts per sequence the cost model decodes with per "
                 "batch "
                 "size (the best measured rate; 0: plain decoding)\n# TYPE gdn_spec_decode_chosen_k gauge\n";
            for (size_t b = 0; b < cm.best_k.size(); ++b)
                if (cm.best_k[b] >= 0)
                    t += strprintf("gdn_spec_decode_chosen_k{batch=\"%s\"} %d\n",
                                   SpecCostModel::bucket_name(static_cast<int>(b)), cm.best_k[b]);
        }
        gauge("gdn_spec_decode_state_bytes_last_step",
              "GDN bytes the last step's verifications added (staged rows, commit of the state)",
              double(st.spec_state_bytes_last_step));
        gauge("gdn_spec_decode_state_bytes_total",
              "GDN bytes verifications added (staged rows, commits of the state)",
              double(st.spec_state_bytes_total), "counter");
        t += ttft.text("gdn_time_to_first_token_seconds", "time to first token");
        t += tpot.text("gdn_time_per_output_token_seconds", "time per output token after the first");
        t += e2e.text("gdn_e2e_request_latency_seconds", "end-to-end request latency");
    }
    gauge("gdn_requests_in_flight", "requests admitted and not finished", in_flight.load());
    gauge("gdn_requests_refused_total", "requests refused with 503 (over --max-queue)",
          double(requests_refused.load()), "counter");
    gauge("gdn_http_connections", "open HTTP connections", double(http->connections()));
    const GrammarCache::Stats gc = grammars.stats();
    gauge("gdn_grammar_cache_entries", "compiled grammars kept (schemas, tool lists, regexes, choices)",
          double(gc.entries));
    gauge("gdn_grammar_cache_in_use", "of those, grammars that running requests hold", double(gc.in_use));
    gauge("gdn_grammar_cache_bytes", "memory of the kept grammars", double(gc.bytes));
    gauge("gdn_grammar_cache_budget_bytes", "the cache's budget (--grammar-cache-mib)", double(gc.budget));
    gauge("gdn_grammar_cache_hits_total", "constraints served by a kept grammar", double(gc.hits), "counter");
    gauge("gdn_grammar_cache_misses_total", "constraints compiled", double(gc.misses), "counter");
    gauge("gdn_grammar_cache_evictions_total", "grammars dropped for the budget (least recently used)",
          double(gc.evictions), "counter");
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = std::move(t);
    return r;
}

void OpenAIServer::Impl::register_routes() {
    HttpServer& s = *http;
    s.set_error_body([](int status, const std::string& msg) {
        return error_response({status, msg, status >= 500 ? "server_error" : "invalid_request_error", ""});
    });
    s.route("POST", "/v1/completions",
            [this](const HttpRequest& q, const Waker& w) { return handle_completion(q, w, false); });
    s.route("POST", "/v1/chat/completions",
            [this](const HttpRequest& q, const Waker& w) { return handle_completion(q, w, true); });
    s.route("POST", "/tokenize", [this](const HttpRequest& q, const Waker&) { return handle_tokenize(q); });
    s.route("POST", "/detokenize",
            [this](const HttpRequest& q, const Waker&) { return handle_detokenize(q); });
    // Cheap and never blocking: answered on the I/O thread, ahead of any queue.
    s.route(
        "GET", "/health",
        [](const HttpRequest&, const Waker&) {
            return json_response(200, {{"status", "ok"}});
        },
        true);
    s.route(
        "GET", "/metrics",
        [this](const HttpRequest& q, const Waker&) -> HandlerResult {
            if (!cfg.metrics_public)
                if (auto e = check_key(q)) return error_response(*e);
            return metrics_text();
        },
        true);
    s.route(
        "GET", "/v1/models",
        [this](const HttpRequest& q, const Waker&) -> HandlerResult {
            if (auto e = check_key(q)) return error_response(*e);
            return json_response(
                200, {{"object", "list"},
                      {"data", Json::array({{{"id", cfg.served_model_name},
                                             {"object", "model"},
                                             {"created", unix_time()},
                                             {"owned_by", "gdn-engine"},
                                             {"vocab_size", tok->vocab_size()},
                                             {"max_model_len", engine->config().max_model_len}}})}});
        },
        true);
}

OpenAIServer::OpenAIServer(std::unique_ptr<Engine> engine, std::shared_ptr<const Tokenizer> tok,
                           ServerConfig cfg)
    : impl_(std::make_unique<Impl>(cfg.grammar_cache_bytes)) {
    Impl& im = *impl_;
    im.engine = std::move(engine);
    im.tok = std::move(tok);
    im.cfg = std::move(cfg);
    // Ids the tokenizer knows and the model has rows for (the model's padding rows are not tokens).
    auto parsers = choose_parsers(im.tok->chat_template(), im.cfg.reasoning_parser, im.cfg.tool_call_parser);
    if (parsers)
        im.parsers = *parsers;
    else
        im.config_status = parsers.status();
    im.limits = {
        im.cfg.served_model_name,          std::min(im.tok->vocab_size(), im.engine->model_config().vocab),
        im.engine->config().max_model_len, im.parsers.tool_calls,
        im.parsers.reasoning_on(),         &im.grammars};
    HttpServerConfig hc;
    hc.limits.max_body_bytes = im.cfg.max_body_bytes;
    hc.workers = im.cfg.http_threads;
    hc.max_connections = im.cfg.max_connections;
    hc.header_timeout_s = im.cfg.header_timeout_s;
    hc.request_timeout_s = im.cfg.request_timeout_s;
    hc.idle_timeout_s = im.cfg.idle_timeout_s;
    hc.write_timeout_s = im.cfg.write_timeout_s;
    im.http = std::make_unique<HttpServer>(hc);
    im.register_routes();
}

OpenAIServer::~OpenAIServer() {
    stop();
    if (impl_->engine_thread.joinable()) impl_->engine_thread.join();
}

int OpenAIServer::bound_port() const {
    return impl_->port;
}

void OpenAIServer::stop() {
    impl_->stopping = true;
    impl_->q_cv.notify_all();
    impl_->http->stop();
}

Status OpenAIServer::run() {
    Impl& im = *impl_;
    GDN_RETURN_IF_ERROR(im.config_status);
    if (im.engine->chat_template())
        GDN_LOG_INFO("output parsers: reasoning %s, tool calls %s", im.parsers.reasoning.c_str(),
                     im.parsers.tool_calls.c_str());
    auto bound = im.http->bind(im.cfg.host, im.cfg.port);
    if (!bound) return bound.status();
    im.engine_thread = std::thread([&im] { im.engine_loop(); });
    GDN_LOG_INFO("serving '%s' on http://%s:%d (OpenAI API under /v1)", im.cfg.served_model_name.c_str(),
                 im.cfg.host.c_str(), *bound);
    im.port = *bound;
    if (!im.stopping) im.http->run();
    im.stopping = true;
    im.q_cv.notify_all();
    if (im.engine_thread.joinable()) im.engine_thread.join();
    return Status::ok();
}

}  // namespace gdn
