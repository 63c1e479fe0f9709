// Structured outputs: schema grammars accept exactly the documents their schema allows (on fixed
// documents), the trie-walk token mask equals a brute-force pass over the vocabulary on every prefix of
// valid documents (so it is never empty there), and the demo model, sampled at temperature 1 with many
// seeds under each schema of a suite, always produces JSON that parses and validates.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "engine/engine.h"
#include "server/output_parser.h"
#include "structured/grammar_cache.h"
#include "structured/json_schema.h"
#include "structured/regex_grammar.h"
#include "structured/token_mask.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

bool accepts(const Grammar& g, const std::string& text) {
    GrammarState st(&g);
    return st.advance_bytes(text) && st.can_end();
}

std::shared_ptr<const Grammar> compile(const char* schema) {
    auto g = json_schema_grammar(Json::parse(schema));
    EXPECT_TRUE(g.is_ok()) << g.message();
    return g.is_ok() ? *g : nullptr;
}

// The validator the samples are checked with: the keywords the compiler supports.
bool validates(const Json& v, const Json& s, const Json& root) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) {
        const std::string ref = s["$ref"];
        const Json* at = &root;
        size_t i = 1;
        while (i < ref.size()) {
            const size_t next = ref.find('/', i + 1);
            at = &(*at)[ref.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1)];
            i = next == std::string::npos ? ref.size() : next;
        }
        return validates(v, *at, root);
    }
    if (s.contains("enum")) {
        for (const Json& e : s["enum"])
            if (e == v) return true;
        return false;
    }
    if (s.contains("const")) return s["const"] == v;
    for (const char* k : {"anyOf", "oneOf"})
        if (s.contains(k)) {
            for (const Json& sub : s[k])
                if (validates(v, sub, root)) return true;
            return false;
        }
    if (!s.contains("type")) return true;
    std::vector<std::string> types;
    if (s["type"].is_string())
        types.push_back(s["type"]);
    else
        for (const Json& t : s["type"]) types.push_back(t);
    for (const std::string& t : types) {
        if (t == "null" && v.is_null()) return true;
        if (t == "boolean" && v.is_boolean()) return true;
        if (t == "integer" && v.is_number_integer()) return true;
        if (t == "number" && v.is_number()) return true;
        if (t == "string" && v.is_string()) {
            // Lengths in characters (code points).
            size_t n = 0;
            for (unsigned char c : v.get<std::string>()) n += (c & 0xc0) != 0x80;
            if (s.contains("minLength") && n < s["minLength"].get<size_t>()) continue;
            if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) continue;
            return true;
        }
        if (t == "array" && v.is_array()) {
            if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) continue;
            if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) continue;
            bool ok = true;
            if (s.contains("items"))
                for (const Json& x : v) ok = ok && validates(x, s["items"], root);
            if (ok) return true;
        }
        if (t == "object" && v.is_object()) {
            const Json props = s.value("properties", Json::object());
            bool ok = true;
            for (const Json& r : s.value("required", Json::array()))
                ok = ok && v.contains(r.get<std::string>());
            for (auto it = v.begin(); it != v.end(); ++it) {
                if (props.contains(it.key()))
                    ok = ok && validates(it.value(), props[it.key()], root);
                else if (!s.contains("additionalProperties") || s["additionalProperties"] == false)
                    ok = false;
                else if (s["additionalProperties"].is_object())
                    ok = ok && validates(it.value(), s["additionalProperties"], root);
            }
            if (ok) return true;
        }
    }
    return false;
}

