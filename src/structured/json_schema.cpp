#include "structured/json_schema.h"

#include <map>
#include <set>

#include "core/log.h"
#include "structured/regex_grammar.h"

namespace gdn {

namespace {

using Seq = Grammar::Seq;

constexpr int kMaxSchemaDepth = 64;

Status over_budget_error(const std::string& path) {
    return Status::error(
        strprintf("%s: the schema compiles to more than %zu MiB of grammar (the limit): fewer "
                  "or smaller bounded repetitions (maxLength, maxItems) and fewer anyOf branches",
                  path.c_str(), kMaxGrammarBytes >> 20));
}
constexpr int64_t kMaxBounded = 1000;  // minLength / maxLength / minItems / maxItems we expand
constexpr int kMaxDigits = 16, kMaxExponentDigits = 3, kMaxIndent = 20, kMaxLeadingSpace = 8,
              kMaxTrailingSpace = 4;

ByteClass range(uint8_t lo, uint8_t hi) {
    ByteClass c;
    c.add_range(lo, hi);
    return c;
}
ByteClass any_of(std::string_view chars) {
    ByteClass c;
    for (char ch : chars) c.add(static_cast<uint8_t>(ch));
    return c;
}

const std::set<std::string> kAnnotations = {"title",    "description", "default",  "examples",
                                            "$schema",  "$id",         "$comment", "deprecated",
                                            "readOnly", "writeOnly",   "$defs",    "definitions"};
const std::set<std::string> kSupported = {"type",  "properties", "required",  "additionalProperties",
                                          "items", "minItems",   "maxItems",  "enum",
                                          "const", "anyOf",      "oneOf",     "allOf",
                                          "$ref",  "minLength",  "maxLength", "pattern"};

class Compiler {
  public:
    explicit Compiler(const Json* root) : root_(root) { g.set_budget(kMaxGrammarBytes); }
    Grammar g;

    Seq lit(std::string_view s) { return Grammar::literal(s); }
    static GrammarItem ref(int32_t r) { return Grammar::ref(r); }
    static GrammarItem cls(ByteClass c) { return Grammar::cls(c); }

    int32_t rule(const char* name, std::vector<Seq> alts) {
        const int32_t r = g.new_rule(name);
        for (auto& a : alts) g.add_alt(r, std::move(a));
        return r;
    }

    int32_t repeat(int32_t x, int64_t min, int64_t max, const char* name) {
        return g.repeat(x, min, max, name);
    }

