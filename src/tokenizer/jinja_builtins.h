// The built-in methods and filters of the Jinja subset (jinja.h): value.method(args) on strings, lists and
// dicts, and value | filter(args), with Python's semantics where templates rely on them. Internal to the
// tokenizer's Jinja implementation.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja.h"

namespace gdn::jinja {

using EvalResult = Result<Value>;

// "chat template: <what>" (the evaluator's type and argument errors).
Status type_error(const std::string& what);
// A value's kind as templates name it ("string", "list", "dict", ...).
const char* kind_name(const Value& v);
// Code points of a string (for Python-style indexing, slicing and len()).
std::vector<std::string> code_points(const std::string& s);
// Argument i, or the keyword argument kw, or def.
Value arg(CallArgs& a, size_t i, const char* kw, Value def = Value());
// value.method(args) on strings, dicts and lists.
EvalResult call_method(const Value& self, const std::string& m, CallArgs& a);
// value | name(args).
EvalResult apply_filter(const std::string& name, const Value& v, CallArgs& a);

}  // namespace gdn::jinja