TEST(SchemaGrammar, AcceptsExactlyWhatTheSchemaAllows) {
    auto g =
        compile(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
        "kind": {"enum": ["a", "b", 3]}, "ok": {"type": "boolean"}, "score": {"type": ["number", "null"]}},
        "required": ["name", "age"]})");
    ASSERT_TRUE(g);
    for (const char* good :
         {R"({"name": "Ann", "age": 7})", R"({"name":"Ann","age":-7,"tags":["x","yz"],"kind":3})",
          "{\n  \"name\": \"\\u00e9\\n\",\n  \"age\": 0,\n  \"ok\": false,\n  \"score\": 1.5e3\n}",
          R"({"name": "Zürich 🙂", "age": 1, "score": null})", "\n\n{\"name\":\"\",\"age\":10}\n"})
        EXPECT_TRUE(accepts(*g, good)) << good;
    for (const char* bad :
         {R"({"age": 7})", R"({"name": "Ann"})", R"({"name": "Ann", "age": 7, "extra": 1})",
          R"({"name": "Ann", "age": 7.5})", R"({"name": "Ann", "age": 007})",
          R"({"age": 7, "name": "Ann"})",  // declared order
          R"({"name": "Ann", "age": 7, "tags": ["toolong"]})",
          R"({"name": "Ann", "age": 7, "tags": ["a","b","c"]})", R"({"name": "Ann", "age": 7, "kind": "c"})",
          R"({"name": "Ann", "age": 7} x)", R"({"name": "A\q", "age": 1})",
          "{\"name\": \"a\nb\", \"age\": 1}", R"({"name": "Ann", "age": 12345678901234567})"})
        EXPECT_FALSE(accepts(*g, bad)) << bad;
}

TEST(SchemaGrammar, RefsAnyOfAndAdditionalProperties) {
    auto g = compile(R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}},
        "$ref": "#/$defs/node"})");
    ASSERT_TRUE(g);
    EXPECT_TRUE(accepts(*g, R"({"v": 1, "next": {"v": 2, "next": null}})"));
    EXPECT_FALSE(accepts(*g, R"({"v": 1, "next": {"v": 2}})"));
    auto extra = compile(
        R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}})");
    EXPECT_TRUE(accepts(*extra, R"({"a": 1, "b": true, "c": false})"));
    EXPECT_TRUE(accepts(*extra, R"({"b": true})"));
    EXPECT_FALSE(accepts(*extra, R"({"a": 1, "b": 2})"));
    auto obj = json_object_grammar();
    EXPECT_TRUE(accepts(*obj, R"({"x": [1, {"y": null}], "z": "w"})"));
    EXPECT_FALSE(accepts(*obj, "[1]"));
    auto choice = choice_grammar(Json::parse(R"(["yes", "no", "yes please"])"));
    ASSERT_TRUE(choice.is_ok());
    EXPECT_TRUE(accepts(**choice, "yes please"));
    EXPECT_FALSE(accepts(**choice, "maybe"));
}

TEST(SchemaGrammar, UnsupportedKeywordsAreErrorsNamingThePath) {
    for (const char* s :
         {R"({"type": "string", "pattern": "(a)\\1"})",
          R"({"type": "object", "properties": {"d": {"type": "string", "format": "date"}}})",
          R"({"type": "integer", "minimum": 3})", R"({"$ref": "https://x/y"})", R"({"type": "wat"})",
          R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", R"({"allOf": [{}, {}]})"}) {
        auto g = json_schema_grammar(Json::parse(s));
        ASSERT_FALSE(g.is_ok()) << s;
        EXPECT_NE(g.message().find("#"), std::string::npos) << g.message();
    }
    auto g = json_schema_grammar(
        Json::parse(R"({"type": "object", "properties": {"d": {"type": "string", "format": "date"}}})"));
    EXPECT_NE(g.message().find("#/properties/d: 'format'"), std::string::npos) << g.message();
}

// A schema that admits no finite document is an error, not a grammar that generates whitespace forever
// (issue 53, finding 3); an optional branch that could never end is dropped, so a parse never enters it.
TEST(SchemaGrammar, SchemasWithoutAFiniteDocumentAreErrors) {
    for (const char* s :
         {R"({"$ref": "#"})",
          R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})",
          R"({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})",
          R"({"type": "array", "items": {"$ref": "#"}, "minItems": 1})"}) {
        auto g = json_schema_grammar(Json::parse(s));
        ASSERT_FALSE(g.is_ok()) << s;
        EXPECT_NE(g.message().find("admits no finite JSON document"), std::string::npos) << g.message();
    }
    // "a" may be left out, and a present "a" could never end: only {} remains.
    auto g = compile(R"({"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}})");
    ASSERT_TRUE(g);
    EXPECT_TRUE(accepts(*g, "{}"));
    GrammarState st(g.get());
    EXPECT_FALSE(st.advance_bytes(R"({"a")"));
    // Recursion with a way out stays: a list of lists, ended by [].
    auto nested = compile(R"({"type": "array", "items": {"$ref": "#"}})");
    ASSERT_TRUE(nested);
    EXPECT_TRUE(accepts(*nested, "[[], [[]]]"));
}