    int32_t ws() {
        if (ws_ < 0) {
            const int32_t indent =
                repeat(rule("indent_char", {{cls(any_of(" \t"))}}), 0, kMaxIndent, "indent");
            ws_ = rule("ws", {{}, lit(" "), {cls(ByteClass::of('\n')), ref(indent)}});
        }
        return ws_;
    }
    int32_t string_char() {
        if (char_ < 0) {
            ByteClass plain = range(0x20, 0x7f);
            plain.bits[0x22 >> 6] &= ~(uint64_t{1} << (0x22 & 63));  // '"'
            plain.bits[0x5c >> 6] &= ~(uint64_t{1} << (0x5c & 63));  // '\'
            const ByteClass cont = range(0x80, 0xbf);
            const int32_t hex = rule("hex", {{cls(any_of("0123456789abcdefABCDEF"))}});
            const int32_t esc =
                rule("escape", {{cls(any_of("\"\\/bfnrt"))},
                                {cls(ByteClass::of('u')), ref(hex), ref(hex), ref(hex), ref(hex)}});
            char_ = rule("char", {{cls(plain)},
                                  {cls(range(0xc2, 0xdf)), cls(cont)},
                                  {cls(range(0xe0, 0xef)), cls(cont), cls(cont)},
                                  {cls(range(0xf0, 0xf4)), cls(cont), cls(cont), cls(cont)},
                                  {cls(ByteClass::of('\\')), ref(esc)}});
        }
        return char_;
    }
    int32_t string() {
        if (string_ < 0) {
            const int32_t chr = string_char();
            const int32_t body = g.new_rule("string_body");
            g.add_alt(body, {ref(chr), ref(body)});
            g.add_alt(body, lit("\""));
            g.set_string_rules(body, chr);
            string_ = rule("string", {{cls(ByteClass::of('"')), ref(body)}});
        }
        return string_;
    }
    int32_t digits(int64_t min, int64_t max) {
        return repeat(rule("digit", {{cls(range('0', '9'))}}), min, max, "digits");
    }
    int32_t integer() {
        if (int_ < 0) {
            const int32_t natural =
                rule("natural", {lit("0"), {cls(range('1', '9')), ref(digits(0, kMaxDigits - 1))}});
            int_ = rule("integer", {{ref(natural)}, {cls(ByteClass::of('-')), ref(natural)}});
        }
        return int_;
    }
    int32_t number() {
        if (num_ < 0) {
            const int32_t frac =
                rule("fraction", {{}, {cls(ByteClass::of('.')), ref(digits(1, kMaxDigits))}});
            const int32_t sign = rule("sign", {{}, {cls(any_of("+-"))}});
            const int32_t exp =
                rule("exponent", {{}, {cls(any_of("eE")), ref(sign), ref(digits(1, kMaxExponentDigits))}});
            num_ = rule("number", {{ref(integer()), ref(frac), ref(exp)}});
        }
        return num_;
    }
    int32_t any_value() {
        if (any_ >= 0) return any_;
        any_ = g.new_rule("value");
        const int32_t w = ws(), s = string();
        const int32_t members = g.new_rule("members");
        g.add_alt(members, {cls(ByteClass::of(',')), ref(w), ref(s), ref(w), cls(ByteClass::of(':')), ref(w),
                            ref(any_), ref(w), ref(members)});
        g.add_alt(members, lit("}"));
        const int32_t obj =
            rule("object", {{cls(ByteClass::of('{')), ref(w), cls(ByteClass::of('}'))},
                            {cls(ByteClass::of('{')), ref(w), ref(s), ref(w), cls(ByteClass::of(':')), ref(w),
                             ref(any_), ref(w), ref(members)}});
        const int32_t items = g.new_rule("items");
        g.add_alt(items, {cls(ByteClass::of(',')), ref(w), ref(any_), ref(w), ref(items)});
        g.add_alt(items, lit("]"));
        const int32_t arr = rule("array", {{cls(ByteClass::of('[')), ref(w), cls(ByteClass::of(']'))},
                                           {cls(ByteClass::of('[')), ref(w), ref(any_), ref(w), ref(items)}});
        for (int32_t r : {obj, arr, s, number()}) g.add_alt(any_, {ref(r)});
        for (const char* l : {"true", "false", "null"}) g.add_alt(any_, lit(l));
        return any_;
    }
    int32_t any_object() {
        any_value();
        return g.alts(any_)[0][0].rule;  // the object alternative
    }

    Result<int32_t> value(const Json& schema, const std::string& path, int depth);
    void reset_refs() { refs_.clear(); }  // a new root schema

    // Wraps the value: leading space (the "\n\n" after </think>), the value, a little trailing space.
    void set_root(int32_t v) {
        const int32_t space = rule("space_char", {{cls(any_of(" \t\n"))}});
        g.add_alt(g.root(), {ref(repeat(space, 0, kMaxLeadingSpace, "lead")), ref(v),
                             ref(repeat(space, 0, kMaxTrailingSpace, "trail"))});
    }

  private:
    Result<int32_t> typed(const std::string& type, const Json& schema, const std::string& path, int depth);
    Result<int32_t> object(const Json& schema, const std::string& path, int depth);
    Result<int32_t> array(const Json& schema, const std::string& path, int depth);
    Result<const Json*> resolve(const std::string& ref, const std::string& path);

