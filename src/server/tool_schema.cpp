#include "server/tool_schema.h"

#include "core/log.h"

namespace gdn {

namespace {

constexpr size_t kMaxTools = 512;

// `raw` as a JSON value, or nothing when it is not one document of JSON.
std::optional<Json> as_json(const std::string& raw) {
    auto j = parse_json(raw, "parameter");
    if (!j) return std::nullopt;
    return std::move(*j);
}

bool has_type(const Json& schema, const char* t) {
    if (!schema.is_object()) return false;
    auto it = schema.find("type");
    if (it == schema.end()) return false;
    if (it->is_string()) return *it == t;
    if (it->is_array())
        for (const Json& x : *it)
            if (x.is_string() && x == t) return true;
    return false;
}

}  // namespace

Result<ToolSet> ToolSet::from_request(const Json& tools) {
    ToolSet set;
    if (tools.is_null()) return set;
    if (!tools.is_array()) return Status::error("'tools' must be a list of tools");
    if (tools.size() > kMaxTools)
        return Status::error(strprintf("'tools' holds at most %zu tools (got %zu)", kMaxTools, tools.size()));
    for (size_t i = 0; i < tools.size(); ++i) {
        const Json& t = tools[i];
        if (!t.is_object()) return Status::error(strprintf("tools[%zu] must be an object", i));
        auto type = t.find("type");
        if (type == t.end() || !type->is_string() || *type != "function")
            return Status::error(strprintf("tools[%zu].type must be \"function\"", i));
        auto f = t.find("function");
        if (f == t.end() || !f->is_object())
            return Status::error(strprintf("tools[%zu].function must be an object", i));
        auto name = f->find("name");
        if (name == f->end() || !name->is_string() || name->get<std::string>().empty())
            return Status::error(strprintf("tools[%zu].function.name must be a non-empty string", i));
        ToolDef d;
        d.name = name->get<std::string>();
        if (d.name.find_first_of("<>\n") != std::string::npos)
            return Status::error(
                strprintf("tools[%zu].function.name must not contain '<', '>' or a newline", i));
        if (set.find(d.name))
            return Status::error(
                strprintf("tools[%zu].function.name '%s' is given twice", i, d.name.c_str()));
        if (auto p = f->find("parameters"); p != f->end() && !p->is_null()) {
            if (!p->is_object())
                return Status::error(
                    strprintf("tools[%zu].function.parameters must be a JSON schema object", i));
            d.parameters = *p;
        }
        if (auto s = f->find("strict"); s != f->end() && !s->is_null() && !s->is_boolean())
            return Status::error(strprintf("tools[%zu].function.strict must be a boolean", i));
        set.tools_.push_back(std::move(d));
    }
    return set;
}

const ToolDef* ToolSet::find(std::string_view name) const {
    for (const ToolDef& d : tools_)
        if (d.name == name) return &d;
    return nullptr;
}

std::string ToolSet::typed_value(std::string_view tool, std::string_view param,
                                 const std::string& raw) const {
    const ToolDef* d = find(tool);
    const Json* schema = nullptr;
    if (d && d->parameters.is_object()) {
        auto props = d->parameters.find("properties");
        if (props != d->parameters.end() && props->is_object()) {
            auto it = props->find(std::string(param));
            if (it != props->end()) schema = &*it;
        }
    }
    const Json text(raw);
    if (!schema || !schema->contains("type")) {  // untyped: JSON when it is JSON
        auto j = as_json(raw);
        return to_json_text(j ? *j : text);
    }
    if (has_type(*schema, "string") && !schema->at("type").is_array()) return to_json_text(text);
    auto j = as_json(raw);
    if (j) {
        const bool fits =
            (j->is_number_integer() && (has_type(*schema, "integer") || has_type(*schema, "number"))) ||
            (j->is_number() && has_type(*schema, "number")) ||
            (j->is_boolean() && has_type(*schema, "boolean")) ||
            (j->is_null() && has_type(*schema, "null")) || (j->is_object() && has_type(*schema, "object")) ||
            (j->is_array() && has_type(*schema, "array"));
        if (fits) return to_json_text(*j);
    }
    // Python's spellings, which models trained on Python tool calls write.
    if (has_type(*schema, "boolean") && (raw == "True" || raw == "False"))
        return raw == "True" ? "true" : "false";
    if (has_type(*schema, "null") && raw == "None") return "null";
    return to_json_text(text);
}

}  // namespace gdn