// The server's cache of compiled grammars: one compile per key, least recently used out within the
// budget, failures never kept, and grammars that requests still hold survive eviction.
TEST(GrammarCache, KeepsWithinItsBudgetLeastRecentlyUsedOut) {
    int compiles = 0;
    auto schema_of = [&](int n) {
        return [&compiles, n]() -> GrammarCache::Compiled {
            ++compiles;
            return json_schema_grammar(Json{{"type", "string"}, {"maxLength", n}});
        };
    };
    const size_t one = (*schema_of(40)())->bytes();
    compiles = 0;
    GrammarCache cache(3 * one + 1000);  // room for about three of these grammars
    auto a = cache.get("a", schema_of(40));
    ASSERT_TRUE(a.is_ok());
    EXPECT_EQ(cache.get("a", schema_of(40))->get(), a->get());  // the same grammar, not a copy
    EXPECT_EQ(compiles, 1);
    for (const char* k : {"b", "c"}) ASSERT_TRUE(cache.get(k, schema_of(41)).is_ok());
    cache.get("a", schema_of(40));  // a is the most recent again: b goes first
    ASSERT_TRUE(cache.get("d", schema_of(42)).is_ok());
    GrammarCache::Stats s = cache.stats();
    EXPECT_LE(s.bytes, s.budget);
    EXPECT_EQ(s.evictions, 1u);
    EXPECT_EQ(s.hits, 2u);
    EXPECT_EQ(s.misses, 4u);
    EXPECT_EQ(s.in_use, 1u);  // `a` is held here
    compiles = 0;
    cache.get("a", schema_of(40));
    cache.get("b", schema_of(41));
    EXPECT_EQ(compiles, 1);  // b was evicted, a was not
    a = Status::error("released");
    EXPECT_EQ(cache.stats().in_use, 0u);
    // A failed compile is answered, not kept; a budget of 0 keeps nothing.
    auto bad = [&]() -> GrammarCache::Compiled { return json_schema_grammar(Json{{"$ref", "#"}}); };
    EXPECT_FALSE(cache.get("bad", bad).is_ok());
    EXPECT_FALSE(cache.get("bad", bad).is_ok());
    EXPECT_EQ(cache.stats().misses, 7u);  // a b c d, b again, bad twice
    GrammarCache none(0);
    none.get("a", schema_of(40));
    EXPECT_EQ(none.stats().entries, 0u);
}

TEST(RegexGrammar, MatchesLikeARegexEngine) {
    struct Case {
        const char* re;
        std::vector<const char*> yes, no;
    };
    const std::vector<Case> cases = {
        {R"(\d{3}-[a-z]{2,4})", {"123-ab", "000-abcd"}, {"12-ab", "123-a", "123-abcde", "123_ab"}},
        {"(yes|no)( please)?", {"yes", "no please"}, {"yes please please", "maybe", ""}},
        {"[^a-c]+x", {"dx", "éé\tx", "z\nzx"}, {"ax", "x", "dbx"}},
        {R"(^\w+@\w+\.(com|org)$)", {"a@b.com", "x_1@y.org"}, {"a@b.net", "@b.com"}},
        {R"(a.c\.)", {"abc.", "aéc."}, {"abc", "a\nc.", "abcx"}},
        {R"([\d\s-]*!)", {"!", "1 2-3!"}, {"a!"}},
        {R"(\S\D\W)", {"a. ", "b!?"}, {"a1 ", " a."}},
        {"x{2,}y??", {"xx", "xxxxy"}, {"x", "xxyy"}},
    };
    for (const Case& c : cases) {
        auto g = regex_grammar(c.re);
        ASSERT_TRUE(g.is_ok()) << c.re << ": " << g.message();
        for (const char* y : c.yes) EXPECT_TRUE(accepts(**g, y)) << c.re << " should match " << y;
        for (const char* n : c.no) EXPECT_FALSE(accepts(**g, n)) << c.re << " should not match " << n;
    }
    for (const char* bad :
         {"(a", "a)", "[ab", "*a", R"((a)\1)", "(?=a)b", R"(\bword)", "a^b", "a{2,1}", "a**", R"(\q)"}) {
        auto g = regex_grammar(bad);
        EXPECT_FALSE(g.is_ok()) << bad;
        if (!g.is_ok()) {
            EXPECT_NE(g.message().find("regex at"), std::string::npos) << g.message();
        }
    }
    // A schema's pattern searches the raw string characters unless anchored.
    auto p =
        compile(R"({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}\\d+$"},
        "note": {"type": "string", "pattern": "ok"}}, "required": ["id", "note"]})");
    ASSERT_TRUE(p);
    EXPECT_TRUE(accepts(*p, R"({"id": "AB12", "note": "it is ok here"})"));
    EXPECT_FALSE(accepts(*p, R"({"id": "AB12x", "note": "ok"})"));
    EXPECT_FALSE(accepts(*p, R"({"id": "AB1", "note": "nope"})"));
}