    const Json* root_;
    std::map<std::string, int32_t> refs_;
    int32_t ws_ = -1, char_ = -1, string_ = -1, int_ = -1, num_ = -1, any_ = -1;
};

Result<int64_t> bound(const Json& schema, const char* key, int64_t dflt, const std::string& path) {
    auto it = schema.find(key);
    if (it == schema.end()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxBounded)
        return Status::error(
            strprintf("%s: '%s' must be an integer in [0, %lld]", path.c_str(), key, (long long)kMaxBounded));
    return it->get<int64_t>();
}

Result<const Json*> Compiler::resolve(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#')
        return Status::error(path + ": only local $ref (\"#...\") is supported (got '" + ref + "')");
    const Json* at = root_;
    size_t i = 1;
    while (i < ref.size()) {
        if (ref[i] != '/') return Status::error(path + ": bad $ref '" + ref + "'");
        const size_t next = ref.find('/', i + 1);
        std::string key = ref.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
        for (size_t p; (p = key.find("~1")) != std::string::npos;) key.replace(p, 2, "/");
        for (size_t p; (p = key.find("~0")) != std::string::npos;) key.replace(p, 2, "~");
        if (!at->is_object() || !at->contains(key))
            return Status::error(path + ": $ref '" + ref + "' does not resolve");
        at = &(*at)[key];
        i = next == std::string::npos ? ref.size() : next;
    }
    return at;
}

Result<int32_t> Compiler::value(const Json& schema, const std::string& path, int depth) {
    if (g.over_budget()) return over_budget_error(path);
    if (depth > kMaxSchemaDepth)
        return Status::error(path + ": the schema nests deeper than " + std::to_string(kMaxSchemaDepth));
    if (schema.is_boolean()) {
        if (schema.get<bool>()) return any_value();
        return Status::error(path + ": the schema false allows no value");
    }
    if (!schema.is_object()) return Status::error(path + ": a schema must be an object or a boolean");
    for (auto it = schema.begin(); it != schema.end(); ++it)
        if (!kSupported.count(it.key()) && !kAnnotations.count(it.key()))
            return Status::error(path + ": '" + it.key() +
                                 "' is not supported by this server's structured outputs");
    if (auto r = schema.find("$ref"); r != schema.end()) {
        if (!r->is_string()) return Status::error(path + ": $ref must be a string");
        const std::string target = r->get<std::string>();
        if (auto m = refs_.find(target); m != refs_.end()) return m->second;
        const int32_t rr = g.new_rule("ref");
        refs_[target] = rr;  // before compiling: recursive schemas refer to it
        GDN_ASSIGN_OR_RETURN(const Json* t, resolve(target, path));
        GDN_ASSIGN_OR_RETURN(int32_t v, value(*t, target, depth + 1));
        g.add_alt(rr, {ref(v)});
        return rr;
    }
    if (auto e = schema.find("enum"); e != schema.end()) {
        if (!e->is_array() || e->empty()) return Status::error(path + ": enum must be a non-empty list");
        const int32_t r = g.new_rule("enum");
        for (const Json& v : *e) g.add_alt(r, lit(to_json_text(v)));
        return r;
    }
    if (auto c = schema.find("const"); c != schema.end()) return rule("const", {lit(to_json_text(*c))});
    for (const char* key : {"anyOf", "oneOf"})
        if (auto a = schema.find(key); a != schema.end()) {
            if (!a->is_array() || a->empty())
                return Status::error(path + ": " + key + " must be a non-empty list");
            if (schema.contains("type") || schema.contains("properties") || schema.contains("items"))
                return Status::error(path + ": " + key +
                                     " beside type / properties / items is not supported");
            const int32_t r = g.new_rule(key);
            for (size_t i = 0; i < a->size(); ++i) {
                GDN_ASSIGN_OR_RETURN(int32_t v,
                                     value((*a)[i], path + "/" + key + "/" + std::to_string(i), depth + 1));
                g.add_alt(r, {ref(v)});
            }
            return r;
        }
    if (auto a = schema.find("allOf"); a != schema.end()) {
        if (!a->is_array() || a->size() != 1)
            return Status::error(path + ": allOf of more than one schema is not supported");
        return value((*a)[0], path + "/allOf/0", depth + 1);
    }
    std::vector<std::string> types;
    if (auto t = schema.find("type"); t != schema.end()) {
        if (t->is_string())
            types.push_back(t->get<std::string>());
        else if (t->is_array())
            for (const Json& x : *t) {
                if (!x.is_string())
                    return Status::error(path + ": type must be a string or a list of strings");
                types.push_back(x.get<std::string>());
            }
        else
            return Status::error(path + ": type must be a string or a list of strings");
    } else if (schema.contains("properties")) {
        types.push_back("object");
    } else if (schema.contains("items")) {
        types.push_back("array");
    } else {
        return any_value();
    }
    if (types.size() == 1) return typed(types[0], schema, path, depth);
    const int32_t r = g.new_rule("types");
    for (const auto& t : types) {
        GDN_ASSIGN_OR_RETURN(int32_t v, typed(t, schema, path, depth));
        g.add_alt(r, {ref(v)});
    }
    return r;
}

Result<int32_t> Compiler::typed(const std::string& type, const Json& schema, const std::string& path,
                                int depth) {
    if (type == "object") return object(schema, path, depth);
    if (type == "array") return array(schema, path, depth);
    if (type == "integer") return integer();
    if (type == "number") return number();
    if (type == "boolean") return rule("boolean", {lit("true"), lit("false")});
    if (type == "null") return rule("null", {lit("null")});
    if (type == "string") {
        if (auto p = schema.find("pattern"); p != schema.end()) {
            if (!p->is_string()) return Status::error(path + ": pattern must be a string");
            if (schema.contains("minLength") || schema.contains("maxLength"))
                return Status::error(path + ": pattern beside minLength / maxLength is not supported");
            auto re = regex_rule(&g, p->get<std::string>(), true);
            if (!re) return Status::error(path + "/pattern: " + re.message());
            return rule("string_pattern", {{cls(ByteClass::of('"')), ref(*re), cls(ByteClass::of('"'))}});
        }
        if (!schema.contains("minLength") && !schema.contains("maxLength")) return string();
        GDN_ASSIGN_OR_RETURN(int64_t lo, bound(schema, "minLength", 0, path));
        GDN_ASSIGN_OR_RETURN(int64_t hi, bound(schema, "maxLength", -1, path));
        if (hi >= 0 && hi < lo) return Status::error(path + ": maxLength is below minLength");
        const int32_t chars = repeat(string_char(), lo, hi, "chars");
        return rule("string_sized", {{cls(ByteClass::of('"')), ref(chars), cls(ByteClass::of('"'))}});
    }
    return Status::error(path + ": type '" + type + "' is not a JSON schema type");
}

Result<int32_t> Compiler::object(const Json& schema, const std::string& path, int depth) {
    const Json empty = Json::object();
    const Json& props = schema.contains("properties") ? schema["properties"] : empty;
    if (!props.is_object()) return Status::error(path + ": properties must be an object");
    std::set<std::string> required;
    if (auto r = schema.find("required"); r != schema.end()) {
        if (!r->is_array()) return Status::error(path + ": required must be a list of names");
        for (const Json& n : *r) {
            if (!n.is_string() || !props.contains(n.get<std::string>()))
                return Status::error(path + ": required name " + to_json_text(n) + " is not in properties");
            required.insert(n.get<std::string>());
        }
    }
    const int32_t w = ws();
    const GrammarItem comma = cls(ByteClass::of(',')), colon = cls(ByteClass::of(':'));
    // The end: '}' or, with additionalProperties, more "key": value pairs first.
    int32_t end_first, end_rest;
    auto add = schema.find("additionalProperties");
    if (add == schema.end() || (add->is_boolean() && !add->get<bool>())) {
        end_first = end_rest = rule("object_end", {lit("}")});
    } else {
        GDN_ASSIGN_OR_RETURN(int32_t v, add->is_boolean()
                                            ? Result<int32_t>(any_value())
                                            : value(*add, path + "/additionalProperties", depth + 1));
        const int32_t pair =
            rule("extra_pair", {{comma, ref(w), ref(string()), ref(w), colon, ref(w), ref(v), ref(w)}});
        const int32_t more = repeat(pair, 0, -1, "extra_pairs");
        end_rest = rule("object_end", {{ref(more), cls(ByteClass::of('}'))}});
        end_first = rule("object_end", {lit("}"),
                                        {ref(string()), ref(w), colon, ref(w), ref(v), ref(w), ref(more),
                                         cls(ByteClass::of('}'))}});
    }
    // from(i, first): properties i.. in order, each required one present, optional ones skippable.
    std::vector<std::pair<std::string, const Json*>> list;
    for (auto it = props.begin(); it != props.end(); ++it) list.emplace_back(it.key(), &it.value());
    int32_t next_first = end_first, next_rest = end_rest;
    for (size_t k = list.size(); k-- > 0;) {
        const std::string& name = list[k].first;  // (not a structured binding: lambdas capture it)
        const Json* sub = list[k].second;
        GDN_ASSIGN_OR_RETURN(int32_t v, value(*sub, path + "/properties/" + name, depth + 1));
        auto pair = [&](bool first) {
            Seq s;
            if (!first) s = {comma, ref(w)};
            Grammar::append_literal(&s, to_json_text(Json(name)));
            s.insert(s.end(), {ref(w), colon, ref(w), ref(v), ref(w), ref(next_rest)});
            return s;
        };
        const bool req = required.count(name) > 0;
        const int32_t f = req ? rule("prop", {pair(true)}) : rule("prop", {pair(true), {ref(next_first)}});
        const int32_t r = req ? rule("prop", {pair(false)}) : rule("prop", {pair(false), {ref(next_rest)}});
        next_first = f, next_rest = r;
    }
    return rule("object", {{cls(ByteClass::of('{')), ref(w), ref(next_first)}});
}

Result<int32_t> Compiler::array(const Json& schema, const std::string& path, int depth) {
    int32_t item;
    if (auto it = schema.find("items"); it != schema.end()) {
        GDN_ASSIGN_OR_RETURN(item, value(*it, path + "/items", depth + 1));
    } else {
        item = any_value();
    }
    GDN_ASSIGN_OR_RETURN(int64_t lo, bound(schema, "minItems", 0, path));
    GDN_ASSIGN_OR_RETURN(int64_t hi, bound(schema, "maxItems", -1, path));
    if (hi >= 0 && hi < lo) return Status::error(path + ": maxItems is below minItems");
    const int32_t w = ws();
    const int32_t more = rule("array_more", {{cls(ByteClass::of(',')), ref(w), ref(item), ref(w)}});
    const int32_t rest = repeat(more, lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : (hi > 0 ? hi - 1 : 0), "array_rest");
    std::vector<Seq> alts;
    if (lo == 0) alts.push_back({cls(ByteClass::of('[')), ref(w), cls(ByteClass::of(']'))});
    if (hi != 0)
        alts.push_back(
            {cls(ByteClass::of('[')), ref(w), ref(item), ref(w), ref(rest), cls(ByteClass::of(']'))});
    return rule("array", std::move(alts));
}

}  // namespace

Result<std::shared_ptr<const Grammar>> json_schema_grammar(const Json& schema) {
    Compiler c(&schema);
    GDN_ASSIGN_OR_RETURN(int32_t v, c.value(schema, "#", 0));
    c.set_root(v);
    if (c.g.over_budget()) return over_budget_error("#");
    if (!c.g.prune_unproductive())
        return Status::error("#: the schema admits no finite JSON document (a $ref cycle with no way out)");
    return std::shared_ptr<const Grammar>(std::make_shared<Grammar>(std::move(c.g)));
}

std::shared_ptr<const Grammar> json_object_grammar() {
    const Json none = Json::object();
    Compiler c(&none);
    c.set_root(c.any_object());
    return std::make_shared<Grammar>(std::move(c.g));
}

Result<std::shared_ptr<const Grammar>> choice_grammar(const Json& choices) {
    if (!choices.is_array() || choices.empty())
        return Status::error("choice must be a non-empty list of strings");
    auto g = std::make_shared<Grammar>();
    for (const Json& c : choices) {
        if (!c.is_string() || c.get<std::string>().empty())
            return Status::error("choice must be a non-empty list of strings");
        g->add_alt(g->root(), Grammar::literal(c.get<std::string>()));
    }
    return std::shared_ptr<const Grammar>(g);
}

Result<std::shared_ptr<const Grammar>> tool_call_grammar(const std::vector<ToolSignature>& tools,
                                                         ToolCallForm form, bool parallel) {
    if (tools.empty()) return Status::error("no tools to call");
    Json holder = Json::object();  // $ref inside a tool's parameters resolves against that tool's schema
    Compiler c(&holder);
    Grammar& g = c.g;
    const int32_t call = g.new_rule("call");
    // XML string values: lines that do not start with '<', ended by "\n</parameter>".
    int32_t text = -1;
    if (form == ToolCallForm::XML) {
        ByteClass not_nl = range(0, 0xff);
        not_nl.bits[0] &= ~(uint64_t{1} << '\n');
        ByteClass line_start = not_nl;
        line_start.bits['<' >> 6] &= ~(uint64_t{1} << ('<' & 63));
        text = g.new_rule("text");
        const int32_t after_nl = g.new_rule("text_line");
        g.add_alt(text, {});
        g.add_alt(text, {Compiler::cls(not_nl), Compiler::ref(text)});
        g.add_alt(text, {Compiler::cls(ByteClass::of('\n')), Compiler::ref(after_nl)});
        g.add_alt(after_nl, {Compiler::cls(line_start), Compiler::ref(text)});
        g.add_alt(after_nl, {Compiler::cls(ByteClass::of('\n')), Compiler::ref(after_nl)});
        g.set_text_rule(text);
    }
    for (const ToolSignature& t : tools) {
        holder = t.parameters.is_null() ? Json::object() : t.parameters;
        c.reset_refs();
        const std::string path = "tools[" + t.name + "].parameters";
        if (form == ToolCallForm::HERMES) {
            int32_t args;
            if (t.parameters.is_null()) {
                args = c.rule("no_args", {c.lit("{}")});
            } else {
                GDN_ASSIGN_OR_RETURN(args, c.value(holder, path, 0));
            }
            Seq s = c.lit("<tool_call>\n{\"name\": " + to_json_text(Json(t.name)) + ", \"arguments\": ");
            s.push_back(Compiler::ref(args));
            Grammar::append_literal(&s, "}\n</tool_call>");
            g.add_alt(call, std::move(s));
            continue;
        }
        const Json empty = Json::object();
        const Json& props =
            holder.contains("properties") && holder["properties"].is_object() ? holder["properties"] : empty;
        std::set<std::string> required;
        if (holder.contains("required") && holder["required"].is_array())
            for (const Json& n : holder["required"])
                if (n.is_string()) required.insert(n.get<std::string>());
        int32_t next = c.rule("params_end", {{}});
        std::vector<std::pair<std::string, const Json*>> list;
        for (auto it = props.begin(); it != props.end(); ++it) list.emplace_back(it.key(), &it.value());
        for (size_t k = list.size(); k-- > 0;) {
            const std::string& name = list[k].first;  // (not a structured binding: lambdas capture it)
            const Json* sub = list[k].second;
            int32_t v;
            const bool is_string = sub->is_object() && sub->contains("type") && (*sub)["type"] == "string" &&
                                   !sub->contains("enum");
            const bool string_enum = sub->is_object() && sub->contains("enum") && (*sub)["enum"].is_array() &&
                                     std::all_of((*sub)["enum"].begin(), (*sub)["enum"].end(),
                                                 [](const Json& x) { return x.is_string(); });
            if (is_string) {
                v = text;
            } else if (string_enum) {  // the template writes strings raw
                v = g.new_rule("raw_enum");
                for (const Json& x : (*sub)["enum"]) g.add_alt(v, c.lit(x.get<std::string>()));
            } else {
                GDN_ASSIGN_OR_RETURN(v, c.value(*sub, path + "/properties/" + name, 0));
            }
            Seq s = c.lit("<parameter=" + name + ">\n");
            s.push_back(Compiler::ref(v));
            Grammar::append_literal(&s, "\n</parameter>\n");
            s.push_back(Compiler::ref(next));
            next = required.count(name) ? c.rule("param", {s}) : c.rule("param", {s, {Compiler::ref(next)}});
        }
        Seq s = c.lit("<tool_call>\n<function=" + t.name + ">\n");
        s.push_back(Compiler::ref(next));
        Grammar::append_literal(&s, "</function>\n</tool_call>");
        g.add_alt(call, std::move(s));
    }
    Seq root = {Compiler::ref(call)};
    if (parallel) {
        const int32_t more =
            c.rule("more_calls", {{Compiler::cls(ByteClass::of('\n')), Compiler::ref(call)}});
        root.push_back(Compiler::ref(c.repeat(more, 0, -1, "calls")));
    }
    g.add_alt(g.root(), std::move(root));
    if (g.over_budget()) return over_budget_error("tools");
    if (!g.prune_unproductive())
        return Status::error(
            "tools: no tool's parameters admit a finite JSON document (a $ref cycle with no way out)");
    return std::shared_ptr<const Grammar>(std::make_shared<Grammar>(std::move(g)));
}

}  // namespace gdn
