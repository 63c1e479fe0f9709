// Formats one admitted request's answer as the engine produces it, in OpenAI's shapes: one JSON body at
// the end, or Server-Sent Events (a chunk per delta, then finish_reason, usage, [DONE]). Chat answers
// go through the OutputParser (reasoning_content, content, tool_calls), the same parser whether
// streamed or not.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "server/completion_request.h"
#include "server/http_server.h"
#include "server/job.h"
#include "server/output_parser.h"

namespace gdn {

struct ResponseOptions {
    std::string id, model;
    ParserChoice parsers;          // the server's
    std::string echo;              // completions with echo: the prompt's text
    std::function<void()> cancel;  // the client left
};

std::shared_ptr<Deferred> make_completion_response(std::shared_ptr<Job> job, const CompletionRequest& req,
                                                   ResponseOptions opts,
                                                   std::shared_ptr<const Tokenizer> tok);

// Error bodies in OpenAI's shape (also used by the server's other routes).
HttpResponse json_response(int status, const Json& body);
HttpResponse error_response(const ApiError& e);

}  // namespace gdn
