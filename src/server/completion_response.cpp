#include "server/completion_response.h"

#include <chrono>

#include "util/json_file.h"

namespace gdn {

HttpResponse json_response(int status, const Json& body) {
    HttpResponse r;
    r.status = status;
    r.body = to_json_text(body);
    return r;
}

HttpResponse error_response(const ApiError& e) {
    HttpResponse r = json_response(e.status, e.to_json());
    if (e.status == 503) r.headers.emplace_back("Retry-After", "1");
    return r;
}

namespace {

int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class CompletionResponse : public Deferred {
public:
    CompletionResponse(std::shared_ptr<Job> job, const CompletionRequest& req, ResponseOptions opts,
                       std::shared_ptr<const Tokenizer> tok)
        : job_(std::move(job)), chat_(req.chat), stream_(req.stream), include_usage_(req.include_usage),
          want_logprobs_(req.want_logprobs), opts_(std::move(opts)), tok_(std::move(tok)), created_(unix_time()),
          tools_(req.tools), parser_(parser_options(req)) {
        text_offset_ = static_cast<int64_t>(opts_.echo.size());
    }

    std::optional<HttpResponse> head() override {
        std::unique_lock<std::mutex> lock(job_->mu);
        if (job_->error) {
            finished_ = true;
            return error_response(*job_->error);
        }
        if (stream_) {
            if (!job_->accepted) return std::nullopt;
            HttpResponse r;
            r.content_type = "text/event-stream";
            r.headers.emplace_back("Cache-Control", "no-cache");
            r.chunked = true;
            return r;
        }
        take();
        if (!job_->done) return std::nullopt;
        finished_ = true;
        if (chat_) answer_.add(parser_.finish());
        Json choice = {{"index", 0}, {"finish_reason", finish_reason()}};
        if (chat_) choice["message"] = message();
        else choice["text"] = opts_.echo + text_;
        if (want_logprobs_ && logprobs_.is_null()) logprobs_ = logprobs_of({});  // no tokens: the empty form
        choice["logprobs"] = want_logprobs_ ? logprobs_ : Json(nullptr);
        return json_response(200, {{"id", opts_.id}, {"object", chat_ ? "chat.completion" : "text_completion"},
                                   {"created", created_}, {"model", opts_.model}, {"choices", Json::array({choice})},
                                   {"usage", usage()}});
    }

    bool next_chunk(std::string* out) override {
        std::unique_lock<std::mutex> lock(job_->mu);
        while (!job_->outs.empty()) {
            RequestOutput o = std::move(job_->outs.front());
            job_->outs.pop_front();
            prompt_tokens_ = o.prompt_tokens;
            completion_tokens_ = o.completion_tokens;
            if (chat_ && !sent_role_) {
                *out += event({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
                sent_role_ = true;
            }
            Json lps = nullptr;
            if (want_logprobs_ && !o.logprobs.empty()) lps = logprobs_of(o.logprobs);
            if (chat_) {
                const size_t before = out->size();
                chat_events(parser_.feed(o.text_delta), lps, out);
                if (out->size() == before && !lps.is_null()) *out += event(Json::object(), nullptr, lps);
            } else {
                std::string text = o.text_delta;
                if (!sent_echo_) text = opts_.echo + text, sent_echo_ = true;
                if (!text.empty() || !lps.is_null()) *out += event(Json(text), nullptr, lps);
            }
            if (o.finish != FinishReason::NONE) {
                finish_ = o.finish;
                if (chat_) chat_events(parser_.finish(), nullptr, out);
                *out += event(chat_ ? Json::object() : Json(""), finish_reason(), nullptr);
                final_ = true;
            }
        }
        if (!job_->done || !final_) return false;
        if (include_usage_) {
            Json u = {{"id", opts_.id}, {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                      {"created", created_}, {"model", opts_.model}, {"choices", Json::array()}, {"usage", usage()}};
            *out += "data: " + to_json_text(u) + "\n\n";
        }
        *out += "data: [DONE]\n\n";
        finished_ = true;
        return true;
    }

    void abandon() override {
        if (!finished_ && opts_.cancel) opts_.cancel();
    }

private:
    OutputParserOptions parser_options(const CompletionRequest& req) const {
        OutputParserOptions po;
        po.reasoning = req.chat && opts_.parsers.reasoning_on();
        po.starts_in_reasoning = po.reasoning && req.opens_reasoning;
        po.tools = req.chat && req.parse_tool_calls && opts_.parsers.tool_calls_on() ? &tools_ : nullptr;
        po.id_prefix = "call_" + opts_.id + "_";
        return po;
    }

    // Non-streaming: folds the outputs so far into the answer (the job's lock held).
    void take() {
        while (!job_->outs.empty()) {
            const RequestOutput& o = job_->outs.front();
            if (chat_) answer_.add(parser_.feed(o.text_delta));
            else text_ += o.text_delta;
            if (want_logprobs_ && !o.logprobs.empty()) append_logprobs(logprobs_of(o.logprobs));
            if (o.finish != FinishReason::NONE) finish_ = o.finish;
            prompt_tokens_ = o.prompt_tokens;
            completion_tokens_ = o.completion_tokens;
            job_->outs.pop_front();
        }
    }

    const char* finish_reason() const {
        if (finish_ == FinishReason::STOP && parser_.complete_calls() > 0) return "tool_calls";
        return finish_reason_name(finish_);
    }

    Json message() const {
        Json m = {{"role", "assistant"}};
        m["content"] = answer_.calls.empty() || !answer_.content.empty() ? Json(answer_.content) : Json(nullptr);
        if (opts_.parsers.reasoning_on())
            m["reasoning_content"] = answer_.reasoning.empty() ? Json(nullptr) : Json(answer_.reasoning);
        if (!answer_.calls.empty()) {
            Json calls = Json::array();
            for (const auto& c : answer_.calls)
                calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
            m["tool_calls"] = std::move(calls);
        }
        return m;
    }

    void chat_events(const OutputDelta& d, Json lps, std::string* out) {
        auto send = [&](Json delta) {
            *out += event(delta, nullptr, lps);
            lps = nullptr;  // a step's logprobs go with its first event
        };
        if (!d.reasoning.empty()) send({{"reasoning_content", d.reasoning}});
        if (!d.content.empty()) send({{"content", d.content}});
        for (const ToolCallDelta& t : d.tool_calls) {
            Json call = {{"index", t.index}};
            if (!t.id.empty()) {
                call["id"] = t.id;
                call["type"] = "function";
                call["function"] = {{"name", t.name}, {"arguments", t.arguments}};
            } else {
                call["function"] = {{"arguments", t.arguments}};
            }
            send({{"tool_calls", Json::array({call})}});
        }
    }

    Json usage() const {
        return {{"prompt_tokens", prompt_tokens_}, {"completion_tokens", completion_tokens_},
                {"total_tokens", prompt_tokens_ + completion_tokens_}};
    }
    std::string event(const Json& delta_or_text, const Json& finish, const Json& logprobs) const {
        Json choice = {{"index", 0}};
        if (chat_) choice["delta"] = delta_or_text;
        else choice["text"] = delta_or_text;
        choice["logprobs"] = logprobs;
        choice["finish_reason"] = finish;
        Json c = {{"id", opts_.id}, {"object", chat_ ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
                  {"model", opts_.model}, {"choices", Json::array({choice})}};
        return "data: " + to_json_text(c) + "\n\n";
    }

    std::string piece(int32_t t) const {
        auto s = tok_->decode({t}, false);
        return s ? *s : std::string();
    }
    // Chat: {"content": [{token, logprob, top_logprobs: [{token, logprob}]}]}. Completions (OpenAI's
    // legacy form): {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
    Json logprobs_of(const std::vector<std::vector<TokenLogprob>>& steps) {
        if (chat_) {
            Json content = Json::array();
            for (const auto& lp : steps) {
                Json top = Json::array();
                for (size_t i = 1; i < lp.size(); ++i) top.push_back({{"token", piece(lp[i].token)}, {"logprob", lp[i].logprob}});
                content.push_back({{"token", piece(lp[0].token)}, {"logprob", lp[0].logprob}, {"top_logprobs", top}});
            }
            return {{"content", content}};
        }
        Json tokens = Json::array(), values = Json::array(), tops = Json::array(), offsets = Json::array();
        for (const auto& lp : steps) {
            const std::string p = piece(lp[0].token);
            tokens.push_back(p);
            values.push_back(lp[0].logprob);
            Json top = Json::object();
            for (size_t i = 1; i < lp.size(); ++i) top[piece(lp[i].token)] = lp[i].logprob;
            tops.push_back(top);
            offsets.push_back(text_offset_);
            text_offset_ += static_cast<int64_t>(p.size());
        }
        return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
    }
    void append_logprobs(const Json& part) {
        if (logprobs_.is_null()) {
            logprobs_ = part;
            return;
        }
        for (auto it = part.begin(); it != part.end(); ++it)
            for (const Json& x : it.value()) logprobs_[it.key()].push_back(x);
    }

    std::shared_ptr<Job> job_;
    const bool chat_, stream_, include_usage_, want_logprobs_;
    const ResponseOptions opts_;
    std::shared_ptr<const Tokenizer> tok_;
    const int64_t created_;
    const ToolSet tools_;  // before parser_, which points at it
    OutputParser parser_;
    ParsedOutput answer_;
    bool sent_role_ = false, sent_echo_ = false, final_ = false, finished_ = false;
    std::string text_;
    Json logprobs_ = nullptr;
    int64_t text_offset_ = 0;
    FinishReason finish_ = FinishReason::NONE;
    int64_t prompt_tokens_ = 0, completion_tokens_ = 0;
};

}  // namespace

std::shared_ptr<Deferred> make_completion_response(std::shared_ptr<Job> job, const CompletionRequest& req,
                                                   ResponseOptions opts, std::shared_ptr<const Tokenizer> tok) {
    return std::make_shared<CompletionResponse>(std::move(job), req, std::move(opts), std::move(tok));
}

}  // namespace gdn
