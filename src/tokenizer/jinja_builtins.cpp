// Built-in methods and filters of the Jinja subset (jinja_builtins.h).
#include "tokenizer/jinja_builtins.h"

#include <cmath>
#include <cstdlib>

#include "core/log.h"
#include "tokenizer/unicode.h"

namespace gdn::jinja {

Status type_error(const std::string& what) {
    return Status::error("chat template: " + what);
}

const char* kind_name(const Value& v) {
    switch (v.kind()) {
        case Value::UNDEFINED:
            return "undefined";
        case Value::NONE:
            return "none";
        case Value::BOOL:
            return "boolean";
        case Value::INT:
            return "integer";
        case Value::FLOAT:
            return "float";
        case Value::STRING:
            return "string";
        case Value::ARRAY:
            return "list";
        case Value::OBJECT:
            return "dict";
        case Value::FUNCTION:
            return "function";
    }
    return "?";
}

// Code points of a string (for Python-style indexing, slicing and len()).
std::vector<std::string> code_points(const std::string& s) {
    std::vector<std::string> cps;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = i;
        utf8_next(s, &j);
        cps.push_back(s.substr(i, j - i));
        i = j;
    }
    return cps;
}

namespace {

bool is_py_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
    auto strip_char = [&](char c) {
        if (chars.is_string()) return chars.str().find(c) != std::string::npos;
        return is_py_space(c);
    };
    size_t b = 0, e = s.size();
    if (left)
        while (b < e && strip_char(s[b])) ++b;
    if (right)
        while (e > b && strip_char(s[e - 1])) --e;
    return s.substr(b, e - b);
}

Value py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
    Array parts;
    if (!sep.is_string() || sep.str().empty()) {
        size_t i = 0;
        while (i < s.size()) {
            while (i < s.size() && is_py_space(s[i])) ++i;
            if (i >= s.size()) break;
            if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
                parts.push_back(Value(py_strip(s.substr(i), Value(), false, true)));
                break;
            }
            size_t j = i;
            while (j < s.size() && !is_py_space(s[j])) ++j;
            parts.push_back(Value(s.substr(i, j - i)));
            i = j;
        }
        return Value(std::move(parts));
    }
    const std::string& d = sep.str();
    size_t start = 0;
    for (;;) {
        size_t p = s.find(d, start);
        if (p == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit))
            break;
        parts.push_back(Value(s.substr(start, p - start)));
        start = p + d.size();
    }
    parts.push_back(Value(s.substr(start)));
    return Value(std::move(parts));
}

}  // namespace

Value arg(CallArgs& a, size_t i, const char* kw, Value def) {
    if (i < a.positional.size()) return a.positional[i];
    for (auto& [k, v] : a.keyword)
        if (k == kw) return v;
    return def;
}

// Methods on strings, dicts and lists: value.method(args).
EvalResult call_method(const Value& self, const std::string& m, CallArgs& a) {
    if (self.is_string()) {
        const std::string& s = self.str();
        if (m == "startswith" || m == "endswith") {
            Value p = arg(a, 0, "prefix");
            auto test = [&](const std::string& x) {
                if (x.size() > s.size()) return false;
                return m == "startswith" ? s.compare(0, x.size(), x) == 0
                                         : s.compare(s.size() - x.size(), x.size(), x) == 0;
            };
            if (p.is_array()) {
                for (const auto& x : p.arr())
                    if (x.is_string() && test(x.str())) return Value(true);
                return Value(false);
            }
            if (!p.is_string()) return type_error(m + "() needs a string");
            return Value(test(p.str()));
        }
        if (m == "strip") return Value(py_strip(s, arg(a, 0, "chars"), true, true));
        if (m == "lstrip") return Value(py_strip(s, arg(a, 0, "chars"), true, false));
        if (m == "rstrip") return Value(py_strip(s, arg(a, 0, "chars"), false, true));
        if (m == "split") {
            Value mx = arg(a, 1, "maxsplit", Value(int64_t(-1)));
            return py_split(s, arg(a, 0, "sep"), mx.is_number() ? mx.as_int() : -1);
        }
        if (m == "upper" || m == "lower") {
            std::string r = s;
            for (auto& c : r)
                c = m == "upper" ? static_cast<char>(toupper(c)) : static_cast<char>(tolower(c));
            return Value(r);
        }
        if (m == "replace") {
            Value from = arg(a, 0, "old"), to = arg(a, 1, "new");
            if (!from.is_string() || !to.is_string() || from.str().empty())
                return type_error("replace() needs strings");
            std::string r;
            size_t st = 0, p;
            while ((p = s.find(from.str(), st)) != std::string::npos) {
                r += s.substr(st, p - st) + to.str();
                st = p + from.str().size();
            }
            return Value(r + s.substr(st));
        }
        if (m == "format") return type_error("str.format is not supported");
    }
    if (self.is_object()) {
        if (m == "items") {
            Array out;
            for (const auto& [k, v] : self.obj()) out.push_back(Value(Array{Value(k), v}));
            return Value(std::move(out));
        }
        if (m == "keys" || m == "values") {
            Array out;
            for (const auto& [k, v] : self.obj()) out.push_back(m == "keys" ? Value(k) : v);
            return Value(std::move(out));
        }
        if (m == "get") {
            Value key = arg(a, 0, "key");
            Value v = key.is_string() ? self.get(key.str()) : Value();
            return v.is_undefined() ? arg(a, 1, "default", Value::none()) : v;
        }
    }
    return type_error(std::string("unknown method '") + m + "' on a " + kind_name(self));
}

