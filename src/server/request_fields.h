// Every request field the server knows, and what it does with each: one table, so that no OpenAI field
// is silently ignored. A field we implement is read by completion_request.cpp; one we accept without
// an effect is listed with why that is honest (an identifier, a hint, a value that asks for nothing);
// one we cannot honour is refused with a 400 naming it. Fields that are neither OpenAI's nor in this
// table (clients send extras) are ignored, as vLLM does; the README lists this table.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/completion_request.h"
#include "util/json_file.h"

namespace gdn {

enum class FieldUse {
    IMPLEMENTED,  // read and honoured (completion_request.cpp)
    NO_EFFECT,    // accepted; nothing for this server to do (note says why); some values refused
    REFUSED,      // a 400 naming the field whenever it is present and not null
};

struct RequestField {
    const char* name;
    bool chat, completions;  // the endpoints it belongs to
    FieldUse use;
    const char* note;
    // For NO_EFFECT / IMPLEMENTED fields with values we cannot honour: the error for `value`, or nullopt.
    std::optional<std::string> (*refuse_value)(const Json& value) = nullptr;
};

const std::vector<RequestField>& request_fields();

// The first field of `body` that this endpoint refuses (or a refused value), as the error to answer.
std::optional<ApiError> check_request_fields(const Json& body, bool chat);

}  // namespace gdn
