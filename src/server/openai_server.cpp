#include "server/openai_server.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "util/json_file.h"

namespace gdn {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One HTTP request's link to the engine thread.
struct Job {
    Prompt prompt;
    SamplingParams params;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<RequestOutput> outs;
    bool done = false;
    std::string error;  // set when the engine rejected the request
    int64_t engine_id = -1;
    std::atomic<bool> cancelled{false};
    double t_arrival = 0, t_first = 0, t_last = 0;
};

// Prometheus histogram with fixed buckets (seconds).
struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;
    double sum = 0;
    uint64_t n = 0;
    explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
    void observe(double v) {
        size_t i = 0;
        while (i < bounds.size() && v > bounds[i]) ++i;
        counts[i]++;
        sum += v;
        n++;
    }
    std::string text(const std::string& name, const std::string& help) const {
        std::string s = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
        uint64_t c = 0;
        for (size_t i = 0; i < bounds.size(); ++i) {
            c += counts[i];
            s += strprintf("%s_bucket{le=\"%g\"} %llu\n", name.c_str(), bounds[i], (unsigned long long)c);
        }
        c += counts.back();
        s += strprintf("%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name.c_str(), (unsigned long long)c,
                       name.c_str(), sum, name.c_str(), (unsigned long long)n);
        return s;
    }
};

Json error_json(const std::string& message, const std::string& type, const Json& param = nullptr,
                const Json& code = nullptr) {
    return {{"error", {{"message", message}, {"type", type}, {"param", param}, {"code", code}}}};
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                const Json& param = nullptr) {
    res.status = status;
    res.set_content(error_json(message, type, param, nullptr).dump(), "application/json");
}

// Reads an optional typed field: wrong types are errors that name the field.
template <typename T>
Status read_field(const Json& body, const char* key, T* out) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return Status::ok();
    try {
        if constexpr (std::is_same_v<T, bool>) {
            if (!it->is_boolean()) throw std::runtime_error("");
        } else if constexpr (std::is_integral_v<T>) {
            if (!it->is_number_integer()) throw std::runtime_error("");
        } else if constexpr (std::is_floating_point_v<T>) {
            if (!it->is_number()) throw std::runtime_error("");
        } else if constexpr (std::is_same_v<T, std::string>) {
            if (!it->is_string()) throw std::runtime_error("");
        }
        *out = it->get<T>();
    } catch (...) {
        const char* want = std::is_same_v<T, bool> ? "a boolean" : std::is_integral_v<T> ? "an integer"
                           : std::is_floating_point_v<T>                                ? "a number"
                                                                                         : "a string";
        return Status::error(strprintf("'%s' must be %s", key, want));
    }
    return Status::ok();
}

}  // namespace

struct OpenAIServer::Impl {
    std::unique_ptr<Engine> engine;
    std::shared_ptr<const Tokenizer> tok;
    ServerConfig cfg;
    httplib::Server http;
    std::thread engine_thread;
    std::atomic<bool> stopping{false};
    int port = 0;

    std::mutex q_mu;
    std::condition_variable q_cv;
    std::deque<std::shared_ptr<Job>> incoming;
    std::map<int64_t, std::shared_ptr<Job>> active;  // engine id -> job (engine thread only)
    std::atomic<int64_t> next_response_id{1};

    // Metrics (engine thread writes, /metrics reads, under m_mu).
    std::mutex m_mu;
    EngineStats stats;
    uint64_t requests_ok = 0, requests_aborted = 0, requests_rejected = 0;
    Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
    Histogram tpot{{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1}};
    Histogram e2e{{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}};

    void engine_loop();
    void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat);
    bool authorized(const httplib::Request& req, httplib::Response& res);
    std::shared_ptr<Job> submit(Prompt p, SamplingParams sp) {
        auto job = std::make_shared<Job>();
        job->prompt = std::move(p);
        job->params = std::move(sp);
        job->t_arrival = now_s();
        {
            std::lock_guard<std::mutex> lock(q_mu);
            incoming.push_back(job);
        }
        q_cv.notify_one();
        return job;
    }
    void cancel(const std::shared_ptr<Job>& job) {
        job->cancelled = true;
        int64_t id;
        {
            std::lock_guard<std::mutex> lock(job->mu);
            id = job->engine_id;
        }
        if (id >= 0) engine->abort(id);  // thread-safe: applied at the next step
        q_cv.notify_one();
    }
};

