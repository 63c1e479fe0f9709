#include "server/completion_request.h"

#include "engine/chat_prompt.h"

#include <algorithm>
#include <limits>

#include <cerrno>
#include <cstdlib>

#include "core/log.h"
#include "server/request_fields.h"
#include "structured/json_schema.h"
#include "structured/regex_grammar.h"
#include "tokenizer/chat_template.h"

namespace gdn {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int kDefaultCompletionTokens = 16;  // /v1/completions without max_tokens (OpenAI's default)
// Bounds on what one request may ask the engine to check at every generated token.
constexpr size_t kMaxStopStrings = 64, kMaxStopBytes = 4096, kMaxStopTokenIds = 1024;
constexpr int64_t kMaxLogprobs = 20;
constexpr int64_t kMaxSamples = 16;  // n: each sample holds a sequence slot

std::string got(const Json& v) {
    std::string s = to_json_text(v);
    return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

std::optional<ApiError> read_number(const Json& b, const char* key, double* out) {
    auto it = b.find(key);
    if (it == b.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) return ApiError::invalid(strprintf("'%s' must be a number", key), key);
    *out = it->get<double>();
    return std::nullopt;
}

std::optional<ApiError> read_bool(const Json& b, const char* key, bool* out) {
    auto it = b.find(key);
    if (it == b.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) return ApiError::invalid(strprintf("'%s' must be a boolean", key), key);
    *out = it->get<bool>();
    return std::nullopt;
}

#define GDN_RETURN_IF_API_ERROR(expr)    \
    do {                                 \
        if (auto _e = (expr)) return _e; \
    } while (0)

// {"token id": bias}: ids as decimal strings (JSON keys), biases in [-100, 100].
std::optional<ApiError> read_logit_bias(const Json& b, const RequestLimits& lim,
                                        std::vector<std::pair<int32_t, float>>* out) {
    auto it = b.find("logit_bias");
    if (it == b.end() || it->is_null()) return std::nullopt;
    if (!it->is_object())
        return ApiError::invalid("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
    if (it->size() > kMaxLogitBias)
        return ApiError::invalid(
            strprintf("'logit_bias' holds at most %zu tokens (got %zu)", kMaxLogitBias, it->size()),
            "logit_bias");
    for (auto kv = it->begin(); kv != it->end(); ++kv) {
        const std::string& key = kv.key();
        char* end = nullptr;
        errno = 0;
        const long long id = key.empty() || key.size() > 10 ? -1 : std::strtoll(key.c_str(), &end, 10);
        if (id < 0 || errno != 0 || end != key.c_str() + key.size() || id >= lim.vocab)
            return ApiError::invalid(strprintf("'logit_bias': key '%s' is not a token id in [0, %d)",
                                               printable(key).c_str(), lim.vocab),
                                     "logit_bias");
        if (!kv.value().is_number() ||
            !(kv.value().get<double>() >= -100.0 && kv.value().get<double>() <= 100.0))
            return ApiError::invalid(
                strprintf("'logit_bias': the bias of token %lld must be a number in [-100, 100] (got %s)", id,
                          got(kv.value()).c_str()),
                "logit_bias");
        out->emplace_back(static_cast<int32_t>(id), kv.value().get<float>());
    }
    return std::nullopt;
}

std::optional<ApiError> read_sampling(const Json& b, bool chat, const RequestLimits& lim,
                                      CompletionRequest* r) {
    SamplingParams& sp = r->params;
    double temperature = 1.0, top_p = 1.0, min_p = 0.0, rep = 1.0, pres = 0.0, freq = 0.0;
    int64_t top_k = -1, max_tokens = -1, min_tokens = 0, n = 1;
    GDN_RETURN_IF_API_ERROR(read_number(b, "temperature", &temperature));
    GDN_RETURN_IF_API_ERROR(read_number(b, "top_p", &top_p));
    GDN_RETURN_IF_API_ERROR(read_int(b, "top_k", -1, lim.vocab, &top_k));
    GDN_RETURN_IF_API_ERROR(read_number(b, "min_p", &min_p));
    GDN_RETURN_IF_API_ERROR(read_number(b, "repetition_penalty", &rep));
    GDN_RETURN_IF_API_ERROR(read_number(b, "presence_penalty", &pres));
    GDN_RETURN_IF_API_ERROR(read_number(b, "frequency_penalty", &freq));
    // Completions accept 0 with echo (OpenAI's legacy way to score a prompt): checked below.
    GDN_RETURN_IF_API_ERROR(read_int(b, "max_tokens", chat ? 1 : 0, kInt32Max, &max_tokens));
    GDN_RETURN_IF_API_ERROR(read_int(b, "max_completion_tokens", 1, kInt32Max, &max_tokens));
    GDN_RETURN_IF_API_ERROR(read_int(b, "min_tokens", 0, kInt32Max, &min_tokens));
    GDN_RETURN_IF_API_ERROR(read_int(b, "n", 1, kMaxSamples, &n));
    r->n = static_cast<int>(n);
    GDN_RETURN_IF_API_ERROR(read_bool(b, "ignore_eos", &sp.ignore_eos));
    GDN_RETURN_IF_API_ERROR(read_bool(b, "skip_special_tokens", &sp.skip_special_tokens));
    GDN_RETURN_IF_API_ERROR(read_bool(b, "include_stop_str_in_output", &sp.include_stop_str_in_output));
    GDN_RETURN_IF_API_ERROR(read_logit_bias(b, lim, &sp.logit_bias));
    sp.temperature = static_cast<float>(temperature);
    sp.top_p = static_cast<float>(top_p);
    sp.top_k = static_cast<int>(top_k == -1 ? 0 : top_k);
    sp.min_p = static_cast<float>(min_p);
    sp.repetition_penalty = static_cast<float>(rep);
    sp.presence_penalty = static_cast<float>(pres);
    sp.frequency_penalty = static_cast<float>(freq);
    r->max_tokens_given = max_tokens >= 0;
    // max_tokens 0: the engine computes the prompt and one token, which the response leaves out.
    r->score_only = max_tokens == 0;
    sp.max_tokens = r->max_tokens_given ? static_cast<int>(std::max<int64_t>(max_tokens, 1))
                                        : (chat ? lim.max_model_len : kDefaultCompletionTokens);
    sp.min_tokens = static_cast<int>(min_tokens);
    if (auto it = b.find("seed"); it != b.end() && !it->is_null()) {
        // Any 64-bit integer, signed or not, names a seed (its bits).
        if (it->is_number_unsigned())
            sp.seed = it->get<uint64_t>();
        else if (it->is_number_integer())
            sp.seed = static_cast<uint64_t>(it->get<int64_t>());
        else
            return ApiError::invalid("'seed' must be an integer", "seed");
    }
    if (auto it = b.find("stop"); it != b.end() && !it->is_null()) {
        const auto bad = ApiError::invalid("'stop' must be a string or a list of strings", "stop");
        if (it->is_string())
            sp.stop = {it->get<std::string>()};
        else if (it->is_array()) {
            if (it->size() > kMaxStopStrings)
                return ApiError::invalid(
                    strprintf("'stop' holds at most %zu strings (got %zu)", kMaxStopStrings, it->size()),
                    "stop");
            for (const Json& s : *it) {
                if (!s.is_string()) return bad;
                sp.stop.push_back(s.get<std::string>());
            }
        } else {
            return bad;
        }
        for (const auto& s : sp.stop)
            if (s.size() > kMaxStopBytes)
                return ApiError::invalid(
                    strprintf("'stop' strings are at most %zu bytes (got %zu)", kMaxStopBytes, s.size()),
                    "stop");
    }
    if (auto it = b.find("stop_token_ids"); it != b.end() && !it->is_null()) {
        if (it->is_array() && it->size() > kMaxStopTokenIds)
            return ApiError::invalid(
                strprintf("'stop_token_ids' holds at most %zu ids (got %zu)", kMaxStopTokenIds, it->size()),
                "stop_token_ids");
        GDN_RETURN_IF_API_ERROR(read_token_ids(*it, "stop_token_ids", lim.vocab, &sp.stop_token_ids));
    }
    r->want_logprobs = false;
    if (chat) {
        bool lp = false;
        int64_t top = 0;
        GDN_RETURN_IF_API_ERROR(read_bool(b, "logprobs", &lp));
        GDN_RETURN_IF_API_ERROR(read_int(b, "top_logprobs", 0, kMaxLogprobs, &top));
        if (top > 0 && !lp)
            return ApiError::invalid("'top_logprobs' requires 'logprobs': true", "top_logprobs");
        if (lp) sp.logprobs = static_cast<int>(top);
        r->want_logprobs = lp;
    } else {
        int64_t lp = -1;
        GDN_RETURN_IF_API_ERROR(read_int(b, "logprobs", 0, kMaxLogprobs, &lp));
        sp.logprobs = static_cast<int>(lp);
        r->want_logprobs = lp >= 0;
        GDN_RETURN_IF_API_ERROR(read_bool(b, "echo", &r->echo));
        // With logprobs, the prompt's tokens come first in them (the first one's logprob null), as
        // OpenAI's legacy completions and vLLM return them (lm-evaluation-harness scores prompts so).
        if (r->echo && r->want_logprobs) sp.prompt_logprobs = sp.logprobs;
        if (r->score_only && !r->echo)
            return ApiError::invalid(
                "'max_tokens' must be >= 1 unless 'echo' is true (0 returns the prompt, nothing generated)",
                "max_tokens");
    }
    GDN_RETURN_IF_API_ERROR(read_bool(b, "stream", &r->stream));
    if (auto so = b.find("stream_options"); so != b.end() && !so->is_null()) {
        if (!so->is_object())
            return ApiError::invalid("'stream_options' must be an object", "stream_options");
        GDN_RETURN_IF_API_ERROR(read_bool(*so, "include_usage", &r->include_usage));
    }
    return std::nullopt;
}

// A constraint's grammar, through the server's cache when it has one. `key` names the kind and holds the
// canonical text of what is compiled.
GrammarCache::Compiled compiled(const RequestLimits& lim, const std::string& key,
                                const std::function<GrammarCache::Compiled()>& compile) {
    return lim.grammars ? lim.grammars->get(key, compile) : compile();
}
// The two constraints both request forms (response_format, structured_outputs) can ask for.
GrammarCache::Compiled schema_compiled(const RequestLimits& lim, const Json& schema) {
    return compiled(lim, "json:" + schema.dump(), [&] { return json_schema_grammar(schema); });
}
GrammarCache::Compiled json_object_compiled(const RequestLimits& lim) {
    return compiled(lim, "json_object", [] { return json_object_grammar(); });
}

// response_format (json_object, json_schema) and vLLM's structured_outputs (json, choice): the grammar
// the output must follow.
std::optional<ApiError> read_structured(const Json& b, const RequestLimits& lim, CompletionRequest* r) {
    std::shared_ptr<const Grammar> g;
    const char* field = nullptr;
    if (auto rf = b.find("response_format"); rf != b.end() && rf->is_object()) {
        field = "response_format";
        const std::string type = rf->value("type", "");
        if (type == "json_object") {
            g = *json_object_compiled(lim);
        } else if (type == "json_schema") {
            auto js = rf->find("json_schema");
            if (js == rf->end() || !js->is_object() || !js->contains("schema"))
                return ApiError::invalid(
                    "response_format json_schema needs {\"json_schema\": {\"name\": ..., \"schema\": {...}}}",
                    field);
            const Json& schema = (*js)["schema"];
            auto cg = schema_compiled(lim, schema);
            if (!cg) return ApiError::invalid("response_format: " + cg.message(), field);
            g = *cg;
        }
    }
    for (const char* key : {"structured_outputs", "guided_json", "guided_choice", "guided_regex"}) {
        auto so = b.find(key);
        if (so == b.end() || so->is_null()) continue;
        if (g)
            return ApiError::invalid(
                std::string("'") + key + "' cannot be combined with another output constraint", key);
        field = key;
        Json spec = *so;
        if (std::string(key) == "guided_json") spec = Json{{"json", *so}};
        if (std::string(key) == "guided_choice") spec = Json{{"choice", *so}};
        if (std::string(key) == "guided_regex") spec = Json{{"regex", *so}};
        if (!spec.is_object()) return ApiError::invalid(std::string("'") + key + "' must be an object", key);
        for (auto it = spec.begin(); it != spec.end(); ++it) {
            if (it.value().is_null()) continue;
            if (g) return ApiError::invalid(std::string("'") + key + "' holds more than one constraint", key);
            Result<std::shared_ptr<const Grammar>> cg = Status::error("");
            if (it.key() == "json") {
                Json schema = it.value();
                if (schema.is_string()) {  // vLLM accepts the schema as JSON text too
                    auto parsed = parse_json(schema.get<std::string>(), "structured_outputs.json");
                    if (!parsed) return ApiError::invalid(parsed.message(), key);
                    schema = *parsed;
                }
                cg = schema_compiled(lim, schema);
            } else if (it.key() == "choice") {
                const Json& choices = it.value();
                cg = compiled(lim, "choice:" + choices.dump(), [&] { return choice_grammar(choices); });
            } else if (it.key() == "regex") {
                if (!it.value().is_string())
                    return ApiError::invalid(std::string(key) + ".regex must be a string", key);
                const std::string re = it.value().get<std::string>();
                cg = compiled(lim, "regex:" + re, [&] { return regex_grammar(re); });
            } else if (it.key() == "json_object" && it.value().is_boolean() && it.value().get<bool>()) {
                cg = json_object_compiled(lim);
            } else {
                return ApiError::invalid(std::string("'") + key + "." + it.key() +
                                             "' is not supported (json, regex, choice "
                                             "and json_object are)",
                                         key);
            }
            if (!cg) return ApiError::invalid(std::string(key) + ": " + cg.message(), key);
            g = *cg;
        }
    }
    r->params.grammar = std::move(g);
    return std::nullopt;
}

std::optional<ApiError> read_tools(const Json& b, const RequestLimits& lim, CompletionRequest* r) {
    auto t = b.find("tools");
    auto c = b.find("tool_choice");
    const bool named = c != b.end() && c->is_object();  // one call of that function
    // none / auto / required (request_fields.cpp refused other strings).
    const std::string choice = c != b.end() && c->is_string() ? c->get<std::string>() : "auto";
    const bool forced = named || choice == "required";
    if (t == b.end() || t->is_null() || (t->is_array() && t->empty())) {
        if (forced)
            return ApiError::invalid("tool_choice asks for a tool call, but the request has no 'tools'",
                                     "tool_choice");
        return std::nullopt;
    }
    auto set = ToolSet::from_request(*t);
    if (!set) return ApiError::invalid(set.message(), "tools");
    r->tools = std::move(*set);
    r->prompt.tools = *t;
    r->parse_tool_calls = choice != "none";
    GDN_RETURN_IF_API_ERROR(read_bool(b, "parallel_tool_calls", &r->parallel_tool_calls));
    // "required" or a named function: the output is forced to be such a call (a grammar in the form the
    // tool-call parser reads).
    std::vector<ToolSignature> callable;
    if (named) {
        const Json* f = c->contains("function") ? &(*c)["function"] : nullptr;
        if (c->value("type", "") != "function" || !f || !f->is_object() || !f->contains("name") ||
            !(*f)["name"].is_string())
            return ApiError::invalid(
                "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}",
                "tool_choice");
        const ToolDef* d = r->tools.find((*f)["name"].get<std::string>());
        if (!d)
            return ApiError::invalid(
                "tool_choice names '" + (*f)["name"].get<std::string>() + "', which is not in 'tools'",
                "tool_choice");
        callable.push_back({d->name, d->parameters});
    } else if (choice == "required") {
        for (const ToolDef& d : r->tools.tools()) callable.push_back({d.name, d.parameters});
    }
    if (!callable.empty()) {
        if (lim.tool_call_parser == "none")
            return ApiError::invalid(
                "tool_choice needs a tool-call parser (the server runs with --tool-call-parser none)",
                "tool_choice");
        if (r->params.grammar)
            return ApiError::invalid(
                "tool_choice \"required\" or a named function cannot be combined with "
                "response_format or structured_outputs",
                "tool_choice");
        const ToolCallForm form = lim.tool_call_parser == "hermes" ? ToolCallForm::HERMES : ToolCallForm::XML;
        const bool parallel = r->parallel_tool_calls && !named;
        Json signature = Json::array();
        for (const ToolSignature& t : callable) signature.push_back(Json::array({t.name, t.parameters}));
        const std::string key = std::string("tools:") + (form == ToolCallForm::HERMES ? "hermes" : "xml") +
                                (parallel ? ":parallel:" : ":one:") + signature.dump();
        auto g = compiled(lim, key, [&] { return tool_call_grammar(callable, form, parallel); });
        if (!g) return ApiError::invalid("tool_choice: " + g.message(), "tools");
        r->params.grammar = *g;
    }
    // One call, then the generation ends (the closing tag is part of the answer, so the call parses).
    if (r->parse_tool_calls && !r->parallel_tool_calls) r->params.stop_inclusive.push_back("</tool_call>");
    return std::nullopt;
}

std::optional<ApiError> read_prompt(const Json& b, bool chat, const RequestLimits& lim,
                                    CompletionRequest* r) {
    if (chat) {
        auto m = b.find("messages");
        if (m == b.end()) return ApiError::invalid("'messages' is required", "messages");
        if (Status st = validate_messages(*m); !st) return ApiError::invalid(st.message(), "messages");
        r->prompt = Prompt::from_messages(*m);
        if (auto k = b.find("chat_template_kwargs"); k != b.end() && !k->is_null()) {
            if (!k->is_object())
                return ApiError::invalid("'chat_template_kwargs' must be an object", "chat_template_kwargs");
            r->prompt.chat_template_kwargs = *k;
            if (auto et = k->find("enable_thinking"); et != k->end()) {
                if (!et->is_boolean())
                    return ApiError::invalid("'chat_template_kwargs.enable_thinking' must be a boolean",
                                             "chat_template_kwargs");
                r->prompt.enable_thinking = et->get<bool>();
            }
        }
        // reasoning_effort "none": no thinking (Qwen has no effort levels; enable_thinking, if given, wins).
        if (auto e = b.find("reasoning_effort");
            e != b.end() && e->is_string() && *e == "none" && !r->prompt.enable_thinking)
            r->prompt.enable_thinking = false;
        GDN_RETURN_IF_API_ERROR(read_structured(b, lim, r));
        return read_tools(b, lim, r);
    }
    GDN_RETURN_IF_API_ERROR(read_structured(b, lim, r));
    auto p = b.find("prompt");
    if (p == b.end() || p->is_null()) return ApiError::invalid("'prompt' is required", "prompt");
    if (p->is_string()) {
        r->prompt = Prompt::from_text(p->get<std::string>());
    } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
        r->prompt = Prompt::from_text((*p)[0].get<std::string>());
    } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
        std::vector<int32_t> ids;
        GDN_RETURN_IF_API_ERROR(read_token_ids(*p, "prompt", lim.vocab, &ids));
        r->prompt = Prompt::from_ids(std::move(ids));
    } else {
        return ApiError::invalid("'prompt' must be a string, a list with one string, or a list of token ids",
                                 "prompt");
    }
    return std::nullopt;
}

}  // namespace