EvalResult apply_filter(const std::string& name, const Value& v, CallArgs& a) {
    if (name == "length" || name == "count") {
        if (v.is_string()) return Value(static_cast<int64_t>(code_points(v.str()).size()));
        if (v.is_array()) return Value(static_cast<int64_t>(v.arr().size()));
        if (v.is_object()) return Value(static_cast<int64_t>(v.obj().size()));
        return type_error(std::string("length of a ") + kind_name(v));
    }
    if (name == "tojson") {
        Value ind = arg(a, 0, "indent");
        return Value(v.to_json(ind.is_number() ? static_cast<int>(ind.as_int()) : -1));
    }
    if (name == "string") return Value(v.to_string());
    if (name == "trim") return Value(py_strip(v.to_string(), arg(a, 0, "chars"), true, true));
    if (name == "upper" || name == "lower") {
        CallArgs none;
        return call_method(Value(v.to_string()), name, none);
    }
    if (name == "safe" || name == "e" || name == "escape") return v;
    if (name == "default" || name == "d") return v.is_undefined() ? arg(a, 0, "default_value", Value("")) : v;
    if (name == "join") {
        if (!v.is_array()) return type_error("join needs a list");
        Value sep = arg(a, 0, "d", Value(""));
        std::string s;
        for (size_t i = 0; i < v.arr().size(); ++i) s += (i ? sep.to_string() : "") + v.arr()[i].to_string();
        return Value(s);
    }
    if (name == "first" || name == "last") {
        if (v.is_array())
            return v.arr().empty() ? Value() : (name == "first" ? v.arr().front() : v.arr().back());
        if (v.is_string()) {
            auto cps = code_points(v.str());
            return cps.empty() ? Value() : Value(name == "first" ? cps.front() : cps.back());
        }
        return type_error(name + " of a " + kind_name(v));
    }
    if (name == "list") {
        if (v.is_array()) return v;
        if (v.is_string()) {
            Array out;
            for (auto& cp : code_points(v.str())) out.push_back(Value(cp));
            return Value(std::move(out));
        }
        if (v.is_object()) {
            CallArgs none;
            return call_method(v, "keys", none);
        }
        return type_error(std::string("list of a ") + kind_name(v));
    }
    if (name == "items") {
        CallArgs none;
        return call_method(v, "items", none);
    }
    if (name == "reverse") {
        if (v.is_array()) {
            Array r(v.arr().rbegin(), v.arr().rend());
            return Value(std::move(r));
        }
        if (v.is_string()) {
            auto cps = code_points(v.str());
            std::string s;
            for (auto it = cps.rbegin(); it != cps.rend(); ++it) s += *it;
            return Value(s);
        }
    }
    if (name == "int") {
        if (v.is_number()) return Value(v.as_int());
        if (v.is_string()) return Value(static_cast<int64_t>(std::strtoll(v.str().c_str(), nullptr, 10)));
        return Value(int64_t(0));
    }
    if (name == "abs" && v.is_number())
        return v.kind() == Value::INT ? Value(static_cast<int64_t>(std::llabs(v.as_int())))
                                      : Value(std::fabs(v.as_double()));
    return type_error("unknown filter '" + name + "'");
}

}  // namespace gdn::jinja
