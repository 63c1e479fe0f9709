#include "server/completion_response.h"

#include <chrono>
#include <cmath>

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
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

class CompletionResponse : public Deferred {
  public:
    CompletionResponse(std::shared_ptr<Job> job, const CompletionRequest& req, ResponseOptions opts,
                       std::shared_ptr<const Tokenizer> tok)
        : job_(std::move(job)),
          chat_(req.chat),
          stream_(req.stream),
          include_usage_(req.include_usage),
          want_logprobs_(req.want_logprobs),
          echo_logprobs_(!req.chat && req.echo && req.want_logprobs),
          score_only_(!req.chat && req.score_only),
          opts_(std::move(opts)),
          tok_(std::move(tok)),
          created_(unix_time()),
          tools_(req.tools) {
        for (int i = 0; i < std::max(1, req.n); ++i) {
            OutputParserOptions po = parser_options(req);
            po.id_prefix += std::to_string(i) + "_";
            choices_.push_back(std::make_unique<Choice>(po));
            choices_.back()->text_offset = static_cast<int64_t>(opts_.echo.size());
        }
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
        Json list = Json::array();
        for (size_t i = 0; i < choices_.size(); ++i) {
            Choice& c = *choices_[i];
            if (chat_) c.answer.add(c.parser.finish());
            Json choice = {{"index", i}, {"finish_reason", finish_reason(c)}};
            if (chat_)
                choice["message"] = message(c);
            else
                choice["text"] = opts_.echo + c.text;
            if (want_logprobs_ && c.logprobs.is_null())
                c.logprobs = logprobs_of({}, c);  // no tokens: the empty form
            choice["logprobs"] = want_logprobs_ ? c.logprobs : Json(nullptr);
            list.push_back(std::move(choice));
        }
        return json_response(200, {{"id", opts_.id},
                                   {"object", chat_ ? "chat.completion" : "text_completion"},
                                   {"created", created_},
                                   {"model", opts_.model},
                                   {"choices", list},
                                   {"usage", usage()}});
    }

