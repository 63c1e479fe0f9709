#include "server/request_fields.h"

#include "core/log.h"

namespace gdn {

namespace {

using Refusal = std::optional<std::string>;

Refusal best_of_not_one(const Json& v) {
    if (v.is_number_integer() && v.get<int64_t>() == 1) return std::nullopt;
    return std::string("only best_of = 1 is supported (n samples: send n)");
}

Refusal store_true(const Json& v) {
    if (v.is_boolean() && !v.get<bool>()) return std::nullopt;
    return std::string("this server stores no completions: 'store' must be false");
}

Refusal service_tier(const Json& v) {
    if (v.is_string() && (v == "auto" || v == "default")) return std::nullopt;
    return std::string("this server has one service tier: 'service_tier' must be \"auto\" or \"default\"");
}

Refusal modalities(const Json& v) {
    if (v.is_array() && v.size() == 1 && v[0] == "text") return std::nullopt;
    return std::string("this server produces text only: 'modalities' must be [\"text\"]");
}

Refusal tool_choice(const Json& v) {
    if (v.is_string() && (v == "none" || v == "auto" || v == "required")) return std::nullopt;
    if (v.is_object()) return std::nullopt;  // checked against the tools by read_tools
    return std::string(
        "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
        "{\"name\": ...}}");
}

Refusal response_format(const Json& v) {
    const std::string type = v.is_object() ? v.value("type", "") : "";
    if (type == "text" || type == "json_object" || type == "json_schema") return std::nullopt;
    return std::string(
        "'response_format' must be an object with 'type' \"text\", \"json_object\" or \"json_schema\"");
}

Refusal reasoning_effort(const Json& v) {
    if (v.is_string() && (v == "none" || v == "minimal" || v == "low" || v == "medium" || v == "high"))
        return std::nullopt;
    return std::string(
        "'reasoning_effort' must be one of \"none\", \"minimal\", \"low\", \"medium\", \"high\"");
}

}  // namespace

const std::vector<RequestField>& request_fields() {
    static const std::vector<RequestField> fields = {
        // name, chat, completions, use, note, refuse_value
        {"model", true, true, FieldUse::IMPLEMENTED, "must name the served model (404 otherwise)"},
        {"messages", true, false, FieldUse::IMPLEMENTED, "rendered through the checkpoint's chat template"},
        {"prompt", false, true, FieldUse::IMPLEMENTED, "a string, a list with one string, or token ids"},
        {"temperature", true, true, FieldUse::IMPLEMENTED, ""},
        {"top_p", true, true, FieldUse::IMPLEMENTED, ""},
        {"max_tokens", true, true, FieldUse::IMPLEMENTED, ""},
        {"max_completion_tokens", true, true, FieldUse::IMPLEMENTED, ""},
        {"presence_penalty", true, true, FieldUse::IMPLEMENTED, ""},
        {"frequency_penalty", true, true, FieldUse::IMPLEMENTED, ""},
        {"logit_bias", true, true, FieldUse::IMPLEMENTED,
         "token id -> bias in [-100, 100], added to the logit"},
        {"logprobs", true, true, FieldUse::IMPLEMENTED, ""},
        {"top_logprobs", true, false, FieldUse::IMPLEMENTED, ""},
        {"seed", true, true, FieldUse::IMPLEMENTED,
         "per request: the same seed gives the same sample in any batch"},
        {"stop", true, true, FieldUse::IMPLEMENTED, ""},
        {"stream", true, true, FieldUse::IMPLEMENTED, ""},
        {"stream_options", true, true, FieldUse::IMPLEMENTED, "include_usage"},
        {"n", true, true, FieldUse::IMPLEMENTED,
         "1..16 samples; the prompt is prefilled once (prefix cache)"},
        {"echo", false, true, FieldUse::IMPLEMENTED,
         "the prompt's text before the completion (with logprobs: the prompt's logprobs first)"},
        {"tools", true, false, FieldUse::IMPLEMENTED,
         "rendered by the template; calls parsed into tool_calls"},
        {"tool_choice", true, false, FieldUse::IMPLEMENTED,
         "none, auto, required, a named function (enforced by a grammar)", tool_choice},
        {"parallel_tool_calls", true, false, FieldUse::IMPLEMENTED,
         "false: generation ends after the first call"},
        {"response_format", true, true, FieldUse::IMPLEMENTED,
         "text, json_object, json_schema (enforced by a grammar)", response_format},
        {"reasoning_effort", true, false, FieldUse::IMPLEMENTED,
         "\"none\" turns thinking off (enable_thinking = false); other levels leave it on: Qwen has no "
         "effort levels",
         reasoning_effort},
        {"user", true, true, FieldUse::NO_EFFECT,
         "an end-user identifier; this server keeps no per-user records"},
        {"safety_identifier", true, false, FieldUse::NO_EFFECT, "an end-user identifier, as 'user'"},
        {"prompt_cache_key", true, false, FieldUse::NO_EFFECT,
         "a cache-routing hint: the prefix cache needs none"},
        {"metadata", true, false, FieldUse::NO_EFFECT,
         "tags for stored completions; this server stores none"},
        {"store", true, false, FieldUse::NO_EFFECT, "false only", store_true},
        {"service_tier", true, false, FieldUse::NO_EFFECT, "\"auto\" or \"default\" only", service_tier},
        {"modalities", true, false, FieldUse::NO_EFFECT, "[\"text\"] only", modalities},
        {"best_of", false, true, FieldUse::NO_EFFECT, "1 only", best_of_not_one},
        {"audio", true, false, FieldUse::REFUSED, "no audio output"},
        {"prediction", true, false, FieldUse::REFUSED, "predicted outputs are not implemented"},
        {"web_search_options", true, false, FieldUse::REFUSED, "no web search"},
        {"functions", true, false, FieldUse::REFUSED, "deprecated by OpenAI: send 'tools'"},
        {"function_call", true, false, FieldUse::REFUSED, "deprecated by OpenAI: send 'tool_choice'"},
        {"verbosity", true, false, FieldUse::REFUSED, "no verbosity levels"},
        {"suffix", false, true, FieldUse::REFUSED, "no fill-in-the-middle"},
        // vLLM's extensions.
        {"top_k", true, true, FieldUse::IMPLEMENTED, "vLLM"},
        {"min_p", true, true, FieldUse::IMPLEMENTED, "vLLM"},
        {"repetition_penalty", true, true, FieldUse::IMPLEMENTED, "vLLM"},
        {"min_tokens", true, true, FieldUse::IMPLEMENTED, "vLLM"},
        {"ignore_eos", true, true, FieldUse::IMPLEMENTED, "vLLM"},
        {"skip_special_tokens", true, true, FieldUse::IMPLEMENTED, "vLLM"},
        {"stop_token_ids", true, true, FieldUse::IMPLEMENTED, "vLLM"},
        {"include_stop_str_in_output", true, true, FieldUse::IMPLEMENTED, "vLLM"},
        {"chat_template_kwargs", true, false, FieldUse::IMPLEMENTED,
         "vLLM: template variables (enable_thinking)"},
        {"structured_outputs", true, true, FieldUse::IMPLEMENTED,
         "vLLM: json, regex, choice, json_object (grammar: not yet)"},
        {"guided_json", true, true, FieldUse::IMPLEMENTED, "vLLM's older name of structured_outputs.json"},
        {"guided_choice", true, true, FieldUse::IMPLEMENTED,
         "vLLM's older name of structured_outputs.choice"},
        {"guided_regex", true, true, FieldUse::IMPLEMENTED, "vLLM's older name of structured_outputs.regex"},
        {"guided_grammar", true, true, FieldUse::REFUSED, "grammar constraints are not implemented yet"},
    };
    return fields;
}

std::optional<ApiError> check_request_fields(const Json& body, bool chat) {
    for (const RequestField& f : request_fields()) {
        auto it = body.find(f.name);
        if (it == body.end() || it->is_null()) continue;
        const bool here = chat ? f.chat : f.completions;
        if (!here) {
            // Another endpoint's field: OpenAI's would be silently dropped, so it is an error too.
            return ApiError::invalid(strprintf("'%s' is not a field of %s (it belongs to %s)", f.name,
                                               chat ? "/v1/chat/completions" : "/v1/completions",
                                               chat ? "/v1/completions" : "/v1/chat/completions"),
                                     f.name);
        }
        if (f.use == FieldUse::REFUSED)
            return ApiError::invalid(strprintf("'%s' is not supported by this server: %s", f.name, f.note),
                                     f.name);
        if (f.refuse_value)
            if (auto why = f.refuse_value(*it)) return ApiError::invalid(*why, f.name);
    }
    return std::nullopt;
}

}  // namespace gdn