TEST(ToolCallGrammar, XmlAndHermesCallsParseIntoTypedArguments) {
    const std::vector<ToolSignature> tools = {
        {"get_weather",
         Json::parse(
             R"({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
          "unit": {"enum": ["c", "f"]}}, "required": ["city"]})")},
        {"now", nullptr}};
    auto xml = tool_call_grammar(tools, ToolCallForm::XML, true);
    ASSERT_TRUE(xml.is_ok()) << xml.message();
    const std::string call =
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew <York>\nline 2\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
    EXPECT_TRUE(accepts(**xml, call));
    EXPECT_TRUE(accepts(**xml, call + "\n<tool_call>\n<function=now>\n</function>\n</tool_call>"));
    EXPECT_FALSE(accepts(
        **xml,
        "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"));
    EXPECT_FALSE(accepts(**xml, "<tool_call>\n<function=nope>\n</function>\n</tool_call>"));
    EXPECT_FALSE(accepts(
        **xml,
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=days>\nthree\n"
        "</parameter>\n</function>\n</tool_call>"));
    auto hermes = tool_call_grammar(tools, ToolCallForm::HERMES, false);
    ASSERT_TRUE(hermes.is_ok());
    EXPECT_TRUE(accepts(**hermes,
                        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", "
                        "\"unit\": \"c\"}}\n</tool_call>"));
    EXPECT_TRUE(accepts(**hermes, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
    EXPECT_FALSE(
        accepts(**hermes, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n<tool_call>"));
}

using Docs = std::vector<std::pair<std::shared_ptr<const Grammar>, std::string>>;

// The trie walk (its loop fast paths) against the brute force: every token tried on a copy of the
// state, on every prefix of valid documents (every `every`-th one); there the mask is never empty.
// A constraint that reads the same bytes masks the same tokens (its cache of recent states included).
// *cached: how many masks the constraints answered from their caches.
void expect_walk_equals_brute_force(const VocabTrie& trie, const Docs& docs, size_t every,
                                    uint64_t* cached = nullptr) {
    for (const auto& [grammar, doc] : docs) {
        GrammarState st(grammar.get());
        TokenConstraint constraint(
            grammar, std::shared_ptr<const VocabTrie>(std::shared_ptr<const VocabTrie>{}, &trie), false);
        std::vector<float> logits(trie.vocab());
        for (size_t i = 0; i <= doc.size(); ++i) {
            if (i % every != 0 && i != doc.size()) {
                ASSERT_TRUE(st.advance(static_cast<uint8_t>(doc[i]))) << i;
                ASSERT_TRUE(constraint.advance_bytes(doc.substr(i, 1)));
                continue;
            }
            std::vector<uint64_t> fast;
            allowed_tokens(trie, st, &fast);
            std::fill(logits.begin(), logits.end(), 0.0f);
            constraint.mask(logits.data(), {});
            size_t n = 0;
            for (int32_t t = 0; t < trie.vocab(); ++t) {
                GrammarState copy = st;
                const bool brute = !trie.bytes(t).empty() && copy.advance_bytes(trie.bytes(t));
                const bool walk = (fast[t >> 6] >> (t & 63)) & 1;
                ASSERT_EQ(walk, brute) << "prefix " << i << " '" << doc.substr(0, i) << "' token " << t
                                       << " '" << trie.bytes(t) << "'";
                ASSERT_EQ(logits[t] == 0.0f, brute) << "constraint, prefix " << i << " token " << t;
                n += walk;
            }
            if (i < doc.size()) {
                EXPECT_GT(n, 0u) << "empty mask after " << i << " bytes";
                ASSERT_TRUE(st.advance(static_cast<uint8_t>(doc[i]))) << i;
                ASSERT_TRUE(constraint.advance_bytes(doc.substr(i, 1)));
            }
        }
        EXPECT_TRUE(st.can_end());
        if (cached) *cached += constraint.cached_masks();
    }
}

#ifdef __SANITIZE_ADDRESS__
constexpr size_t kEveryPrefix = 3;  // the sanitizer run checks every third prefix (the Release run all)
#else
constexpr size_t kEveryPrefix = 1;
#endif

std::shared_ptr<const Grammar> xml_write_tool() {
    auto xml = tool_call_grammar(
        {{"write", Json::parse(R"({"type": "object", "properties": {"path": {"type": "string"},
        "n": {"type": "integer"}}, "required": ["path"]})")}},
        ToolCallForm::XML, true);
    EXPECT_TRUE(xml.is_ok());
    return xml.is_ok() ? *xml : nullptr;
}

}  // namespace

TEST(TokenMask, TrieWalkEqualsBruteForceOnEveryPrefix) {
    auto tok = Tokenizer::load(demo_model_dir());
    ASSERT_TRUE(tok.is_ok());
    const VocabTrie trie(**tok, (*tok)->vocab_size());
    auto g =
        compile(R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"},
        "xs": {"type": "array", "items": {"type": "number"}}}, "required": ["name"]})");
    // A string that is also something else (both fast-path checks: the loop's tokens, a changing state).
    auto mixed =
        compile(R"({"anyOf": [{"type": "string"}, {"type": "string", "maxLength": 2}, {"const": "ab c"}]})");
    uint64_t cached = 0;
    expect_walk_equals_brute_force(
        trie,
        {
            {g, "{\"name\": \"The cat's \\\"mat\\\" é 🙂\", \"n\": -12, \"xs\": [1.5, 2e3]}"},
            {g, "{\n  \"name\": \"a b c d e f\"\n}"},
            {mixed, "\"ab cd\""},
            {xml_write_tool(),
             "<tool_call>\n<function=write>\n<parameter=path>\n/tmp/a <b>\n\nc "
             "é\n</parameter>\n<parameter=n>\n3\n"
             "</parameter>\n</function>\n</tool_call>"},
        },
        kEveryPrefix, &cached);
    EXPECT_GT(cached, 0u)
        << "a string's loop state comes back after its characters: its mask should come from the cache";
}

