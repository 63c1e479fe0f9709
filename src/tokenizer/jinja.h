// A small Jinja interpreter for chat templates: the subset Hugging Face chat templates use (if/elif/
// else, for with loop.*, set incl. namespace attributes, macros, filters, tests, Python string methods,
// slicing), with the whitespace handling of @huggingface/jinja (trim_blocks and lstrip_blocks on).
// Rendering follows that library, the reference our tests compare against.
#pragma once

#include <cstdint>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "util/json_file.h"

namespace gdn::jinja {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, like Python dicts
struct CallArgs;
using Function = std::function<Result<Value>(CallArgs&)>;

class Value {
  public:
    enum Kind { UNDEFINED, NONE, BOOL, INT, FLOAT, STRING, ARRAY, OBJECT, FUNCTION };

    Value() = default;
    static Value none() { return Value(NONE); }
    Value(bool b) : kind_(BOOL), b_(b) {}                                                  // NOLINT
    Value(int64_t i) : kind_(INT), i_(i) {}                                                // NOLINT
    Value(int i) : kind_(INT), i_(i) {}                                                    // NOLINT
    Value(double f) : kind_(FLOAT), f_(f) {}                                               // NOLINT
    Value(std::string s) : kind_(STRING), s_(std::move(s)) {}                              // NOLINT
    Value(const char* s) : kind_(STRING), s_(s) {}                                         // NOLINT
    Value(Array a) : kind_(ARRAY), arr_(std::make_shared<Array>(std::move(a))) {}          // NOLINT
    Value(Object o) : kind_(OBJECT), obj_(std::make_shared<Object>(std::move(o))) {}       // NOLINT
    Value(Function f) : kind_(FUNCTION), fn_(std::make_shared<Function>(std::move(f))) {}  // NOLINT
    static Value from_json(const Json& j);

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == UNDEFINED; }
    bool is_none() const { return kind_ == NONE; }
    bool is_string() const { return kind_ == STRING; }
    bool is_number() const { return kind_ == INT || kind_ == FLOAT; }
    bool is_array() const { return kind_ == ARRAY; }
    bool is_object() const { return kind_ == OBJECT; }
    bool is_function() const { return kind_ == FUNCTION; }
    bool truthy() const;
    bool as_bool() const { return b_; }
    // A float converts saturating (NaN: 0): the plain cast of an out-of-range double is undefined.
    int64_t as_int() const {
        if (kind_ != FLOAT) return i_;
        if (!(f_ == f_)) return 0;
        if (f_ >= 9.2233720368547758e18) return INT64_MAX;
        if (f_ <= -9.2233720368547758e18) return INT64_MIN;
        return static_cast<int64_t>(f_);
    }
    double as_double() const { return kind_ == INT ? static_cast<double>(i_) : f_; }
    const std::string& str() const { return s_; }
    Array& arr() const { return *arr_; }
    Object& obj() const { return *obj_; }
    const Function& fn() const { return *fn_; }
    // Attribute lookup on an object (Undefined when missing).
    Value get(const std::string& key) const;
    void set(const std::string& key, Value v);

    std::string to_string() const;  // how {{ value }} prints
    std::string to_json(int indent = -1, int depth = 0) const;
    bool equals(const Value& o) const;

  private:
    explicit Value(Kind k) : kind_(k) {}
    Kind kind_ = UNDEFINED;
    bool b_ = false;
    int64_t i_ = 0;
    double f_ = 0.0;
    std::string s_;
    std::shared_ptr<Array> arr_;
    std::shared_ptr<Object> obj_;
    std::shared_ptr<Function> fn_;
};

struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
};

struct Node;

class Template {
  public:
    static Result<Template> parse(const std::string& source);
    // Renders with `context` (an object) as the global variables.
    Result<std::string> render(const Value& context) const;

  private:
    std::shared_ptr<Node> root_;
};

}  // namespace gdn::jinja