void OpenAIServer::Impl::engine_loop() {
    std::vector<std::shared_ptr<Job>> fresh;
    while (true) {
        {
            std::unique_lock<std::mutex> lock(q_mu);
            if (incoming.empty() && !engine->has_unfinished() && !stopping)
                q_cv.wait_for(lock, std::chrono::milliseconds(50));
            fresh.assign(incoming.begin(), incoming.end());
            incoming.clear();
        }
        if (stopping && fresh.empty() && active.empty() && !engine->has_unfinished()) break;
        for (auto& job : fresh) {
            std::lock_guard<std::mutex> lock(job->mu);
            if (job->cancelled || stopping) {
                job->error = stopping ? "the server is shutting down" : "cancelled";
                job->done = true;
                job->cv.notify_all();
                continue;
            }
            auto id = engine->add_request(job->prompt, job->params);
            if (!id) {
                job->error = id.message();
                job->done = true;
                job->cv.notify_all();
                std::lock_guard<std::mutex> ml(m_mu);
                requests_rejected++;
                continue;
            }
            job->engine_id = *id;
            active[*id] = job;
        }
        if (stopping)
            for (auto& [id, job] : active) engine->abort(id);
        if (!engine->has_unfinished()) continue;
        const auto outs = engine->step();
        const double t = now_s();
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
                if (o.finish != FinishReason::NONE) job.done = true;
            }
            job.cv.notify_all();
            if (o.finish != FinishReason::NONE) {
                std::lock_guard<std::mutex> ml(m_mu);
                if (o.finish == FinishReason::ABORT) {
                    requests_aborted++;
                } else {
                    requests_ok++;
                    if (job.t_first > 0) ttft.observe(job.t_first - job.t_arrival);
                    if (o.completion_tokens > 1) tpot.observe((job.t_last - job.t_first) / (o.completion_tokens - 1));
                    e2e.observe(t - job.t_arrival);
                }
                active.erase(it);
            }
        }
        std::lock_guard<std::mutex> ml(m_mu);
        stats = engine->stats();
    }
    std::lock_guard<std::mutex> ml(m_mu);
    stats = engine->stats();
}

