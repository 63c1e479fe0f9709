// Small helpers for reading JSON files with errors that name the file and the key.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gdn {

// Ordered: objects keep the order they were written in, as Python dicts and JavaScript objects do. A
// chat template renders request objects (tools, tool-call arguments) with tojson and |items, and the
// model was trained on them in the order the client wrote (HF transformers, @huggingface/jinja).
using Json = nlohmann::ordered_json;
// Objects with sorted keys: parsing and lookups stay O(log n) per key (ordered_json's are linear, which is
// quadratic over a 248k-entry tokenizer vocabulary). For big machine-written files (tokenizer,
// safetensors headers, shard indexes) whose key order means nothing.
using SortedJson = nlohmann::json;

// The deepest nesting of arrays and objects any document may have. nlohmann::json copies and destroys
// values recursively (and so does every walker of a document, the Jinja renderer's included): a
// 30000-deep request body overflowed the stack. Real requests, configs and tokenizers nest < 20 deep.
inline constexpr int kMaxJsonDepth = 128;

Result<std::string> read_text_file(const std::string& path);
// Parses a JSON document; a syntax error names the file and the byte offset. Any failure is an error
// value, never an exception: nesting deeper than max_depth, numbers out of range (1e400), invalid
// UTF-8 (the message shows such bytes escaped, so it is valid UTF-8 itself).
Result<Json> parse_json(const std::string& text, const std::string& what, int max_depth = kMaxJsonDepth);
// How many members one object of an untrusted document (a request body) may hold: `max_members`, or the
// limit `by_key` gives an object under that key (logit_bias). Objects keep their key order, and an
// ordered object finds a key in time linear in its size: without a cap one object of n members costs n^2
// (docs/perf.md, behind the constants: util/json_file.h). The cap keeps parsing linear in the body:
// members past it are dropped as they are read, and the parse fails naming the object and the limit.
struct JsonObjectLimits {
    size_t max_members = 256;
    std::vector<std::pair<std::string, size_t>> by_key;
};
Result<Json> parse_json_limited(const std::string& text, const std::string& what,
                                const JsonObjectLimits& limits, int max_depth = kMaxJsonDepth);
// Serialises for a client or a log: invalid UTF-8 in strings is replaced by U+FFFD instead of throwing.
std::string to_json_text(const Json& j);
// `s` with every byte outside printable ASCII written as \xNN (safe inside any message).
std::string printable(std::string_view s);
Result<Json> read_json_file(const std::string& path);
Result<SortedJson> parse_json_sorted(const std::string& text, const std::string& what,
                                     int max_depth = kMaxJsonDepth);
Result<SortedJson> read_json_file_sorted(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace gdn
