// OpenAI request bodies -> engine requests, with every field checked before anything is queued: types,
// integer ranges (never a silent wrap), token ids against the vocabulary, and the prompt's length after
// templating and tokenizing against the context. Pure functions of the body and the model's limits, so
// the fuzz target drives exactly what the server runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/tool_schema.h"
#include "structured/grammar_cache.h"
#include "util/json_file.h"

namespace gdn {

// A client error in the OpenAI shape: HTTP status, message, type, and the request field concerned.
struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // empty: null
    static ApiError invalid(std::string message, std::string param = "") {
        return {400, std::move(message), "invalid_request_error", std::move(param)};
    }
    // {"error": {"message", "type", "param", "code"}}
    Json to_json() const;
};

// The most logit_bias entries a request may carry.
inline constexpr size_t kMaxLogitBias = 1024;
// How many members one object of a request body may hold (util/json_file.h: parsing stays linear in the
// body): logit_bias up to kMaxLogitBias, every other object up to 512 (JSON schemas' properties and
// $defs included).
inline const JsonObjectLimits kRequestObjectLimits{512, {{"logit_bias", kMaxLogitBias}}};

struct RequestLimits {
    std::string served_model_name;
    int32_t vocab = 0;  // the tokenizer's ids: [0, vocab)
    int max_model_len = 0;
    // The server's output parsers (choose_parsers): the form a forced tool call is written in, and
    // whether a constraint waits for the reasoning block to close.
    std::string tool_call_parser = "none";
    bool reasoning_parser = false;
    // Compiled grammars shared by requests (the server's; null: every request compiles its own).
    GrammarCache* grammars = nullptr;
};

// One /v1/completions or /v1/chat/completions request, validated.
struct CompletionRequest {
    bool chat = false;
    Prompt prompt;  // as sent: text, ids, or messages (+ template options)
    SamplingParams params;
    bool max_tokens_given = false;  // false: max_tokens becomes what the context leaves
    bool stream = false, include_usage = false, want_logprobs = false;
    bool echo = false;        // completions: the prompt's text comes first
    bool score_only = false;  // completions max_tokens 0 (with echo): the generated token is left out
    int n = 1;                // samples of the prompt (one prefill, prefix-cache sharing)
    // Chat tools (prompt.tools holds them as sent, for the template).
    ToolSet tools;
    bool parse_tool_calls = false;    // tools given and tool_choice is not "none"
    bool parallel_tool_calls = true;  // false: generation ends after the first call
    bool opens_reasoning = false;     // set by tokenize_prompt: the rendered prompt left <think> open
};

// Checks and converts the body (an object already). Fields the server refuses are errors that name them
// (request_fields.h); fields that are neither OpenAI's nor ours are ignored.
std::optional<ApiError> parse_completion_request(const Json& body, bool chat, const RequestLimits& lim,
                                                 CompletionRequest* out);

// Renders (chat) and tokenizes the prompt, then checks its length against the context: the prompt and
// max_tokens must fit (vLLM's rule and message); an unset max_tokens becomes the room that is left
// (chat) or min(16, room) (completions). Fills *ids (and for chat *message_ends when given, see
// render_chat) and finalises req->params.
std::optional<ApiError> tokenize_prompt(CompletionRequest* req, const Tokenizer& tok,
                                        const ChatTemplate* chat, const RequestLimits& lim,
                                        std::vector<int32_t>* ids,
                                        std::vector<int64_t>* message_ends = nullptr);

// An integer field in [lo, hi]; absent or null leaves *out. A wrong type or a value outside the range
// (also one beyond 64 bits) is an error that names the field and the range.
std::optional<ApiError> read_int(const Json& body, const char* key, int64_t lo, int64_t hi, int64_t* out);
// A list of token ids, each in [0, vocab).
std::optional<ApiError> read_token_ids(const Json& list, const char* key, int32_t vocab,
                                       std::vector<int32_t>* out);

}  // namespace gdn
