// The tools a chat request offers (OpenAI `tools`), validated, and the typing of a tool call's
// parameters by each tool's JSON schema. Qwen3.5's XML call form writes every value as raw text
// (`<parameter=city>\nParis\n</parameter>`, `<parameter=days>\n3\n</parameter>`): whether `3` is the
// number 3 or the string "3" is known only from the schema, so the parser asks here.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "util/json_file.h"

namespace gdn {

struct ToolDef {
    std::string name;
    Json parameters;  // the function's JSON schema (an object), or null when the tool declared none
};

class ToolSet {
  public:
    // From the request's `tools`: [{"type": "function", "function": {"name", "description"?,
    // "parameters"?, "strict"?}}]. Errors name the item and the field (tools[2].function.name ...).
    static Result<ToolSet> from_request(const Json& tools);

    bool empty() const { return tools_.empty(); }
    const std::vector<ToolDef>& tools() const { return tools_; }
    const ToolDef* find(std::string_view name) const;

    // The JSON text of parameter `param` of tool `tool` written raw as `raw`, typed by the schema:
    // "string" keeps the text; integer / number / boolean / null / object / array parse it when it is
    // such a value (else it stays a string: the model's text is never lost); a parameter without a
    // declared type (or of an unknown tool) parses as JSON when it is JSON, else stays a string.
    std::string typed_value(std::string_view tool, std::string_view param, const std::string& raw) const;

  private:
    std::vector<ToolDef> tools_;
};

}  // namespace gdn
