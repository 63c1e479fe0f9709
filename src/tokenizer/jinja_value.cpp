// jinja::Value: conversions, truthiness, printing and JSON.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/log.h"
#include "tokenizer/jinja.h"

namespace gdn::jinja {

Value Value::from_json(const Json& j) {
    switch (j.type()) {
        case Json::value_t::null:
            return none();
        case Json::value_t::boolean:
            return Value(j.get<bool>());
        case Json::value_t::number_integer:
        case Json::value_t::number_unsigned:
            return Value(j.get<int64_t>());
        case Json::value_t::number_float:
            return Value(j.get<double>());
        case Json::value_t::string:
            return Value(j.get<std::string>());
        case Json::value_t::array: {
            Array a;
            for (const auto& e : j) a.push_back(from_json(e));
            return Value(std::move(a));
        }
        case Json::value_t::object: {
            Object o;
            for (auto it = j.begin(); it != j.end(); ++it) o.emplace_back(it.key(), from_json(it.value()));
            return Value(std::move(o));
        }
        default:
            return Value();
    }
}

bool Value::truthy() const {
    switch (kind_) {
        case UNDEFINED:
        case NONE:
            return false;
        case BOOL:
            return b_;
        case INT:
            return i_ != 0;
        case FLOAT:
            return f_ != 0.0;
        case STRING:
            return !s_.empty();
        case ARRAY:
            return !arr_->empty();
        case OBJECT:
            return !obj_->empty();
        case FUNCTION:
            return true;
    }
    return false;
}

Value Value::get(const std::string& key) const {
    if (kind_ != OBJECT) return Value();
    for (const auto& [k, v] : *obj_)
        if (k == key) return v;
    return Value();
}

void Value::set(const std::string& key, Value v) {
    for (auto& [k, old] : *obj_)
        if (k == key) {
            old = std::move(v);
            return;
        }
    obj_->emplace_back(key, std::move(v));
}

namespace {
std::string format_double(double f) {
    if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 1e15) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.1f", f);
        return buf;
    }
    char buf[64] = "";
    // Shortest representation that round-trips, like JS / Python repr.
    for (int prec = 1; prec <= 17; ++prec) {
        std::snprintf(buf, sizeof(buf), "%.*g", prec, f);
        if (std::strtod(buf, nullptr) == f) break;
    }
    return buf;
}
}  // namespace

std::string Value::to_string() const {
    switch (kind_) {
        case UNDEFINED:
            return "";
        case NONE:
            return "None";
        case BOOL:
            return b_ ? "true" : "false";
        case INT:
            return std::to_string(i_);
        case FLOAT:
            return format_double(f_);
        case STRING:
            return s_;
        case ARRAY:
        case OBJECT:
            return to_json();
        case FUNCTION:
            return "<function>";
    }
    return "";
}

std::string Value::to_json(int indent, int depth) const {
    switch (kind_) {
        case UNDEFINED:
        case NONE:
            return "null";
        case BOOL:
            return b_ ? "true" : "false";
        case INT:
            return std::to_string(i_);
        case FLOAT:
            return Json(f_).dump();
        case STRING:
            return Json(s_).dump(-1, ' ', false, Json::error_handler_t::replace);
        case FUNCTION:
            return "null";
        case ARRAY:
        case OBJECT: {
            // Python json.dumps separators: ", " and ": " (or "," with an indent).
            const std::string item_sep = indent >= 0 ? "," : ", ";
            const std::string pad = indent > 0 ? std::string(indent, ' ') : "";
            std::string base = "\n", child = "\n";
            for (int d = 0; d < depth; ++d) base += pad;
            child = base + pad;
            std::vector<std::string> parts;
            if (kind_ == ARRAY)
                for (const auto& v : *arr_) parts.push_back(v.to_json(indent, depth + 1));
            else
                for (const auto& [k, v] : *obj_)
                    parts.push_back(Json(k).dump(-1, ' ', false, Json::error_handler_t::replace) + ": " +
                                    v.to_json(indent, depth + 1));
            const char open = kind_ == ARRAY ? '[' : '{', close = kind_ == ARRAY ? ']' : '}';
            std::string out(1, open);
            if (indent > 0 && !parts.empty()) {
                for (size_t i = 0; i < parts.size(); ++i) out += (i ? item_sep : "") + child + parts[i];
                out += base;
            } else {
                for (size_t i = 0; i < parts.size(); ++i) out += (i ? item_sep : "") + parts[i];
            }
            return out + close;
        }
    }
    return "null";
}

bool Value::equals(const Value& o) const {
    if (is_number() && o.is_number()) return as_double() == o.as_double();
    if ((kind_ == UNDEFINED || kind_ == NONE) && (o.kind_ == UNDEFINED || o.kind_ == NONE))
        return kind_ == o.kind_;
    if (kind_ != o.kind_) return false;
    switch (kind_) {
        case BOOL:
            return b_ == o.b_;
        case STRING:
            return s_ == o.s_;
        case ARRAY: {
            if (arr_->size() != o.arr_->size()) return false;
            for (size_t i = 0; i < arr_->size(); ++i)
                if (!(*arr_)[i].equals((*o.arr_)[i])) return false;
            return true;
        }
        case OBJECT: {
            if (obj_->size() != o.obj_->size()) return false;
            for (const auto& [k, v] : *obj_)
                if (!v.equals(o.get(k))) return false;
            return true;
        }
        case FUNCTION:
            return fn_ == o.fn_;
        default:
            return true;
    }
}

}  // namespace gdn::jinja