// A vocabulary made to sit on the fast paths' edges: characters of 2, 3 and 4 bytes before a quote, a
// backslash or a control byte, started and broken characters, lone continuation and invalid bytes,
// newlines followed by text or by '<' (the XML loop left and re-entered inside one token), and the
// demo tokens joined in pairs (as a large vocabulary's merges are).
TEST(TokenMask, TrieWalkEqualsBruteForceOnAnEdgeVocabulary) {
    auto tok = Tokenizer::load(demo_model_dir());
    ASSERT_TRUE(tok.is_ok());
    const VocabTrie demo(**tok, (*tok)->vocab_size());
    std::vector<std::string> bytes;
    for (int32_t id = 0; id < demo.vocab(); ++id) bytes.push_back(demo.bytes(id));
    const std::vector<std::string> chars = {"é",    "€",    "🙂",    "\xc3", "\xe2\x82", "\xf0\x9f\x99",
                                            "\x80", "\xff", "\xc0\xaf"};
    const std::vector<std::string> after = {"",  "\"",   "\\",  "\\n", "\n",  "\t",   "a",
                                            "é", "\", ", "\"}", "\n<", "\nx", "\n\n", "<"};
    for (const auto& c : chars)
        for (const auto& a : after) {
            bytes.push_back(c + a);
            bytes.push_back("ab" + c + a);
            bytes.push_back(a + c);
        }
    for (const char* t :
         {"\nimport", "\n</parameter>", "\n</", "x\ny\nz", "\n<b>\n", "é\né", "\"\n", "\\\"abc", "\\nabc",
          "\\u00e9xyz", "é\\\"ab", "x\\\\y\\\"z", "\\q", "é\\q\"", "a\\q\"", "\\q\""})
        bytes.push_back(t);
    uint32_t seed = 7;
    for (int k = 0; k < 3000; ++k) {
        seed = seed * 1664525u + 1013904223u;
        const std::string& x = demo.bytes(static_cast<int32_t>((seed >> 8) % demo.vocab()));
        seed = seed * 1664525u + 1013904223u;
        bytes.push_back(x + demo.bytes(static_cast<int32_t>((seed >> 8) % demo.vocab())));
    }
    const VocabTrie trie(std::move(bytes));
    auto g =
        compile(R"({"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array",
        "items": {"type": "string"}}}, "required": ["name"]})");
    // A second parse that takes printable ASCII but no other character: the loop's plain bytes keep
    // the state, complete characters do not (the walk's frontier does not apply).
    auto ascii = compile(R"({"anyOf": [{"type": "string"}, {"type": "string", "pattern": "^[ -~]*$"}]})");
    // A handmade one: beside the JSON string loop, a parse that keeps over every plain ASCII byte and
    // reads "\q" where a JSON string cannot; a character ends it.
    auto loop_and_more = std::make_shared<Grammar>();
    {
        Grammar& h = *loop_and_more;
        ByteClass plain, cont;
        plain.add_range(0x20, 0x7f);
        plain.bits[0] &= ~(uint64_t{1} << '"');
        plain.bits[1] &= ~(uint64_t{1} << ('\\' - 64));
        cont.add_range(0x80, 0xbf);
        ByteClass lead2, lead3, lead4;
        lead2.add_range(0xc2, 0xdf);
        lead3.add_range(0xe0, 0xef);
        lead4.add_range(0xf0, 0xf4);
        const int32_t esc = h.new_rule("esc"), chr = h.new_rule("char"), body = h.new_rule("body"),
                      other = h.new_rule("other");
        h.add_alt(esc, {Grammar::cls(ByteClass::of('n'))});
        h.add_alt(esc, {Grammar::cls(ByteClass::of('"'))});
        h.add_alt(chr, {Grammar::cls(plain)});
        h.add_alt(chr, {Grammar::cls(lead2), Grammar::cls(cont)});
        h.add_alt(chr, {Grammar::cls(lead3), Grammar::cls(cont), Grammar::cls(cont)});
        h.add_alt(chr, {Grammar::cls(lead4), Grammar::cls(cont), Grammar::cls(cont), Grammar::cls(cont)});
        h.add_alt(chr, {Grammar::cls(ByteClass::of('\\')), Grammar::ref(esc)});
        h.add_alt(body, {Grammar::ref(chr), Grammar::ref(body)});
        h.add_alt(body, Grammar::literal("\""));
        h.add_alt(other, {Grammar::cls(plain), Grammar::ref(other)});
        h.add_alt(other, Grammar::literal("\\q\""));
        h.set_string_rules(body, chr);
        h.add_alt(h.root(), {Grammar::cls(ByteClass::of('"')), Grammar::ref(body)});
        h.add_alt(h.root(), {Grammar::cls(ByteClass::of('"')), Grammar::ref(other)});
    }
    expect_walk_equals_brute_force(
        trie,
        {
            {loop_and_more, "\"ab\\q\""},
            {loop_and_more, "\"ab é\\n\""},
            {g, "{\"name\": \"é€🙂 x\\\"y\\n\", \"tags\": [\"a\", \"🙂\"]}"},
            {ascii, "\"ab c\""},
            {ascii, "\"ab é\""},
            {xml_write_tool(),
             "<tool_call>\n<function=write>\n<parameter=path>\nx\ny é "
             "<b\n\nz\n</parameter>\n</function>\n</tool_call>"},
        },
        kEveryPrefix);
}

