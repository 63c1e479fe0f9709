// The chat output parser against fixed model outputs of both tool-call forms (Qwen3.5's XML, Hermes
// JSON), with reasoning, and the streaming contract: the deltas of any split of the text add up to the
// one-shot answer.
#include <gtest/gtest.h>

#include <random>

#include "server/output_parser.h"
#include "server/tool_schema.h"

namespace gdn {
namespace {

ToolSet weather_tools() {
    auto set = ToolSet::from_request(Json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
        "hours": {"type": "array", "items": {"type": "integer"}}, "where": {"type": "object"},
        "scale": {"type": "number"}, "note": {"type": ["string", "null"]}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "now", "description": "the time"}}])"));
    EXPECT_TRUE(set.is_ok()) << set.message();
    return std::move(*set);
}

struct Case {
    const char* name;
    std::string text;
    bool reasoning, starts_in_reasoning, tools;
};

ParsedOutput parse_once(const std::string& text, const OutputParserOptions& o) {
    OutputParser p(o);
    ParsedOutput out;
    out.add(p.feed(text));
    out.add(p.finish());
    return out;
}

ParsedOutput parse_pieces(const std::vector<std::string>& pieces, const OutputParserOptions& o) {
    OutputParser p(o);
    ParsedOutput out;
    for (const auto& s : pieces) out.add(p.feed(s));
    out.add(p.finish());
    return out;
}

void expect_same(const ParsedOutput& a, const ParsedOutput& b, const std::string& where) {
    EXPECT_EQ(a.reasoning, b.reasoning) << where;
    EXPECT_EQ(a.content, b.content) << where;
    ASSERT_EQ(a.calls.size(), b.calls.size()) << where;
    for (size_t i = 0; i < a.calls.size(); ++i) {
        EXPECT_EQ(a.calls[i].id, b.calls[i].id) << where;
        EXPECT_EQ(a.calls[i].name, b.calls[i].name) << where;
        EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << where;
    }
}

class OutputParserTest : public ::testing::Test {
  protected:
    ToolSet tools = weather_tools();
    OutputParserOptions opts(bool reasoning, bool starts, bool with_tools) {
        OutputParserOptions o;
        o.reasoning = reasoning;
        o.starts_in_reasoning = starts;
        o.tools = with_tools ? &tools : nullptr;
        o.id_prefix = "call_";
        return o;
    }
};

TEST_F(OutputParserTest, XmlCallsAreTypedByTheSchema) {
    const std::string text =
        "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n<parameter=hours>\n[1, "
        "2]\n</parameter>\n"
        "<parameter=where>\n{\"lat\": 1.5}\n</parameter>\n<parameter=scale>\n2.50\n</parameter>\n"
        "<parameter=note>\nline one\nline two\n</parameter>\n</function>\n</tool_call>";
    const ParsedOutput out = parse_once(text, opts(false, false, true));
    EXPECT_EQ(out.content, "Let me check.");
    ASSERT_EQ(out.calls.size(), 1u);
    EXPECT_EQ(out.calls[0].id, "call_0");
    EXPECT_EQ(out.calls[0].name, "get_weather");
    EXPECT_EQ(out.calls[0].arguments,
              R"({"city":"New York","days":3,"metric":true,"hours":[1,2],"where":{"lat":1.5},"scale":2.5,)"
              R"("note":"line one\nline two"})");
    EXPECT_TRUE(Json::parse(out.calls[0].arguments).is_object());
}

TEST_F(OutputParserTest, ValuesThatDoNotFitTheirTypeStayStrings) {
    const std::string text =
        "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n<parameter=days>\nthree\n</"
        "parameter>\n"
        "<parameter=metric>\nFalse\n</parameter>\n<parameter=other>\n{\"a\": "
        "1}\n</parameter>\n</function>\n</tool_call>";
    const ParsedOutput out = parse_once(text, opts(false, false, true));
    ASSERT_EQ(out.calls.size(), 1u);
    EXPECT_EQ(out.calls[0].arguments, R"({"city":"42","days":"three","metric":false,"other":{"a":1}})");
}

TEST_F(OutputParserTest, SeveralCallsBothFormsAndNoParameters) {
    const std::string text =
        "<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
        "\"arguments\": "
        "{\"city\": \"Oslo\", \"days\": "
        "2}}\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n"
        "</parameter>\n</function>\n</tool_call>\n";
    const ParsedOutput out = parse_once(text, opts(false, false, true));
    EXPECT_EQ(out.content, "");
    ASSERT_EQ(out.calls.size(), 3u);
    EXPECT_EQ(out.calls[0].name, "now");
    EXPECT_EQ(out.calls[0].arguments, "{}");
    EXPECT_EQ(out.calls[1].name, "get_weather");
    EXPECT_EQ(out.calls[1].arguments, R"({"city":"Oslo","days":2})");
    EXPECT_EQ(out.calls[2].arguments, R"({"city":"Rome"})");
    EXPECT_EQ(out.calls[2].id, "call_2");
}