    bool next_chunk(std::string* out) override {
        std::unique_lock<std::mutex> lock(job_->mu);
        while (!job_->outs.empty()) {
            RequestOutput o = std::move(job_->outs.front());
            job_->outs.pop_front();
            if (score_only_) leave_out_generated(o);
            const int index = index_of(o.id);
            Choice& c = *choices_[index];
            prompt_tokens_ = o.prompt_tokens;
            c.completion_tokens = o.completion_tokens;
            if (chat_ && !c.sent_role) {
                *out += event(index, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
                c.sent_role = true;
            }
            Json lps = nullptr;
            if (want_logprobs_ && !o.logprobs.empty()) lps = logprobs_of(o.logprobs, c);
            lps = with_prompt(c, o, std::move(lps));
            if (chat_) {
                const size_t before = out->size();
                chat_events(index, c.parser.feed(o.text_delta), lps, out);
                if (out->size() == before && !lps.is_null())
                    *out += event(index, Json::object(), nullptr, lps);
            } else {
                std::string text = o.text_delta;
                if (!c.sent_echo) text = opts_.echo + text, c.sent_echo = true;
                // A step that generated tokens sends a chunk even when they complete no text yet (a
                // partial UTF-8 character, a special token), as vLLM does: the client sees every token's
                // arrival, and streaming TTFT means the first token. The final chunk carries the last.
                const bool token_without_chunk = !o.new_tokens.empty() && o.finish == FinishReason::NONE;
                if (!text.empty() || !lps.is_null() || token_without_chunk)
                    *out += event(index, Json(text), nullptr, lps);
            }
            if (o.finish != FinishReason::NONE) {
                c.finish = o.finish;
                if (chat_) chat_events(index, c.parser.finish(), nullptr, out);
                *out += event(index, chat_ ? Json::object() : Json(""), finish_reason(c), nullptr);
                c.final = true;
            }
        }
        if (!job_->done) return false;
        for (const auto& c : choices_)
            if (!c->final) return false;
        if (include_usage_) {
            Json u = {
                {"id", opts_.id},           {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},      {"model", opts_.model},
                {"choices", Json::array()}, {"usage", usage()}};
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
    // One sample's answer so far.
    struct Choice {
        explicit Choice(const OutputParserOptions& po) : parser(po) {}
        OutputParser parser;
        ParsedOutput answer;  // chat
        std::string text;     // completions
        Json logprobs = nullptr;
        int64_t text_offset = 0, completion_tokens = 0;
        FinishReason finish = FinishReason::NONE;
        bool sent_role = false, sent_echo = false, final = false;
        bool prompt_done = false;  // echo with logprobs: the prompt's part is in (it comes first)
    };

    OutputParserOptions parser_options(const CompletionRequest& req) const {
        OutputParserOptions po;
        po.reasoning = req.chat && opts_.parsers.reasoning_on();
        po.starts_in_reasoning = po.reasoning && req.opens_reasoning;
        po.tools = req.chat && req.parse_tool_calls && opts_.parsers.tool_calls_on() ? &tools_ : nullptr;
        po.id_prefix = "call_" + opts_.id + "_";
        return po;
    }

    int index_of(int64_t engine_id) const {
        for (size_t i = 0; i < job_->engine_ids.size(); ++i)
            if (job_->engine_ids[i] == engine_id) return static_cast<int>(i);
        return 0;
    }

    // Non-streaming: folds the outputs so far into the answers (the job's lock held).
    void take() {
        while (!job_->outs.empty()) {
            RequestOutput& o = job_->outs.front();
            if (score_only_) leave_out_generated(o);
            Choice& c = *choices_[index_of(o.id)];
            if (chat_)
                c.answer.add(c.parser.feed(o.text_delta));
            else
                c.text += o.text_delta;
            if (want_logprobs_ && !o.logprobs.empty()) append_logprobs(c, logprobs_of(o.logprobs, c));
            if (echo_logprobs_ && !c.prompt_done) {  // the prompt's part goes first
                Json lps = with_prompt(c, o, nullptr);
                if (!lps.is_null()) {
                    if (!c.logprobs.is_null()) append_logprobs(lps, c.logprobs);
                    c.logprobs = std::move(lps);
                }
            }
            if (o.finish != FinishReason::NONE) c.finish = o.finish;
            prompt_tokens_ = o.prompt_tokens;
            c.completion_tokens = o.completion_tokens;
            job_->outs.pop_front();
        }
    }

    const char* finish_reason(const Choice& c) const {
        if (c.finish == FinishReason::STOP && c.parser.complete_calls() > 0) return "tool_calls";
        return finish_reason_name(c.finish);
    }

    Json message(const Choice& c) const {
        const ParsedOutput& a = c.answer;
        Json m = {{"role", "assistant"}};
        m["content"] = a.calls.empty() || !a.content.empty() ? Json(a.content) : Json(nullptr);
        if (opts_.parsers.reasoning_on())
            m["reasoning_content"] = a.reasoning.empty() ? Json(nullptr) : Json(a.reasoning);
        if (!a.calls.empty()) {
            Json calls = Json::array();
            for (const auto& t : a.calls)
                calls.push_back({{"id", t.id},
                                 {"type", "function"},
                                 {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
            m["tool_calls"] = std::move(calls);
        }
        return m;
    }

    void chat_events(int index, const OutputDelta& d, Json lps, std::string* out) const {
        auto send = [&](Json delta) {
            *out += event(index, delta, nullptr, lps);
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
        int64_t completion = 0;
        for (const auto& c : choices_) completion += c->completion_tokens;
        return {{"prompt_tokens", prompt_tokens_},
                {"completion_tokens", completion},
                {"total_tokens", prompt_tokens_ + completion}};
    }
    std::string event(int index, const Json& delta_or_text, const Json& finish, const Json& logprobs) const {
        Json choice = {{"index", index}};
        if (chat_)
            choice["delta"] = delta_or_text;
        else
            choice["text"] = delta_or_text;
        choice["logprobs"] = logprobs;
        choice["finish_reason"] = finish;
        Json c = {{"id", opts_.id},
                  {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                  {"created", created_},
                  {"model", opts_.model},
                  {"choices", Json::array({choice})}};
        return "data: " + to_json_text(c) + "\n\n";
    }

    std::string piece(int32_t t) const {
        auto s = tok_->decode({t}, false);
        return s ? *s : std::string();
    }
    // Chat: {"content": [{token, logprob, top_logprobs: [{token, logprob}]}]}. Completions (OpenAI's
    // legacy form): {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
    Json logprobs_of(const std::vector<std::vector<TokenLogprob>>& steps, Choice& c) const {
        if (chat_) {
            Json content = Json::array();
            for (const auto& lp : steps) {
                Json top = Json::array();
                for (size_t i = 1; i < lp.size(); ++i)
                    top.push_back({{"token", piece(lp[i].token)}, {"logprob", lp[i].logprob}});
                content.push_back(
                    {{"token", piece(lp[0].token)}, {"logprob", lp[0].logprob}, {"top_logprobs", top}});
            }
            return {{"content", content}};
        }
        return legacy_logprobs(steps, &c.text_offset);
    }
    // The legacy form from *offset on (advanced past the tokens). A NaN logprob (the prompt's first
    // token: nothing precedes it) is null, and so are its alternatives.
    Json legacy_logprobs(const std::vector<std::vector<TokenLogprob>>& steps, int64_t* offset) const {
        Json tokens = Json::array(), values = Json::array(), tops = Json::array(), offsets = Json::array();
        for (const auto& lp : steps) {
            const std::string p = piece(lp[0].token);
            tokens.push_back(p);
            const bool none = std::isnan(lp[0].logprob);
            values.push_back(none ? Json(nullptr) : Json(lp[0].logprob));
            Json top = none ? Json(nullptr) : Json::object();
            for (size_t i = 1; i < lp.size(); ++i) top[piece(lp[i].token)] = lp[i].logprob;
            tops.push_back(top);
            offsets.push_back(*offset);
            *offset += static_cast<int64_t>(p.size());
        }
        return {
            {"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
    }
    // max_tokens 0 (with echo): the one token the engine had to generate is not part of the answer.
    static void leave_out_generated(RequestOutput& o) {
        o.text_delta.clear();
        o.logprobs.clear();
        o.completion_tokens = 0;
        if (o.finish != FinishReason::NONE && o.finish != FinishReason::ABORT)
            o.finish = FinishReason::LENGTH;
    }
    static void append_logprobs(Choice& c, const Json& part) { append_logprobs(c.logprobs, part); }
    static void append_logprobs(Json& to, const Json& part) {
        if (to.is_null()) {
            to = part;
            return;
        }
        for (auto it = part.begin(); it != part.end(); ++it)
            for (const Json& x : it.value()) to[it.key()].push_back(x);
    }

    // `lps` (this output's tokens) behind the prompt's part when this choice has not sent it yet. Only
    // the first sample computes the prompt's logprobs (n > 1 with prefix caching): the others take its.
    Json with_prompt(Choice& c, const RequestOutput& o, Json lps) {
        if (!echo_logprobs_ || c.prompt_done) return lps;
        Json part;
        if (!o.prompt_logprobs.empty()) {
            int64_t offset = 0;  // the echoed text starts the answer
            part = legacy_logprobs(o.prompt_logprobs, &offset);
            if (prompt_part_.is_null()) prompt_part_ = part;
        } else if (!prompt_part_.is_null()) {
            part = prompt_part_;
        } else {
            return lps;
        }
        c.prompt_done = true;
        if (!lps.is_null()) append_logprobs(part, lps);
        return part;
    }

    std::shared_ptr<Job> job_;
    const bool chat_, stream_, include_usage_, want_logprobs_, echo_logprobs_, score_only_;
    Json prompt_part_;  // echo with logprobs: the prompt's part, from the first sample
    const ResponseOptions opts_;
    std::shared_ptr<const Tokenizer> tok_;
    const int64_t created_;
    const ToolSet tools_;  // before choices_, whose parsers point at it
    std::vector<std::unique_ptr<Choice>> choices_;
    bool finished_ = false;
    int64_t prompt_tokens_ = 0;
};

}  // namespace

std::shared_ptr<Deferred> make_completion_response(std::shared_ptr<Job> job, const CompletionRequest& req,
                                                   ResponseOptions opts,
                                                   std::shared_ptr<const Tokenizer> tok) {
    return std::make_shared<CompletionResponse>(std::move(job), req, std::move(opts), std::move(tok));
}

}  // namespace gdn