namespace {

// The demo model under each schema of a suite, temperature 1, many seeds: every answer parses and
// validates, and the engine met no dead end.
TEST(StructuredSampling, EverySampleValidates) {
    OneThread one;
    auto m = Model::load(ExecContext::process(), demo_model_dir());
    ASSERT_TRUE(m.is_ok());
    auto tok = Tokenizer::load(demo_model_dir());
    ASSERT_TRUE(tok.is_ok());
    EngineConfig ec;
    ec.max_model_len = 1024;
    ec.max_num_seqs = 16;
    ec.cache_memory = 128ull << 20;
    auto e = Engine::create(std::shared_ptr<const Model>(std::move(*m)), *tok, ec);
    ASSERT_TRUE(e.is_ok()) << e.message();
    const std::vector<const char*> schemas = {
        R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{2,4}$"}}, "required": ["code"]})",
        R"({"type": "object", "properties": {"fortune": {"type": "string", "maxLength": 24}, "lucky": {"type": "integer"}},
            "required": ["fortune", "lucky"]})",
        R"({"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 4})",
        R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "score": {"type": ["number", "null"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}}, "required": ["ok"]})",
        R"({"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"a": {"const": "x"}}, "required": ["a"]}]})",
        // A local $ref (not recursive: a recursive schema lets a model nest until max_tokens, in any engine).
        R"({"$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"]}}, "type": "object", "properties": {"from": {"$ref": "#/$defs/p"}, "to": {"$ref": "#/$defs/p"}},
            "required": ["from", "to"]})",
    };