bool OpenAIServer::Impl::authorized(const httplib::Request& req, httplib::Response& res) {
    if (cfg.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    if (h == "Bearer " + cfg.api_key) return true;
    send_error(res, 401, h.empty() ? "Missing API key: send 'Authorization: Bearer <key>'" : "Incorrect API key provided",
               "authentication_error");
    return false;
}

namespace {

// Builds SamplingParams from an OpenAI request body; errors name the field.
Status parse_sampling(const Json& b, bool chat, SamplingParams* sp, bool* logprobs_on) {
    double temperature = 1.0, top_p = 1.0, min_p = 0.0, rep = 1.0, pres = 0.0, freq = 0.0;
    int64_t top_k = -1, max_tokens = chat ? -1 : 16, min_tokens = 0, n = 1;
    bool ignore_eos = false, skip_special = true;
    GDN_RETURN_IF_ERROR(read_field(b, "temperature", &temperature));
    GDN_RETURN_IF_ERROR(read_field(b, "top_p", &top_p));
    GDN_RETURN_IF_ERROR(read_field(b, "top_k", &top_k));
    GDN_RETURN_IF_ERROR(read_field(b, "min_p", &min_p));
    GDN_RETURN_IF_ERROR(read_field(b, "repetition_penalty", &rep));
    GDN_RETURN_IF_ERROR(read_field(b, "presence_penalty", &pres));
    GDN_RETURN_IF_ERROR(read_field(b, "frequency_penalty", &freq));
    GDN_RETURN_IF_ERROR(read_field(b, "max_tokens", &max_tokens));
    GDN_RETURN_IF_ERROR(read_field(b, "max_completion_tokens", &max_tokens));
    GDN_RETURN_IF_ERROR(read_field(b, "min_tokens", &min_tokens));
    GDN_RETURN_IF_ERROR(read_field(b, "n", &n));
    GDN_RETURN_IF_ERROR(read_field(b, "ignore_eos", &ignore_eos));
    GDN_RETURN_IF_ERROR(read_field(b, "skip_special_tokens", &skip_special));
    if (n != 1) return Status::error(strprintf("only n = 1 is supported (got n = %lld)", (long long)n));
    sp->temperature = static_cast<float>(temperature);
    sp->top_p = static_cast<float>(top_p);
    sp->top_k = static_cast<int>(top_k == -1 ? 0 : top_k);
    if (top_k < -1) sp->top_k = static_cast<int>(top_k);
    sp->min_p = static_cast<float>(min_p);
    sp->repetition_penalty = static_cast<float>(rep);
    sp->presence_penalty = static_cast<float>(pres);
    sp->frequency_penalty = static_cast<float>(freq);
    sp->max_tokens = max_tokens < 0 ? (1 << 30) : static_cast<int>(std::min<int64_t>(max_tokens, 1 << 30));
    if (max_tokens == 0) return Status::error("'max_tokens' must be >= 1");
    sp->min_tokens = static_cast<int>(min_tokens);
    sp->ignore_eos = ignore_eos;
    sp->skip_special_tokens = skip_special;
    if (auto it = b.find("seed"); it != b.end() && !it->is_null()) {
        if (!it->is_number_integer()) return Status::error("'seed' must be an integer");
        sp->seed = static_cast<uint64_t>(it->get<int64_t>());
    }
    if (auto it = b.find("stop"); it != b.end() && !it->is_null()) {
        if (it->is_string()) sp->stop = {it->get<std::string>()};
        else if (it->is_array()) {
            for (const Json& s : *it) {
                if (!s.is_string()) return Status::error("'stop' must be a string or a list of strings");
                sp->stop.push_back(s.get<std::string>());
            }
        } else {
            return Status::error("'stop' must be a string or a list of strings");
        }
    }
    if (auto it = b.find("stop_token_ids"); it != b.end() && !it->is_null()) {
        if (!it->is_array()) return Status::error("'stop_token_ids' must be a list of integers");
        for (const Json& s : *it) {
            if (!s.is_number_integer()) return Status::error("'stop_token_ids' must be a list of integers");
            sp->stop_token_ids.push_back(s.get<int32_t>());
        }
    }
    *logprobs_on = false;
    if (chat) {
        bool lp = false;
        int64_t top = 0;
        GDN_RETURN_IF_ERROR(read_field(b, "logprobs", &lp));
        GDN_RETURN_IF_ERROR(read_field(b, "top_logprobs", &top));
        if (top > 0 && !lp) return Status::error("'top_logprobs' requires 'logprobs': true");
        if (lp) sp->logprobs = static_cast<int>(top);
        *logprobs_on = lp;
    } else {
        int64_t lp = -1;
        if (auto it = b.find("logprobs"); it != b.end() && !it->is_null()) {
            GDN_RETURN_IF_ERROR(read_field(b, "logprobs", &lp));
            sp->logprobs = static_cast<int>(lp);
            *logprobs_on = lp >= 0;
        }
    }
    return Status::ok();
}

}  // namespace

void OpenAIServer::Impl::handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (!authorized(req, res)) return;
    auto parsed = parse_json(req.body, "request body");
    if (!parsed || !parsed->is_object())
        return send_error(res, 400, parsed ? "the request body must be a JSON object" : parsed.message(),
                          "invalid_request_error");
    const Json& b = *parsed;
    if (auto it = b.find("model"); it != b.end() && !it->is_null()) {
        if (!it->is_string()) return send_error(res, 400, "'model' must be a string", "invalid_request_error", "model");
        if (it->get<std::string>() != cfg.served_model_name)
            return send_error(res, 404, "The model '" + it->get<std::string>() + "' does not exist (this server serves '" +
                                            cfg.served_model_name + "')",
                              "invalid_request_error", "model");
    }
    Prompt prompt;
    if (chat) {
        auto m = b.find("messages");
        if (m == b.end()) return send_error(res, 400, "'messages' is required", "invalid_request_error", "messages");
        Status st = validate_messages(*m);
        if (!st) return send_error(res, 400, st.message(), "invalid_request_error", "messages");
        prompt = Prompt::from_messages(*m);
        if (auto k = b.find("chat_template_kwargs"); k != b.end() && !k->is_null()) {
            if (!k->is_object())
                return send_error(res, 400, "'chat_template_kwargs' must be an object", "invalid_request_error");
            prompt.chat_template_kwargs = *k;
            if (auto et = k->find("enable_thinking"); et != k->end()) {
                if (!et->is_boolean())
                    return send_error(res, 400, "'chat_template_kwargs.enable_thinking' must be a boolean",
                                      "invalid_request_error");
                prompt.enable_thinking = et->get<bool>();
            }
        }
    } else {
        auto p = b.find("prompt");
        if (p == b.end() || p->is_null()) return send_error(res, 400, "'prompt' is required", "invalid_request_error", "prompt");
        if (p->is_string()) {
            prompt = Prompt::from_text(p->get<std::string>());
        } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
            prompt = Prompt::from_text((*p)[0].get<std::string>());
        } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
            std::vector<int32_t> ids;
            for (const Json& x : *p) {
                if (!x.is_number_integer())
                    return send_error(res, 400, "'prompt' token lists must hold integers", "invalid_request_error", "prompt");
                ids.push_back(x.get<int32_t>());
            }
            prompt = Prompt::from_ids(std::move(ids));
        } else {
            return send_error(res, 400, "'prompt' must be a string, a list with one string, or a list of token ids",
                              "invalid_request_error", "prompt");
        }
    }
    SamplingParams sp;
    bool want_logprobs = false;
    Status st = parse_sampling(b, chat, &sp, &want_logprobs);
    if (st) st = sp.validate(engine->tokenizer().vocab_size());
    if (!st) return send_error(res, 400, st.message(), "invalid_request_error");
    bool stream = false, include_usage = false;
    if (Status s2 = read_field(b, "stream", &stream); !s2) return send_error(res, 400, s2.message(), "invalid_request_error");
    if (auto so = b.find("stream_options"); so != b.end() && so->is_object())
        if (auto iu = so->find("include_usage"); iu != so->end() && iu->is_boolean()) include_usage = iu->get<bool>();

    auto job = submit(std::move(prompt), sp);
    const std::string rid = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_response_id++);
    const int64_t created = unix_time();
    const std::string model = cfg.served_model_name;
    const Tokenizer& tk = *tok;
    auto lp_json = [&](const std::vector<TokenLogprob>& lp) -> Json {
        auto tok_str = [&](int32_t t) { return tk.decode({t}, false).is_ok() ? *tk.decode({t}, false) : std::string(); };
        Json top = Json::array();
        for (size_t i = 1; i < lp.size(); ++i) top.push_back({{"token", tok_str(lp[i].token)}, {"logprob", lp[i].logprob}});
        return {{"token", tok_str(lp[0].token)}, {"logprob", lp[0].logprob}, {"top_logprobs", top}};
    };

    if (!stream) {
        std::string text;
        FinishReason finish = FinishReason::NONE;
        int64_t prompt_tokens = 0, completion_tokens = 0;
        Json logprobs = Json::array();
        {
            std::unique_lock<std::mutex> lock(job->mu);
            while (true) {
                job->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return job->done || !job->outs.empty(); });
                while (!job->outs.empty()) {
                    const RequestOutput& o = job->outs.front();
                    text += o.text_delta;
                    for (const auto& lp : o.logprobs) logprobs.push_back(lp_json(lp));
                    if (o.finish != FinishReason::NONE) finish = o.finish;
                    prompt_tokens = o.prompt_tokens;
                    completion_tokens = o.completion_tokens;
                    job->outs.pop_front();
                }
                if (job->done) break;
            }
        }
        if (!job->error.empty()) {
            const int status = job->error == "the server is shutting down" ? 503 : 400;
            return send_error(res, status, job->error, status == 503 ? "server_error" : "invalid_request_error");
        }
        Json choice = {{"index", 0}, {"finish_reason", finish_reason_name(finish)}};
        if (chat) {
            choice["message"] = {{"role", "assistant"}, {"content", text}};
            choice["logprobs"] = want_logprobs ? Json{{"content", logprobs}} : Json(nullptr);
        } else {
            choice["text"] = text;
            choice["logprobs"] = want_logprobs ? Json{{"content", logprobs}} : Json(nullptr);
        }
        Json body = {{"id", rid}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                     {"model", model}, {"choices", Json::array({choice})},
                     {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                                {"total_tokens", prompt_tokens + completion_tokens}}}};
        res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
        return;
    }

    // Streaming: Server-Sent Events, one chunk per text delta, then finish_reason, usage, [DONE].
    struct StreamState {
        bool sent_role = false, finished = false, done_sent = false;
        int64_t prompt_tokens = 0, completion_tokens = 0;
    };
    auto ss = std::make_shared<StreamState>();
    auto chunk = [=](const Json& delta_or_text, const Json& finish, const Json& logprobs) {
        Json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", logprobs}};
        if (chat) choice["delta"] = delta_or_text;
        else choice["text"] = delta_or_text;
        Json c = {{"id", rid}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                  {"model", model}, {"choices", Json::array({choice})}};
        return "data: " + c.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
    };
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, ss, chunk, chat, include_usage, rid, created, model, lp_json, want_logprobs](size_t,
                                                                                                 httplib::DataSink& sink) {
            std::unique_lock<std::mutex> lock(job->mu);
            job->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return job->done || !job->outs.empty(); });
            if (!job->error.empty()) {
                lock.unlock();
                const std::string e = "data: " + error_json(job->error, "invalid_request_error").dump() + "\n\n";
                sink.write(e.data(), e.size());
                sink.done();
                return true;
            }
            std::string buf;
            while (!job->outs.empty()) {
                RequestOutput o = std::move(job->outs.front());
                job->outs.pop_front();
                ss->prompt_tokens = o.prompt_tokens;
                ss->completion_tokens = o.completion_tokens;
                if (chat && !ss->sent_role) {
                    buf += chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
                    ss->sent_role = true;
                }
                Json lps = nullptr;
                if (want_logprobs && !o.logprobs.empty()) {
                    lps = Json{{"content", Json::array()}};
                    for (const auto& lp : o.logprobs) lps["content"].push_back(lp_json(lp));
                }
                if (!o.text_delta.empty() || !lps.is_null())
                    buf += chunk(chat ? Json{{"content", o.text_delta}} : Json(o.text_delta), nullptr, lps);
                if (o.finish != FinishReason::NONE) {
                    buf += chunk(chat ? Json::object() : Json(""), finish_reason_name(o.finish), nullptr);
                    ss->finished = true;
                }
            }
            const bool done = job->done;
            lock.unlock();
            if (!buf.empty() && !sink.write(buf.data(), buf.size())) return false;  // client gone
            if (done && ss->finished) {
                std::string tail;
                if (include_usage) {
                    Json u = {{"id", rid}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                              {"created", created}, {"model", model}, {"choices", Json::array()},
                              {"usage", {{"prompt_tokens", ss->prompt_tokens}, {"completion_tokens", ss->completion_tokens},
                                         {"total_tokens", ss->prompt_tokens + ss->completion_tokens}}}};
                    tail += "data: " + u.dump() + "\n\n";
                }
                tail += "data: [DONE]\n\n";
                if (!sink.write(tail.data(), tail.size())) return false;
                ss->done_sent = true;
                sink.done();
                return true;
            }
            if (buf.empty() && sink.is_writable && !sink.is_writable()) return false;  // disconnected while idle
            return true;
        },
        [this, job, ss](bool success) {
            // The stream ended: if the client left early, abort the request (frees blocks and slot).
            if (!success || !ss->done_sent) cancel(job);
        });
}

