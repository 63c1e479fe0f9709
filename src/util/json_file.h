// Small helpers for reading JSON files with errors that name the file and the key.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace gdn {

using Json = nlohmann::json;

Result<std::string> read_text_file(const std::string& path);
// Parses a JSON document; a syntax error names the file and the byte offset.
Result<Json> parse_json(const std::string& text, const std::string& what);
Result<Json> read_json_file(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace gdn