#ifdef __SANITIZE_ADDRESS__
    const int seeds = 2;
#else
    const int seeds = 8;
#endif
    std::map<int64_t, std::pair<size_t, std::string>> texts;  // request -> (schema, text)
    std::map<int64_t, FinishReason> finish;
    for (size_t si = 0; si < schemas.size(); ++si) {
        auto g = json_schema_grammar(Json::parse(schemas[si]));
        ASSERT_TRUE(g.is_ok()) << g.message();
        for (int seed = 0; seed < seeds; ++seed) {
            SamplingParams p;
            p.temperature = 1.0f;
            p.seed = 1000 + seed;
            p.max_tokens = 400;
            p.grammar = *g;
            auto id = (*e)->add_request(Prompt::from_text("Tell me a fortune as JSON: "), p);
            ASSERT_TRUE(id.is_ok()) << id.message();
            texts[*id] = {si, ""};
        }
    }
    while ((*e)->has_unfinished())
        for (const RequestOutput& o : (*e)->step()) {
            texts[o.id].second += o.text_delta;
            if (o.finish != FinishReason::NONE) finish[o.id] = o.finish;
        }
    for (const auto& [id, st] : texts) {
        const auto& [si, text] = st;
        EXPECT_EQ(finish[id], FinishReason::STOP) << schemas[si] << "\n" << text;
        auto j = parse_json(text, "sample");
        ASSERT_TRUE(j.is_ok()) << schemas[si] << "\n" << text << "\n" << j.message();
        const Json schema = Json::parse(schemas[si]);
        EXPECT_TRUE(validates(*j, schema, schema)) << schemas[si] << "\n" << text;
    }
    EXPECT_EQ((*e)->stats().grammar_dead_ends, 0);
    EXPECT_GT((*e)->stats().grammar_masks, 0);
}

// Raw-text regexes on the demo model: every sample matches (checked with std::regex).
TEST(StructuredSampling, RegexSamplesMatch) {
    OneThread one;
    auto m = Model::load(ExecContext::process(), demo_model_dir());
    auto tok = Tokenizer::load(demo_model_dir());
    ASSERT_TRUE(m.is_ok() && tok.is_ok());
    EngineConfig ec;
    ec.max_model_len = 512;
    ec.cache_memory = 64ull << 20;
    auto e = Engine::create(std::shared_ptr<const Model>(std::move(*m)), *tok, ec);
    ASSERT_TRUE(e.is_ok());
    const std::vector<std::string> res = {R"(\d{3}-[a-z]{2,4})", "(yes|no|maybe)!?",
                                          R"([A-Z][a-z]+( [a-z]+){0,3}\.)"};
    std::map<int64_t, std::pair<size_t, std::string>> out;
    for (size_t i = 0; i < res.size(); ++i)
        for (int seed = 0; seed < 4; ++seed) {
            SamplingParams p;
            p.temperature = 1.0f;
            p.seed = seed;
            p.max_tokens = 64;
            p.grammar = *regex_grammar(res[i]);
            out[*(*e)->add_request(Prompt::from_text("The answer: "), p)] = {i, ""};
        }
    while ((*e)->has_unfinished())
        for (const RequestOutput& o : (*e)->step()) out[o.id].second += o.text_delta;
    for (const auto& [id, v] : out)
        EXPECT_TRUE(std::regex_match(v.second, std::regex(res[v.first]))) << res[v.first] << ": " << v.second;
}

}  // namespace
