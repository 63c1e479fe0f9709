// Chat templates rendered by our Jinja interpreter are byte-identical to @huggingface/jinja rendering the
// same templates (fixtures in tests/data/chat_templates/expected.json, made by scripts/gen-fixtures).
#include <gtest/gtest.h>

#include "test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja.h"

using namespace gdn;
using namespace gdn::test;

namespace {

std::string templates_dir() {
    return source_dir() + "/tests/data/chat_templates";
}

TEST(ChatTemplate, MatchesReferenceRenderer) {
    auto cases = read_json_file(templates_dir() + "/expected.json");
    ASSERT_TRUE(cases.is_ok()) << cases.message();
    ASSERT_GE(cases->size(), 100u);
    std::map<std::string, jinja::Template> parsed;
    for (const Json& c : *cases) {
        const std::string name = c["template"].get<std::string>();
        if (!parsed.count(name)) {
            auto t = jinja::Template::parse(read_bytes(templates_dir() + "/" + name + ".jinja"));
            ASSERT_TRUE(t.is_ok()) << name << ": " << t.message();
            parsed.emplace(name, *t);
        }
        jinja::Value ctx{jinja::Object{}};
        ctx.set("messages", jinja::Value::from_json(c["messages"]));
        ctx.set("add_generation_prompt", jinja::Value(c["add_generation_prompt"].get<bool>()));
        ctx.set("bos_token", jinja::Value(""));
        ctx.set("eos_token", jinja::Value("<|im_end|>"));
        if (!c["enable_thinking"].is_null())
            ctx.set("enable_thinking", jinja::Value(c["enable_thinking"].get<bool>()));
        auto out = parsed.at(name).render(ctx);
        ASSERT_TRUE(out.is_ok()) << name << " " << c["conversation"] << ": " << out.message();
        EXPECT_EQ(*out, c["expected"].get<std::string>())
            << name << " / " << c["conversation"] << " / gen=" << c["add_generation_prompt"]
            << " / thinking=" << c["enable_thinking"];
    }
}

// Tool-bearing conversations as an OpenAI client sends them (arguments as JSON strings, content null),
// through ChatTemplate::render, against @huggingface/jinja on the normalised messages
// (scripts/oracle/gen_tool_fixtures.mjs): Hermes (qwen3) and XML (qwen3_5_style) forms, several calls,
// tool results, reasoning kept after the last user turn and dropped before it, thinking on and off.
TEST(ChatTemplate, ToolConversationsMatchTheReferenceRenderer) {
    auto cases = read_json_file(templates_dir() + "/expected_tools.json");
    ASSERT_TRUE(cases.is_ok()) << cases.message();
    ASSERT_GE(cases->size(), 60u);
    std::map<std::string, std::shared_ptr<const ChatTemplate>> parsed;
    for (const Json& c : *cases) {
        const std::string name = c["template"].get<std::string>();
        if (!parsed.count(name)) {
            auto t = ChatTemplate::from_source(read_bytes(templates_dir() + "/" + name + ".jinja"), "",
                                               "<|im_end|>");
            ASSERT_TRUE(t.is_ok()) << name << ": " << t.message();
            EXPECT_TRUE((*t)->renders_tools());
            parsed.emplace(name, *t);
        }
        ChatRequest req;
        req.messages = c["messages"];
        req.tools = c["tools"];
        req.add_generation_prompt = c["add_generation_prompt"].get<bool>();
        if (!c["enable_thinking"].is_null()) req.enable_thinking = c["enable_thinking"].get<bool>();
        auto out = parsed.at(name)->render(req);
        ASSERT_TRUE(out.is_ok()) << name << " " << c["conversation"] << ": " << out.message();
        EXPECT_EQ(*out, c["expected"].get<std::string>())
            << name << " / " << c["conversation"] << " / gen=" << c["add_generation_prompt"]
            << " / thinking=" << c["enable_thinking"];
    }
}

TEST(ChatTemplate, ToolCallArgumentsMustBeAnObject) {
    auto ct =
        ChatTemplate::from_source(read_bytes(templates_dir() + "/qwen3_5_style.jinja"), "", "<|im_end|>");
    ASSERT_TRUE(ct.is_ok());
    ChatRequest req;
    for (const char* args : {R"("{not json")", R"("[1, 2]")", "7"}) {
        req.messages = Json::parse(
            std::string(R"([{"role":"user","content":"x"},{"role":"assistant","content":null,)"
                        R"("tool_calls":[{"type":"function","function":{"name":"f","arguments":)") +
            args + "}}]}]");
        auto out = (*ct)->render(req);
        ASSERT_FALSE(out.is_ok()) << args;
        EXPECT_NE(out.message().find("messages[1].tool_calls[0].function.arguments"), std::string::npos)
            << out.message();
    }
}

TEST(ChatTemplate, CheckpointTemplateThroughTheTokenizer) {
    auto tok = Tokenizer::load(demo_model_dir());
    ASSERT_TRUE(tok.is_ok()) << tok.message();
    auto ct = ChatTemplate::create(**tok);
    ASSERT_TRUE(ct.is_ok()) << ct.message();
    ChatRequest req;
    req.messages = Json::parse(R"([{"role":"user","content":"Tell me a fortune."}])");
    EXPECT_EQ(*(*ct)->render(req), "<|im_start|>user\nTell me a fortune.<|im_end|>\n<|im_start|>assistant\n");
    req.enable_thinking = false;
    EXPECT_EQ(
        *(*ct)->render(req),
        "<|im_start|>user\nTell me a fortune.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    // The demo model's reference prompt ids (models/demo/reference_logits.json).
    req.enable_thinking.reset();
    EXPECT_EQ((*tok)->encode(*(*ct)->render(req)),
              (std::vector<int32_t>{4097, 356, 198, 736, 384, 258, 755, 13, 4098, 198, 4097, 363, 198}));
}

TEST(ChatTemplate, BadMessagesAreClearErrors) {
    auto tok = Tokenizer::load(demo_model_dir());
    auto ct = ChatTemplate::create(**tok);
    ChatRequest req;
    req.messages = Json::parse(R"([{"content":"x"}])");
    EXPECT_NE((*ct)->render(req).message().find("messages[0].role must be a string"), std::string::npos);
    req.messages = Json::parse(R"([{"role":"wizard","content":"x"}])");
    EXPECT_NE((*ct)->render(req).message().find("'wizard'"), std::string::npos);
    req.messages = Json::array();
    EXPECT_NE((*ct)->render(req).message().find("must not be empty"), std::string::npos);
}

TEST(Jinja, ExpressionsAndStatements) {
    auto render = [](const std::string& src, const Json& vars = Json::object()) {
        auto t = jinja::Template::parse(src);
        EXPECT_TRUE(t.is_ok()) << t.message();
        auto r = t->render(jinja::Value::from_json(vars));
        return r.is_ok() ? *r : "ERROR: " + r.message();
    };
    EXPECT_EQ(render("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 % 3 }}|{{ 'a' ~ 1 }}"), "7|3|2|a1");
    EXPECT_EQ(render("{{ 'abc'[::-1] }}{{ [1,2,3][-1] }}{{ 'a,b,,c'.split(',')|length }}"), "cba34");
    EXPECT_EQ(
        render(
            "{% for x in xs if x > 1 %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
            {{"xs", {1, 2, 3}}}),
        "12,23");
    EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor "
                     "%}{{ ns.n }}"),
              "6");
    EXPECT_EQ(render("{% macro m(a, b='d') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b='x') }}"),
              "[1d][2x]");
    EXPECT_EQ(render("{{ x is defined }} {{ y is none }} {{ 'q' in 'xqz' }} {{ d|tojson }}",
                     {{"y", nullptr}, {"d", {{"k", {1, "v"}}}}}),
              "false true true {\"k\": [1, \"v\"]}");
    EXPECT_EQ(render("  {%- if true -%}  a  {%- endif %}  b"), "a  b");
    EXPECT_NE(render("{{ raise_exception('boom') }}").find("boom"), std::string::npos);
    EXPECT_FALSE(jinja::Template::parse("{% if x %}never closed").is_ok());
    EXPECT_FALSE(jinja::Template::parse("{{ 'unterminated }}").is_ok());
}

}  // namespace

