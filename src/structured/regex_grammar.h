// Regular expressions compiled to grammar rules: vLLM's structured_outputs.regex (the whole output
// matches) and a JSON schema string's `pattern` (inside the string's quotes).
//
// Supported: literals (UTF-8), `.`, classes [a-z_] and [^...], escapes \d \w \s \D \W \S \n \t \r \f
// \v \xHH and escaped punctuation, groups ( ) and (?: ), alternation |, quantifiers * + ? {m} {m,}
// {m,n} (lazy forms match the same strings), ^ at the start and $ at the end. Backreferences,
// lookaround, \b and anchors elsewhere are errors naming the position. Characters are UTF-8
// characters: `.` and negated classes read any character but '\n' (in a JSON string: any character a
// string holds raw, which leaves out '"', '\' and control characters: the pattern then matches a
// subset of what it would match on the decoded string, never more).
#pragma once

#include <memory>
#include <string_view>

#include "core/status.h"
#include "structured/grammar.h"

namespace gdn {

// A rule of `g` matching exactly the strings of `re` (in_json_string: as raw JSON string characters;
// a pattern without ^ / $ may be surrounded by any characters, as JSON schema's pattern searches).
Result<int32_t> regex_rule(Grammar* g, std::string_view re, bool in_json_string);

Result<std::shared_ptr<const Grammar>> regex_grammar(std::string_view re);

}  // namespace gdn