TEST_F(OutputParserTest, ReasoningSplitsFromTheAnswer) {
    // The prompt opened <think> (Qwen3.5's generation prompt).
    ParsedOutput a = parse_once("The user greets.\n</think>\n\nHello!", opts(true, true, false));
    EXPECT_EQ(a.reasoning, "The user greets.");
    EXPECT_EQ(a.content, "Hello!");
    // The model opens it (Qwen3).
    ParsedOutput b = parse_once("<think>\nHmm.\n</think>\n\nHi.", opts(true, false, false));
    EXPECT_EQ(b.reasoning, "Hmm.");
    EXPECT_EQ(b.content, "Hi.");
    // No think block at all: the whole answer is content.
    ParsedOutput c = parse_once("Just an answer.", opts(true, false, false));
    EXPECT_EQ(c.reasoning, "");
    EXPECT_EQ(c.content, "Just an answer.");
    // Cut off while thinking: everything is reasoning.
    ParsedOutput d = parse_once("Still thinking about", opts(true, true, false));
    EXPECT_EQ(d.reasoning, "Still thinking about");
    EXPECT_EQ(d.content, "");
    // Without the reasoning parser the tags stay in the content.
    ParsedOutput e = parse_once("<think>\nx\n</think>\n\ny", opts(false, false, false));
    EXPECT_EQ(e.content, "<think>\nx\n</think>\n\ny");
}

TEST_F(OutputParserTest, CallInsideAnUnclosedThinkIsKept) {
    const std::string text =
        "I should look it "
        "up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
        "</tool_call>";
    const ParsedOutput out = parse_once(text, opts(true, true, true));
    EXPECT_EQ(out.reasoning, "I should look it up.");
    ASSERT_EQ(out.calls.size(), 1u);
    EXPECT_EQ(out.calls[0].arguments, R"({"city":"Paris"})");
    OutputParser p(opts(true, true, true));
    p.feed(text);
    p.finish();
    EXPECT_EQ(p.complete_calls(), 1);
}

TEST_F(OutputParserTest, TruncatedCallKeepsWhatItHad) {
    const std::string text =
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nBerlin\n</parameter>\n<parameter=days>\n1";
    OutputParser p(opts(false, false, true));
    ParsedOutput out;
    out.add(p.feed(text));
    out.add(p.finish());
    ASSERT_EQ(out.calls.size(), 1u);
    EXPECT_EQ(out.calls[0].name, "get_weather");
    // Unclosed, as OpenAI returns a cut-off call; the parameter being written keeps its value so far.
    EXPECT_EQ(out.calls[0].arguments, R"({"city":"Berlin","days":1)");
    EXPECT_EQ(p.complete_calls(), 0);
    EXPECT_EQ(p.started_calls(), 1);
}

// Issue 53, finding 6: max_tokens cutting a call keeps the argument text generated, in both forms.
TEST_F(OutputParserTest, TruncatedCallsKeepTheirArgumentText) {
    struct Case {
        std::string text, arguments;
    };
    const Case cases[] = {
        {"<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", R"({"city":"Par)"},
        {"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</param", R"({"city":"Paris)"},
        {"<tool_call>\n<function=get_weather>\n<parameter=city>\n", R"({"city":")"},
        {"<tool_call>\n<function=get_weather>\n<parameter=ci", ""},
        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"",
         R"({"city": "Paris")"},
        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_",
         R"({"city":"Oslo"})"},
    };
    for (const Case& c : cases) {
        const ParsedOutput out = parse_once(c.text, opts(false, false, true));
        ASSERT_EQ(out.calls.size(), 1u) << c.text;
        EXPECT_EQ(out.calls[0].name, "get_weather") << c.text;
        EXPECT_EQ(out.calls[0].arguments, c.arguments) << c.text;
        EXPECT_EQ(out.content, "") << c.text;
    }
}

TEST_F(OutputParserTest, MalformedCallsDegradeToContent) {
    for (const std::string& text :
         {std::string("<tool_call>\nnot a call</tool_call> after"),
          std::string("<tool_call>\n{\"name\": 3}\n</tool_call>"),
          std::string("<tool_call>\n{\"name\": \"now\", \"arguments\": [1]}\n</tool_call>"),
          std::string("<tool_call>\n{\"name\": \"now\", \"argu"),
          std::string("a <tool_call>\n<function=bad\nname>\n</function></tool_call>"),
          std::string("text <tool_ca")}) {
        const ParsedOutput out = parse_once(text, opts(false, false, true));
        EXPECT_TRUE(out.calls.empty()) << text;
        EXPECT_EQ(out.content, text) << text;  // nothing lost
    }
}

TEST_F(OutputParserTest, HermesArgumentsAsAString) {
    const ParsedOutput out = parse_once(
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
        "\\\"Lima\\\"}\"}\n</tool_call>",
        opts(false, false, true));
    ASSERT_EQ(out.calls.size(), 1u);
    EXPECT_EQ(out.calls[0].arguments, R"({"city":"Lima"})");
}

TEST_F(OutputParserTest, TextAfterCallsIsContent) {
    const ParsedOutput out =
        parse_once("<tool_call>\n<function=now>\n</function>\n</tool_call>\nDone.", opts(false, false, true));
    ASSERT_EQ(out.calls.size(), 1u);
    EXPECT_EQ(out.content, "Done.");
}