namespace {
std::string render_error(const std::string& src) {
    auto t = gdn::jinja::Template::parse(src);
    if (!t) return t.message();
    auto r = t->render(gdn::jinja::Value::from_json(gdn::Json::object()));
    return r ? "" : r.message();
}
}  // namespace

// Templates found by fuzzing the renderer: each is an error, not a stack overflow, a wrap-around or an
// exhausted machine.
TEST(Jinja, HostileTemplatesAreErrors) {
    auto has = [](const std::string& msg, const std::string& needle) {
        EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    };
    has(render_error("{{ " + std::string(50000, '(') + "1" + std::string(50000, ')') + " }}"),
        "nested more than");
    has(render_error("{{ " + std::string(50000, '[') + std::string(50000, ']') + " }}"), "nested more than");
    has(render_error("{{ " + std::string(50000, '-') + "1 }}"), "nested more than");
    std::string blocks;
    for (int i = 0; i < 20000; ++i) blocks += "{% if 1 %}";
    has(render_error(blocks + "x"), "nested more than");
    has(render_error("{% for i in range(100000000) %}x{% endfor %}"), "range() of more than");
    has(render_error("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(2) %}{% endfor "
                     "%}{% endfor %}{% endfor %}"),
        "loop iterations");
    has(render_error("{{ 9223372036854775807 + 1 }}"), "integer overflow");
    has(render_error("{{ -9223372036854775807 - 1 - 1 }}"), "integer overflow");
    has(render_error("{{ 99999999999999999999999 }}"), "number out of range");
    has(render_error("{{ 'ab' * 100000000000 }}"), "repeated string");
    // range() near the int64 ends and a float far out of int range do not wrap.
    auto t = gdn::jinja::Template::parse(
        "{% for i in range(9223372036854775805, 9223372036854775807) %}{{ i }},{% endfor %}");
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(*t->render(gdn::jinja::Value::from_json(gdn::Json::object())),
              "9223372036854775805,9223372036854775806,");
    // A long run of spaces before a block (std::regex recursed per space here).
    auto sp = gdn::jinja::Template::parse(std::string(300000, ' ') + "{% if 1 %}x{% endif %}");
    ASSERT_TRUE(sp.is_ok()) << sp.message();
    EXPECT_EQ(*sp->render(gdn::jinja::Value::from_json(gdn::Json::object())), "x");
}