Json ApiError::to_json() const {
    return {{"error",
             {{"message", message},
              {"type", type},
              {"param", param.empty() ? Json(nullptr) : Json(param)},
              {"code", nullptr}}}};
}

std::optional<ApiError> read_int(const Json& b, const char* key, int64_t lo, int64_t hi, int64_t* out) {
    auto it = b.find(key);
    if (it == b.end() || it->is_null()) return std::nullopt;
    const auto range = [&] {
        return ApiError::invalid(strprintf("'%s' must be an integer in [%lld, %lld] (got %s)", key,
                                           (long long)lo, (long long)hi, got(*it).c_str()),
                                 key);
    };
    if (it->is_number_unsigned()) {  // nlohmann keeps non-negative integers unsigned: > INT64_MAX fits only
                                     // here
        const uint64_t v = it->get<uint64_t>();
        if (hi < 0 || v > static_cast<uint64_t>(hi) || static_cast<int64_t>(v) < lo) return range();
        *out = static_cast<int64_t>(v);
        return std::nullopt;
    }
    if (!it->is_number_integer()) return range();
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) return range();
    *out = v;
    return std::nullopt;
}

std::optional<ApiError> read_token_ids(const Json& list, const char* key, int32_t vocab,
                                       std::vector<int32_t>* out) {
    if (!list.is_array()) return ApiError::invalid(strprintf("'%s' must be a list of token ids", key), key);
    out->clear();
    out->reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
        const Json& x = list[i];
        const bool in_range = (x.is_number_unsigned() && x.get<uint64_t>() < static_cast<uint64_t>(vocab)) ||
                              (x.is_number_integer() && !x.is_number_unsigned() && x.get<int64_t>() >= 0 &&
                               x.get<int64_t>() < vocab);
        if (!x.is_number_integer())
            return ApiError::invalid(
                strprintf("'%s' token lists must hold integers (item %zu is %s)", key, i, got(x).c_str()),
                key);
        if (!in_range)
            return ApiError::invalid(strprintf("'%s': token id %s (item %zu) is out of range [0, %d)", key,
                                               got(x).c_str(), i, vocab),
                                     key);
        out->push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    return std::nullopt;
}