OpenAIServer::OpenAIServer(std::unique_ptr<Engine> engine, std::shared_ptr<const Tokenizer> tok, ServerConfig cfg)
    : impl_(std::make_unique<Impl>()) {
    impl_->engine = std::move(engine);
    impl_->tok = std::move(tok);
    impl_->cfg = std::move(cfg);
}

OpenAIServer::~OpenAIServer() {
    stop();
    if (impl_->engine_thread.joinable()) impl_->engine_thread.join();
}

int OpenAIServer::bound_port() const { return impl_->port; }

void OpenAIServer::stop() {
    impl_->stopping = true;
    impl_->q_cv.notify_all();
    impl_->http.stop();
}

namespace {

// Debian's cpp-httplib 0.11 is a shared library built with a listen backlog of 5: a burst of clients
// connecting at once (32 streaming clients in the soak test, a benchmark's concurrency sweep) on a
// loaded machine overflows the accept queue and some connections are reset before the server reads
// them. The listening socket's backlog is raised in place (listen() on a listening socket updates it).
void raise_listen_backlog(int port, int backlog) {
    DIR* d = ::opendir("/proc/self/fd");
    if (!d) return;
    bool done = false;
    while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;  // "." and ".."
        const int fd = std::atoi(e->d_name);
        struct stat st;
        if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        int listening = 0;
        socklen_t len = sizeof(listening);
        if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
        sockaddr_storage a{};
        socklen_t alen = sizeof(a);
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &alen) != 0) continue;
        const int p = a.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port)
                      : a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port)
                                                : -1;
        if (p == port && ::listen(fd, backlog) == 0) done = true;
    }
    ::closedir(d);
    if (!done) GDN_LOG_WARN("could not raise the listen backlog of port %d (bursts of connections may be reset)", port);
}

}  // namespace