TEST_F(OutputParserTest, WithoutToolsCallsAreText) {
    const std::string text = "<tool_call>\n<function=now>\n</function>\n</tool_call>";
    const ParsedOutput out = parse_once(text, opts(true, false, false));
    EXPECT_TRUE(out.calls.empty());
    EXPECT_EQ(out.content, text);
}

// The streaming contract, for every fixed output: every two-piece split, one byte at a time, and
// random splits add up to the one-shot answer (ids, names, argument text, reasoning, content).
TEST_F(OutputParserTest, DeltasAddUpToTheAnswerAtEverySplit) {
    const std::vector<Case> cases = {
        {"xml",
         "Checking.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork\n</parameter>\n"
         "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=now>\n</"
         "function>\n"
         "</tool_call>",
         false, false, true},
        {"hermes",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>", false,
         false, true},
        {"think_then_call",
         "Let me see.\n</think>\n\nSure.\n<tool_call>\n<function=now>\n</function>\n</tool_call>", true, true,
         true},
        {"call_in_think",
         "Hmm "
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n</function>\n</tool_call>",
         true, true, true},
        {"model_opens_think", "<think>\nA\n\n</think>\n\n\nB <tool_c", true, false, true},
        {"truncated", "<tool_call>\n<function=get_weather>\n<parameter=city>\nBer", false, false, true},
        {"truncated_hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Be", false,
         false, true},
        {"malformed", "x <tool_call>\n{\"name\": 1}\n</tool_call> y <tool_call>\nzz", false, false, true},
        {"plain", "no tools here <tool_call> at all\n\n", true, false, false},
        {"unicode",
         "Ça va?\n</think>\n\nOui 🙂 "
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nZürich\n</parameter>\n"
         "</function>\n</tool_call>",
         true, true, true},
    };
    std::mt19937 rng(7);
    for (const Case& c : cases) {
        const OutputParserOptions o = opts(c.reasoning, c.starts_in_reasoning, c.tools);
        const ParsedOutput whole = parse_once(c.text, o);
        for (size_t cut = 0; cut <= c.text.size(); ++cut)
            expect_same(parse_pieces({c.text.substr(0, cut), c.text.substr(cut)}, o), whole,
                        std::string(c.name) + " cut at " + std::to_string(cut));
        std::vector<std::string> bytes;
        for (char ch : c.text) bytes.emplace_back(1, ch);
        expect_same(parse_pieces(bytes, o), whole, std::string(c.name) + " byte by byte");
        for (int trial = 0; trial < 20; ++trial) {
            std::vector<std::string> pieces;
            size_t at = 0;
            while (at < c.text.size()) {
                const size_t n = std::uniform_int_distribution<size_t>(0, 12)(rng);
                pieces.push_back(c.text.substr(at, n));
                at += n;
            }
            expect_same(parse_pieces(pieces, o), whole, std::string(c.name) + " random split");
        }
    }
}

TEST(ToolSet, RequestErrorsNameTheField) {
    auto bad = [](const char* json) {
        auto r = ToolSet::from_request(Json::parse(json));
        EXPECT_FALSE(r.is_ok()) << json;
        return r.is_ok() ? std::string() : r.message();
    };
    EXPECT_NE(bad(R"({"a": 1})").find("'tools' must be a list"), std::string::npos);
    EXPECT_NE(bad(R"([{"type": "code"}])").find("tools[0].type"), std::string::npos);
    EXPECT_NE(bad(R"([{"type": "function", "function": {"name": ""}}])").find("tools[0].function.name"),
              std::string::npos);
    EXPECT_NE(
        bad(R"([{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}])")
            .find("given twice"),
        std::string::npos);
    EXPECT_NE(bad(R"([{"type": "function", "function": {"name": "a", "parameters": [1]}}])")
                  .find("tools[0].function.parameters"),
              std::string::npos);
    EXPECT_NE(bad(R"([{"type": "function", "function": {"name": "a<b"}}])").find("must not contain"),
              std::string::npos);
}

TEST(ParserChoice, FromTheTemplateOrTheFlags) {
    auto c = choose_parsers("{{ '<think>' }} <tool_call>\n<function=", "auto", "auto");
    ASSERT_TRUE(c.is_ok());
    EXPECT_EQ(c->reasoning, "qwen3");
    EXPECT_EQ(c->tool_calls, "qwen3_coder");
    c = choose_parsers("<tool_call>\n{\"name\": ...}", "auto", "auto");
    EXPECT_EQ(c->reasoning, "none");
    EXPECT_EQ(c->tool_calls, "hermes");
    c = choose_parsers("<think> <function=", "none", "none");
    EXPECT_FALSE(c->reasoning_on());
    EXPECT_FALSE(c->tool_calls_on());
    EXPECT_FALSE(choose_parsers("", "deepseek", "auto").is_ok());
    EXPECT_FALSE(choose_parsers("", "auto", "mistral").is_ok());
}

}  // namespace
}  // namespace gdn