std::optional<ApiError> parse_completion_request(const Json& b, bool chat, const RequestLimits& lim,
                                                 CompletionRequest* r) {
    r->chat = chat;
    if (auto it = b.find("model"); it != b.end() && !it->is_null()) {
        if (!it->is_string()) return ApiError::invalid("'model' must be a string", "model");
        if (it->get<std::string>() != lim.served_model_name)
            return ApiError{404,
                            "The model '" + it->get<std::string>() +
                                "' does not exist (this server serves '" + lim.served_model_name + "')",
                            "invalid_request_error", "model"};
    }
    GDN_RETURN_IF_API_ERROR(check_request_fields(b, chat));
    GDN_RETURN_IF_API_ERROR(read_sampling(b, chat, lim, r));
    GDN_RETURN_IF_API_ERROR(read_prompt(b, chat, lim, r));
    // The checks that need no prompt length (ranges of the float fields, min_tokens <= max_tokens).
    if (Status st = r->params.validate(lim.vocab); !st) return ApiError::invalid(st.message());
    return std::nullopt;
}

std::optional<ApiError> tokenize_prompt(CompletionRequest* r, const Tokenizer& tok, const ChatTemplate* chat,
                                        const RequestLimits& lim, std::vector<int32_t>* ids,
                                        std::vector<int64_t>* message_ends) {
    const Prompt& p = r->prompt;
    if (!p.messages.is_null()) {
        if (!chat)
            return ApiError::invalid(
                "this model has no chat template; send a prompt to /v1/completions instead", "messages");
        if (!p.tools.is_null() && !chat->renders_tools())
            return ApiError::invalid(
                "this model's chat template does not render tools (serve it with --chat-template FILE "
                "of a template that does)",
                "tools");
        auto rc = render_chat(*chat, tok, p, message_ends != nullptr);
        if (!rc)
            return ApiError::invalid("the chat template failed on these messages: " + rc.message(),
                                     "messages");
        r->opens_reasoning = rc->opens_reasoning;
        // A constraint holds for the answer, not the reasoning: it starts after </think>.
        r->params.grammar_after_reasoning = r->params.grammar && lim.reasoning_parser && r->opens_reasoning;
        *ids = std::move(rc->ids);
        if (message_ends) *message_ends = std::move(rc->message_ends);
    } else if (!p.ids.empty()) {
        *ids = p.ids;
    } else {
        *ids = tok.encode(p.text);
    }
    if (ids->empty()) return ApiError::invalid("the prompt is empty", chat ? "messages" : "prompt");
    const int64_t n = static_cast<int64_t>(ids->size()), ctx = lim.max_model_len;
    SamplingParams& sp = r->params;
    if (n >= ctx)
        return ApiError::invalid(
            strprintf("This model's maximum context length is %lld tokens. However, your prompt is %lld "
                      "tokens, which leaves no room for a completion. Please reduce the length of the %s.",
                      (long long)ctx, (long long)n, chat ? "messages" : "prompt"),
            chat ? "messages" : "prompt");
    if (r->max_tokens_given && n + sp.max_tokens > ctx)
        return ApiError::invalid(
            strprintf("This model's maximum context length is %lld tokens. However, you requested %lld "
                      "tokens (%lld in the %s, %d in the completion). Please reduce the length of the "
                      "%s or completion.",
                      (long long)ctx, (long long)(n + sp.max_tokens), (long long)n,
                      chat ? "messages" : "prompt", sp.max_tokens, chat ? "messages" : "prompt"),
            "max_tokens");
    if (!r->max_tokens_given) sp.max_tokens = static_cast<int>(std::min<int64_t>(sp.max_tokens, ctx - n));
    if (sp.min_tokens > sp.max_tokens) {
        if (r->max_tokens_given)
            return ApiError::invalid(
                strprintf("min_tokens (%d) must be <= max_tokens (%d)", sp.min_tokens, sp.max_tokens),
                "min_tokens");
        return ApiError::invalid(
            strprintf("min_tokens (%d) is more than the %lld tokens the context leaves after the prompt",
                      sp.min_tokens, (long long)(ctx - n)),
            "min_tokens");
    }
    return std::nullopt;
}

}  // namespace gdn
