// Structured outputs compiled to byte grammars: a JSON schema (OpenAI's json_schema response format,
// vLLM's structured_outputs.json), any JSON object (json_object), a choice of strings, and a tool call
// in the template's form (tool_choice "required" or a named function).
//
// Supported schema keywords: type (one or a list), properties, required, additionalProperties (absent
// means false, as OpenAI's strict mode: no undeclared keys; true or a schema allows them after the
// declared ones), items, minItems / maxItems, enum, const, anyOf / oneOf, allOf of one schema, local
// $ref (#, #/$defs/..., #/definitions/..., recursion allowed), minLength / maxLength, pattern
// (regex_grammar.h: raw string characters only); annotations (title, description, default, examples,
// $schema, $id, $comment, deprecated, readOnly, writeOnly) are read past. Anything else (format,
// minimum, ...) is an error naming its schema path: a
// constraint we cannot enforce is refused, never dropped. Numbers are bounded (16 integer digits, 16
// fraction digits) and whitespace between tokens is at most a newline and 20 spaces or tabs, so a
// small model cannot run away inside a number or an indent.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "structured/grammar.h"
#include "util/json_file.h"

namespace gdn {

Result<std::shared_ptr<const Grammar>> json_schema_grammar(const Json& schema);
std::shared_ptr<const Grammar> json_object_grammar();
// Exactly one of the strings (raw text, not JSON).
Result<std::shared_ptr<const Grammar>> choice_grammar(const Json& choices);

enum class ToolCallForm { XML, HERMES };
struct ToolSignature {
    std::string name;
    Json parameters;  // JSON schema of the arguments (null: none declared)
};
// One call (several when `parallel`, separated by "\n") of one of `tools`, in the template's form:
//   XML:    <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
//   Hermes: <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
// XML string values are free text whose lines do not start with '<' (the closing tag must be found);
// other values are JSON by their schema.
Result<std::shared_ptr<const Grammar>> tool_call_grammar(const std::vector<ToolSignature>& tools,
                                                         ToolCallForm form, bool parallel);

}  // namespace gdn