Status OpenAIServer::run() {
    Impl& im = *impl_;
    httplib::Server& s = im.http;
    s.new_task_queue = [n = im.cfg.http_threads] { return new httplib::ThreadPool(n); };
    s.set_payload_max_length(im.cfg.max_body_bytes);
    s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return;
        if (res.status == 413)
            res.set_content(error_json("request body too large", "invalid_request_error").dump(), "application/json");
        else if (res.status == 404)
            res.set_content(error_json("no such endpoint", "invalid_request_error").dump(), "application/json");
        else
            res.set_content(error_json(strprintf("HTTP %d", res.status), "invalid_request_error").dump(),
                            "application/json");
    });
    s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        send_error(res, 500, "internal error", "server_error");
    });
    s.Post("/v1/completions", [&im](const httplib::Request& q, httplib::Response& r) { im.handle_completion(q, r, false); });
    s.Post("/v1/chat/completions",
           [&im](const httplib::Request& q, httplib::Response& r) { im.handle_completion(q, r, true); });
    s.Get("/v1/models", [&im](const httplib::Request& q, httplib::Response& r) {
        if (!im.authorized(q, r)) return;
        Json m = {{"object", "list"},
                  {"data", Json::array({{{"id", im.cfg.served_model_name}, {"object", "model"}, {"created", unix_time()},
                                         {"owned_by", "gdn-engine"}, {"vocab_size", im.tok->vocab_size()},
                                         {"max_model_len", im.engine->config().max_model_len}}})}};
        r.set_content(m.dump(), "application/json");
    });
    s.Get("/health", [](const httplib::Request&, httplib::Response& r) { r.set_content("{\"status\":\"ok\"}", "application/json"); });
    s.Get("/metrics", [&im](const httplib::Request&, httplib::Response& r) {
        std::lock_guard<std::mutex> lock(im.m_mu);
        const EngineStats& st = im.stats;
        std::string t;
        auto gauge = [&](const char* name, const char* help, double v, const char* type = "gauge") {
            t += strprintf("# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
        };
        gauge("gdn_requests_running", "requests being processed", st.running);
        gauge("gdn_requests_waiting", "requests waiting to be scheduled", st.waiting);
        gauge("gdn_requests_finished_total", "requests finished (stop or length)", double(im.requests_ok), "counter");
        gauge("gdn_requests_aborted_total", "requests aborted (client gone, shutdown)", double(im.requests_aborted), "counter");
        gauge("gdn_requests_rejected_total", "requests the engine rejected", double(im.requests_rejected), "counter");
        gauge("gdn_prompt_tokens_total", "prompt tokens received", double(st.prompt_tokens), "counter");
        gauge("gdn_generation_tokens_total", "tokens generated", double(st.generation_tokens), "counter");
        gauge("gdn_kv_blocks_total", "KV cache blocks", st.kv_blocks_total);
        gauge("gdn_kv_blocks_free", "free KV cache blocks", st.kv_blocks_free);
        gauge("gdn_kv_cache_usage", "fraction of KV blocks in use",
              st.kv_blocks_total ? 1.0 - double(st.kv_blocks_free) / st.kv_blocks_total : 0.0);
        gauge("gdn_state_slots_total", "GDN state slots", st.state_slots_total);
        gauge("gdn_state_slots_free", "free GDN state slots", st.state_slots_free);
        gauge("gdn_preemptions_total", "requests pre-empted (recompute)", double(st.preemptions), "counter");
        t += im.ttft.text("gdn_time_to_first_token_seconds", "time to first token");
        t += im.tpot.text("gdn_time_per_output_token_seconds", "time per output token after the first");
        t += im.e2e.text("gdn_e2e_request_latency_seconds", "end-to-end request latency");
        r.set_content(t, "text/plain; version=0.0.4");
    });
    s.Post("/tokenize", [&im](const httplib::Request& q, httplib::Response& r) {
        if (!im.authorized(q, r)) return;
        auto b = parse_json(q.body, "request body");
        if (!b || !b->is_object()) return send_error(r, 400, b ? "body must be a JSON object" : b.message(), "invalid_request_error");
        std::string text;
        if (auto m = b->find("messages"); m != b->end()) {
            auto rendered = render_chat_from_json(*im.tok, Json{{"messages", *m}}.dump());
            if (!rendered) return send_error(r, 400, rendered.message(), "invalid_request_error", "messages");
            text = *rendered;
        } else if (auto p = b->find("prompt"); p != b->end() && p->is_string()) {
            text = p->get<std::string>();
        } else {
            return send_error(r, 400, "'prompt' (a string) or 'messages' is required", "invalid_request_error");
        }
        auto ids = im.tok->encode(text);
        r.set_content(Json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", im.engine->config().max_model_len}}.dump(),
                      "application/json");
    });
    s.Post("/detokenize", [&im](const httplib::Request& q, httplib::Response& r) {
        if (!im.authorized(q, r)) return;
        auto b = parse_json(q.body, "request body");
        if (!b || !b->is_object() || !b->contains("tokens") || !(*b)["tokens"].is_array())
            return send_error(r, 400, "'tokens' (a list of integers) is required", "invalid_request_error", "tokens");
        std::vector<int32_t> ids;
        for (const Json& x : (*b)["tokens"]) {
            if (!x.is_number_integer()) return send_error(r, 400, "'tokens' must hold integers", "invalid_request_error", "tokens");
            ids.push_back(x.get<int32_t>());
        }
        auto text = im.tok->decode(ids, false);
        if (!text) return send_error(r, 400, text.message(), "invalid_request_error", "tokens");
        r.set_content(Json{{"prompt", *text}}.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
    });
    if (im.cfg.port == 0) {
        im.port = s.bind_to_any_port(im.cfg.host);
        if (im.port <= 0) return Status::error("cannot bind " + im.cfg.host + " to any port");
    } else {
        if (!s.bind_to_port(im.cfg.host, im.cfg.port))
            return Status::error(strprintf("cannot bind %s:%d (in use?)", im.cfg.host.c_str(), im.cfg.port));
        im.port = im.cfg.port;
    }
    im.engine_thread = std::thread([&im] { im.engine_loop(); });
    GDN_LOG_INFO("serving '%s' on http://%s:%d (OpenAI API under /v1)", im.cfg.served_model_name.c_str(),
                 im.cfg.host.c_str(), im.port);
    raise_listen_backlog(im.port, 1024);
    s.listen_after_bind();
    im.stopping = true;
    im.q_cv.notify_all();
    if (im.engine_thread.joinable()) im.engine_thread.join();
    return Status::ok();
}

}  // namespace gdn
