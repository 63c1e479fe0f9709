// The agent-facing request surface over a real server (demo model, served with the Qwen3.5-style test
// template that renders tools): refused fields name themselves, logit_bias, stop strings kept in the
// output, echo, the completions logprobs form, tool conversations and reasoning fields; and the
// response formatter on scripted model output (tool calls streamed and not, the same answer).
#include <gtest/gtest.h>

#include <httplib.h>

#include <thread>

#include "engine/engine.h"
#include "running_server.h"
#include "server/completion_response.h"
#include "server/openai_server.h"
#include "server/request_fields.h"
#include "server/sse_reader.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

using namespace gdn;
using namespace gdn::test;

namespace {

std::string tools_template_path() {
    return source_dir() + "/tests/data/chat_templates/qwen3_5_style.jinja";
}

class AgentServerTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        set_global_threads(1);
        EngineConfig ec;
        ec.max_model_len = 1024;
        ec.max_num_seqs = 4;
        ec.cache_memory = 64ull << 20;
        tok_ = new std::shared_ptr<const Tokenizer>();
        server_ =
            demo_server(ec, ServerConfig{}, LoadOptions{}, read_bytes(tools_template_path()), tok_).release();
        ASSERT_NE(server_, nullptr);
    }
    static void TearDownTestSuite() {
        delete server_;
        delete tok_;
        set_global_threads(default_thread_count());
    }
    static Json post(const std::string& path, const Json& body, int* status) {
        httplib::Client c("127.0.0.1", server_->port());
        c.set_read_timeout(60, 0);
        auto r = c.Post(path.c_str(), body.dump(), "application/json");
        EXPECT_TRUE(r) << "no response";
        if (!r) return Json();
        *status = r->status;
        auto j = parse_json(r->body, "response");
        return j.is_ok() ? *j : Json(r->body);
    }
    static Json ok(const std::string& path, const Json& body) {
        int st = 0;
        Json j = post(path, body, &st);
        EXPECT_EQ(st, 200) << j.dump();
        return j;
    }
    static std::string piece(int32_t id) { return *(*tok_)->decode({id}, false); }
    static RunningServer* server_;
    static std::shared_ptr<const Tokenizer>* tok_;
};
RunningServer* AgentServerTest::server_ = nullptr;
std::shared_ptr<const Tokenizer>* AgentServerTest::tok_ = nullptr;

const Json kUser = Json::parse(R"([{"role": "user", "content": "Tell me a fortune."}])");

TEST_F(AgentServerTest, EveryRefusedFieldNamesItself) {
    int refused = 0;
    for (const RequestField& f : request_fields()) {
        if (f.use != FieldUse::REFUSED) continue;
        for (bool chat : {true, false}) {
            if (!(chat ? f.chat : f.completions)) continue;
            Json body = chat ? Json{{"messages", kUser}} : Json{{"prompt", "The cat"}};
            body[f.name] = Json::object({{"x", 1}});
            int st = 0;
            Json j = post(chat ? "/v1/chat/completions" : "/v1/completions", body, &st);
            EXPECT_EQ(st, 400) << f.name << " " << j.dump();
            EXPECT_EQ(j["error"]["param"], f.name) << j.dump();
            EXPECT_NE(j["error"]["message"].get<std::string>().find(f.name), std::string::npos) << j.dump();
            refused++;
        }
    }
    EXPECT_GE(refused, 8);
    // Values we cannot honour, and a field of the other endpoint.
    const std::vector<std::pair<Json, std::string>> chat_cases = {
        {{{"n", 17}}, "n"},
        {{{"store", true}}, "store"},
        {{{"service_tier", "flex"}}, "service_tier"},
        {{{"modalities", {"text", "audio"}}}, "modalities"},
        {{{"tool_choice", "required"}}, "tool_choice"},  // without tools
        {{{"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}, "tool_choice"},
        {{{"response_format", {{"type", "json_schema"}}}}, "response_format"},  // without json_schema
        {{{"response_format", {{"type", "yaml"}}}}, "response_format"},
        {{{"structured_outputs", {{"grammar", "root ::= x"}}}}, "structured_outputs"},
        {{{"structured_outputs", {{"regex", "(a"}}}}, "structured_outputs"},
        {{{"reasoning_effort", "extreme"}}, "reasoning_effort"},
        {{{"echo", true}}, "echo"},
        {{{"logit_bias", {{"99999999", 5}}}}, "logit_bias"},
        {{{"logit_bias", {{"5", 101}}}}, "logit_bias"},
        {{{"tools", {{{"type", "function"}}}}}, "tools"},
    };
    for (const auto& [extra, param] : chat_cases) {
        Json body = {{"messages", kUser}};
        for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
        int st = 0;
        Json j = post("/v1/chat/completions", body, &st);
        EXPECT_EQ(st, 400) << body.dump() << " " << j.dump();
        EXPECT_EQ(j["error"]["param"], param) << j.dump();
    }
    int st = 0;
    Json j = post("/v1/completions", {{"prompt", "x"}, {"best_of", 2}}, &st);
    EXPECT_EQ(st, 400);
    EXPECT_EQ(j["error"]["param"], "best_of");
    // Accepted identifiers and hints, and fields that are nobody's.
    ok("/v1/chat/completions", {{"messages", kUser},
                                {"max_tokens", 2},
                                {"user", "u1"},
                                {"store", false},
                                {"metadata", {{"k", "v"}}},
                                {"service_tier", "auto"},
                                {"prompt_cache_key", "p"},
                                {"some_client_extra", 1}});
}

TEST_F(AgentServerTest, LogitBiasDecidesTheGreedyChoice) {
    const Json base = {{"prompt", "The cat"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 0}};
    Json plain = ok("/v1/completions", base);
    const std::string first = plain["choices"][0]["logprobs"]["tokens"][0];
    const int32_t forced = 300;  // any token the model would not pick
    ASSERT_NE(piece(forced), first);
    Json body = base;
    body["logit_bias"] = {{std::to_string(forced), 100}};
    Json biased = ok("/v1/completions", body);
    for (const Json& t : biased["choices"][0]["logprobs"]["tokens"]) EXPECT_EQ(t, piece(forced));
    EXPECT_EQ(biased["choices"][0]["text"], piece(forced) + piece(forced) + piece(forced) + piece(forced));
    // -100 on the greedy token: something else comes first.
    const int32_t greedy_id = (*tok_)->encode("The cat" + first).back();
    body["logit_bias"] = {{std::to_string(greedy_id), -100}};
    Json banned = ok("/v1/completions", body);
    EXPECT_NE(banned["choices"][0]["logprobs"]["tokens"][0], first);
    // Sampled requests honour it too.
    body["logit_bias"] = {{std::to_string(forced), 100}};
    body["temperature"] = 1.0;
    body["seed"] = 5;
    Json sampled = ok("/v1/completions", body);
    for (const Json& t : sampled["choices"][0]["logprobs"]["tokens"]) EXPECT_EQ(t, piece(forced));
}

TEST_F(AgentServerTest, CompletionsLogprobsEchoAndStopStrings) {
    const Json base = {{"prompt", "The cat"}, {"max_tokens", 12}, {"temperature", 0}};
    Json plain = ok("/v1/completions", base);
    const std::string text = plain["choices"][0]["text"];
    ASSERT_GE(text.size(), 6u);
    // OpenAI's legacy logprobs form: one entry per token, offsets into the text.
    Json body = base;
    body["logprobs"] = 2;
    Json lp = ok("/v1/completions", body)["choices"][0]["logprobs"];
    const int n = plain["usage"]["completion_tokens"];
    ASSERT_EQ(lp["tokens"].size(), size_t(n));
    ASSERT_EQ(lp["token_logprobs"].size(), size_t(n));
    ASSERT_EQ(lp["text_offset"].size(), size_t(n));
    ASSERT_EQ(lp["top_logprobs"].size(), size_t(n));
    EXPECT_EQ(lp["text_offset"][0], 0);
    EXPECT_LE(lp["top_logprobs"][0].size(), 2u);
    std::string joined;
    for (const Json& t : lp["tokens"]) joined += t.get<std::string>();
    EXPECT_EQ(joined.substr(0, text.size()), text);  // then, when it stopped there, the end-of-text token
    // echo: the prompt first, streamed or not.
    body = base;
    body["echo"] = true;
    EXPECT_EQ(ok("/v1/completions", body)["choices"][0]["text"], "The cat" + text);
    // echo with logprobs (a loglikelihood request of lm-evaluation-harness): the prompt's tokens come
    // first, the first one's logprob null, then the generated ones as without echo.
    body["logprobs"] = 1;
    const Json ep = ok("/v1/completions", body)["choices"][0]["logprobs"];
    const std::vector<int32_t> prompt_ids = (*tok_)->encode("The cat");
    const size_t P = prompt_ids.size();
    ASSERT_EQ(ep["tokens"].size(), P + n);
    ASSERT_EQ(ep["token_logprobs"].size(), P + n);
    ASSERT_EQ(ep["top_logprobs"].size(), P + n);
    ASSERT_EQ(ep["text_offset"].size(), P + n);
    EXPECT_TRUE(ep["token_logprobs"][0].is_null());
    EXPECT_TRUE(ep["top_logprobs"][0].is_null());
    std::string echoed;
    for (size_t i = 0; i < P + n; ++i) {
        EXPECT_EQ(ep["text_offset"][i].get<size_t>(), echoed.size()) << i;
        echoed += ep["tokens"][i].get<std::string>();
        if (i < P) {
            EXPECT_EQ(ep["tokens"][i], piece(prompt_ids[i]));
        }
        if (i == 0) continue;
        EXPECT_LE(ep["token_logprobs"][i].get<double>(), 0.0) << i;
        EXPECT_EQ(ep["top_logprobs"][i].size(), 1u) << i;
    }
    EXPECT_EQ(echoed.substr(0, 7 + text.size()), "The cat" + text);
    Json one = base;
    one["logprobs"] = 1;
    const Json gen = ok("/v1/completions", one)["choices"][0]["logprobs"];
    for (size_t i = 0; i < size_t(n); ++i) {
        EXPECT_EQ(ep["tokens"][P + i], gen["tokens"][i]) << i;
        EXPECT_NEAR(ep["token_logprobs"][P + i].get<double>(), gen["token_logprobs"][i].get<double>(), 1e-5)
            << i;
    }
    // max_tokens 0 with echo (OpenAI's legacy scoring): the prompt and its logprobs, nothing generated.
    Json zero = body;
    zero["max_tokens"] = 0;
    const Json z = ok("/v1/completions", zero);
    EXPECT_EQ(z["choices"][0]["text"], "The cat");
    EXPECT_EQ(z["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(z["usage"]["completion_tokens"], 0);
    ASSERT_EQ(z["choices"][0]["logprobs"]["tokens"].size(), P);
    for (size_t i = 1; i < P; ++i)
        EXPECT_NEAR(z["choices"][0]["logprobs"]["token_logprobs"][i].get<double>(),
                    ep["token_logprobs"][i].get<double>(), 1e-5);
    int status = 0;
    Json no_echo = base;
    no_echo["max_tokens"] = 0;
    EXPECT_EQ(post("/v1/completions", no_echo, &status)["error"]["param"], "max_tokens");
    EXPECT_EQ(status, 400);
    EXPECT_EQ(
        post("/v1/chat/completions", {{"messages", kUser}, {"max_tokens", 0}}, &status)["error"]["param"],
        "max_tokens");
    EXPECT_EQ(status, 400);
    // Streamed, the same lists; n = 2: each choice has the prompt's part (computed once).
    Json sb = body;
    sb["stream"] = true;
    sb["n"] = 2;
    sb["temperature"] = 1.0;
    sb["seed"] = 3;
    httplib::Client cl("127.0.0.1", server_->port());
    auto r = cl.Post("/v1/completions", sb.dump(), "application/json");
    ASSERT_TRUE(r);
    std::vector<Json> streamed(2, Json::array());
    SseReader sse;
    sse.feed(r->body.data(), r->body.size(), [&](const std::string& data) {
        if (data == "[DONE]") return true;
        const Json c = Json::parse(data)["choices"][0];
        if (!c["logprobs"].is_null())
            for (const Json& t : c["logprobs"]["tokens"]) streamed[c["index"].get<size_t>()].push_back(t);
        return true;
    });
    for (size_t c = 0; c < 2; ++c) {
        ASSERT_GT(streamed[c].size(), P) << c;
        for (size_t i = 0; i < P; ++i) EXPECT_EQ(streamed[c][i], piece(prompt_ids[i])) << c << " " << i;
    }
    sb["stream"] = false;
    const Json two = ok("/v1/completions", sb);
    for (size_t c = 0; c < 2; ++c) {
        const Json& l = two["choices"][c]["logprobs"];
        ASSERT_GT(l["tokens"].size(), P) << c;
        EXPECT_TRUE(l["token_logprobs"][0].is_null()) << c;
        for (size_t i = 1; i < P; ++i)
            EXPECT_NEAR(l["token_logprobs"][i].get<double>(), ep["token_logprobs"][i].get<double>(), 1e-5)
                << c << " " << i;
    }
    // A stop string inside the text: cut before it, or kept with include_stop_str_in_output.
    const std::string stop = text.substr(3, 3);
    body = base;
    body["stop"] = stop;
    const std::string cut = ok("/v1/completions", body)["choices"][0]["text"];
    EXPECT_EQ(cut, text.substr(0, text.find(stop)));
    body["include_stop_str_in_output"] = true;
    const std::string kept = ok("/v1/completions", body)["choices"][0]["text"];
    EXPECT_EQ(kept, text.substr(0, text.find(stop) + stop.size()));
}

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");

TEST_F(AgentServerTest, ToolConversationsAndReasoningFields) {
    // A whole tool round trip as an OpenAI client sends it back: arguments as a JSON string, content null.
    const Json history = Json::parse(R"([
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "rain"}])");
    Json with_tools = ok("/v1/chat/completions",
                         {{"messages", history}, {"tools", kTools}, {"max_tokens", 8}, {"temperature", 0}});
    Json without = ok("/v1/chat/completions", {{"messages", history}, {"max_tokens", 8}, {"temperature", 0}});
    EXPECT_GT(with_tools["usage"]["prompt_tokens"].get<int>(),
              without["usage"]["prompt_tokens"].get<int>() + 50);
    const Json& m = with_tools["choices"][0]["message"];
    EXPECT_EQ(m["role"], "assistant");
    // The template opened <think>: the answer so far is reasoning.
    ASSERT_TRUE(m.contains("reasoning_content"));
    EXPECT_TRUE(m["reasoning_content"].is_string());
    EXPECT_FALSE(m.contains("tool_calls"));
    // Thinking off: content, no reasoning.
    Json off = ok("/v1/chat/completions", {{"messages", kUser},
                                           {"max_tokens", 8},
                                           {"temperature", 0},
                                           {"chat_template_kwargs", {{"enable_thinking", false}}}});
    EXPECT_TRUE(off["choices"][0]["message"]["reasoning_content"].is_null());
    EXPECT_FALSE(off["choices"][0]["message"]["content"].get<std::string>().empty());
    // reasoning_effort "none" is thinking off too: the same answer.
    Json none =
        ok("/v1/chat/completions",
           {{"messages", kUser}, {"max_tokens", 8}, {"temperature", 0}, {"reasoning_effort", "none"}});
    EXPECT_EQ(none["choices"][0]["message"], off["choices"][0]["message"]);
    EXPECT_EQ(none["usage"], off["usage"]);
    // tool_choice none still renders the tools; arguments that are not an object are a 400 naming them.
    Json choice_none =
        ok("/v1/chat/completions",
           {{"messages", history}, {"tools", kTools}, {"tool_choice", "none"}, {"max_tokens", 4}});
    EXPECT_EQ(choice_none["usage"]["prompt_tokens"], with_tools["usage"]["prompt_tokens"]);
    Json bad = history;
    bad[1]["tool_calls"][0]["function"]["arguments"] = "{oops";
    int st = 0;
    Json j = post("/v1/chat/completions", {{"messages", bad}, {"tools", kTools}}, &st);
    EXPECT_EQ(st, 400);
    EXPECT_EQ(j["error"]["param"], "messages");
    EXPECT_NE(j["error"]["message"].get<std::string>().find("tool_calls[0].function.arguments"),
              std::string::npos)
        << j.dump();
}

// tool_choice "required" and a named function: even the demo model (which never saw a tool) emits a
// call that parses, with arguments of the declared types, whenever it finishes; streamed and not the
// same. At temperature 1 the demo model can wander inside a string value until max_tokens (finish
// "length", arguments cut off: what any engine returns there); such seeds are skipped, a few at most.
TEST_F(AgentServerTest, ForcedToolCallsAlwaysParse) {
    const Json tools = Json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "days"]}}},
      {"type": "function", "function": {"name": "now"}}])");
    for (const Json& choice :
         {Json("required"), Json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
#ifdef __SANITIZE_ADDRESS__
        const int seeds = 1;  // the Release run samples three
#else
        const int seeds = 3;
#endif
        int finished = 0, cut_off = 0;
        for (int seed = 0; finished < seeds; ++seed) {
            Json body = {{"messages", kUser},
                         {"tools", tools},
                         {"tool_choice", choice},
                         {"temperature", 1.0},
                         {"seed", seed},
                         {"max_tokens", 300},
                         {"chat_template_kwargs", {{"enable_thinking", false}}}};
            Json j = ok("/v1/chat/completions", body);
            const Json& c = j["choices"][0];
            if (c["finish_reason"] == "length") {
                ASSERT_LT(++cut_off, 4) << "most seeds run out of tokens: " << j.dump();
                continue;
            }
            ++finished;
            ASSERT_EQ(c["finish_reason"], "tool_calls") << j.dump();
            const Json& calls = c["message"]["tool_calls"];
            ASSERT_GE(calls.size(), 1u) << j.dump();
            for (const Json& call : calls) {
                const std::string name = call["function"]["name"];
                if (choice.is_object()) {
                    EXPECT_EQ(name, "get_weather");
                }
                auto args = parse_json(call["function"]["arguments"].get<std::string>(), "arguments");
                ASSERT_TRUE(args.is_ok()) << j.dump();
                if (name == "get_weather") {
                    EXPECT_TRUE((*args)["city"].is_string()) << j.dump();
                    EXPECT_TRUE((*args)["days"].is_number_integer()) << j.dump();
                    if (args->contains("unit")) {
                        EXPECT_TRUE((*args)["unit"] == "c" || (*args)["unit"] == "f");
                    }
                } else {
                    EXPECT_EQ(name, "now");
                }
            }
            if (finished == 1 && choice.is_string()) {  // the stream folds to the same call
                body["stream"] = true;
                httplib::Client cl("127.0.0.1", server_->port());
                auto r = cl.Post("/v1/chat/completions", body.dump(), "application/json");
                ASSERT_TRUE(r);
                std::string args, name, finish;
                SseReader sse;
                sse.feed(r->body.data(), r->body.size(), [&](const std::string& data) {
                    if (data == "[DONE]") return true;
                    const Json ch = Json::parse(data)["choices"][0];
                    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
                    if (ch["delta"].contains("tool_calls"))
                        for (const Json& t : ch["delta"]["tool_calls"])
                            if (t["index"] == 0) {
                                if (t["function"].contains("name")) name = t["function"]["name"];
                                args += t["function"]["arguments"].get<std::string>();
                            }
                    return true;
                });
                EXPECT_EQ(finish, "tool_calls");
                EXPECT_EQ(name, calls[0]["function"]["name"]);
                EXPECT_EQ(args, calls[0]["function"]["arguments"]);
            }
        }
    }
    int st = 0;
    Json j = post("/v1/chat/completions", {{"messages", kUser}, {"tool_choice", "required"}}, &st);
    EXPECT_EQ(st, 400);
    EXPECT_EQ(j["error"]["param"], "tool_choice");
    j = post("/v1/chat/completions",
             {{"messages", kUser},
              {"tools", tools},
              {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
             &st);
    EXPECT_EQ(st, 400);
    EXPECT_NE(j["error"]["message"].get<std::string>().find("nope"), std::string::npos);
}

// response_format json_schema with thinking on: the reasoning is free, the answer after </think> follows
// the schema; structured_outputs choice on completions.
// Issue 53, finding 6: a call that max_tokens cuts keeps the argument text generated (OpenAI returns the
// partial string), streamed and not; sent back in a later turn, the unparseable arguments are a 400 that
// names them, not a template error.
TEST_F(AgentServerTest, TruncatedToolCallsKeepTheirArguments) {
    const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
    Json body = {{"messages", kUser},
                 {"tools", tools},
                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                 {"temperature", 0},
                 {"chat_template_kwargs", {{"enable_thinking", false}}}};
    std::string args;
    for (int max_tokens = 4; max_tokens < 64 && args.empty(); ++max_tokens) {
        body["max_tokens"] = max_tokens;
        Json j = ok("/v1/chat/completions", body);
        const Json& c = j["choices"][0];
        if (c["finish_reason"] != "length") break;           // the call closed before the cut
        if (!c["message"].contains("tool_calls")) continue;  // cut before the call's name
        ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << j.dump();
        args = c["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>();
    }
    ASSERT_FALSE(args.empty()) << "no max_tokens cut the call inside its arguments";
    EXPECT_EQ(args.rfind(R"({"city":")", 0), 0u) << args;
    EXPECT_FALSE(parse_json(args, "arguments").is_ok()) << args;  // cut: not a whole object
    body["stream"] = true;
    httplib::Client cl("127.0.0.1", server_->port());
    auto r = cl.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    std::string streamed;
    SseReader sse;
    sse.feed(r->body.data(), r->body.size(), [&](const std::string& data) {
        if (data == "[DONE]") return true;
        const Json ch = Json::parse(data)["choices"][0];
        if (ch["delta"].contains("tool_calls"))
            for (const Json& t : ch["delta"]["tool_calls"]) streamed += t["function"].value("arguments", "");
        return true;
    });
    EXPECT_EQ(streamed, args);
    Json back = Json::parse(R"({"max_tokens": 4, "messages": [{"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [{"id": "call_0", "type": "function",
                                              "function": {"name": "get_weather"}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}]})");
    back["tools"] = tools;
    back["messages"][1]["tool_calls"][0]["function"]["arguments"] = args;
    int st = 0;
    Json e = post("/v1/chat/completions", back, &st);
    EXPECT_EQ(st, 400) << e.dump();
    EXPECT_NE(e.dump().find("messages[1].tool_calls[0].function.arguments"), std::string::npos) << e.dump();
}

TEST_F(AgentServerTest, ResponseFormatAndStructuredOutputs) {
    const Json schema =
        Json::parse(R"({"type": "object", "properties": {"fortune": {"type": "string", "maxLength": 30},
        "stars": {"type": "integer"}}, "required": ["fortune", "stars"]})");
    for (bool thinking : {false, true}) {
        Json body = {{"messages", kUser},
                     {"temperature", 1.0},
                     {"seed", 3},
                     {"max_tokens", 400},
                     {"response_format",
                      {{"type", "json_schema"},
                       {"json_schema", {{"name", "f"}, {"schema", schema}, {"strict", true}}}}},
                     {"chat_template_kwargs", {{"enable_thinking", thinking}}}};
        if (thinking)
            body["logit_bias"] = {{std::to_string(*(*tok_)->token_id("</think>")), 8}};  // think briefly
        Json j = ok("/v1/chat/completions", body);
        const Json& m = j["choices"][0]["message"];
        if (j["choices"][0]["finish_reason"] != "stop") {  // still thinking at max_tokens: nothing to check
            ASSERT_TRUE(thinking) << j.dump();
            continue;
        }
        auto v = parse_json(m["content"].get<std::string>(), "content");
        ASSERT_TRUE(v.is_ok()) << j.dump();
        EXPECT_TRUE((*v)["fortune"].is_string()) << j.dump();
        EXPECT_TRUE((*v)["stars"].is_number_integer()) << j.dump();
        if (thinking) {
            EXPECT_TRUE(m["reasoning_content"].is_string()) << j.dump();
        }
    }
    Json c = ok("/v1/completions", {{"prompt", "The cat"},
                                    {"max_tokens", 20},
                                    {"temperature", 1.0},
                                    {"structured_outputs", {{"choice", {"sat", "ran away"}}}}});
    const std::string text = c["choices"][0]["text"];
    EXPECT_TRUE(text == "sat" || text == "ran away") << text;
    int st = 0;
    Json bad =
        post("/v1/chat/completions",
             {{"messages", kUser},
              {"response_format",
               {{"type", "json_schema"},
                {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"format", "date"}}}}}}}},
             &st);
    EXPECT_EQ(st, 400);
    EXPECT_EQ(bad["error"]["param"], "response_format");
    EXPECT_NE(bad["error"]["message"].get<std::string>().find("format"), std::string::npos) << bad.dump();
}

// n = 3 with a seed: three distinct samples, the same three again, streamed as three indexed choices;
// the prompt is prefilled once (the others compute only its tail after the last full block).
TEST_F(AgentServerTest, NSamplesShareOnePrefill) {
    std::string prompt;
    for (int i = 0; i < 12; ++i) prompt += "The cat sat on the mat and looked at the moon. ";
    const int64_t P = static_cast<int64_t>((*tok_)->encode(prompt).size());
    const Json body = {{"prompt", prompt}, {"n", 3}, {"seed", 11}, {"temperature", 1.0}, {"max_tokens", 8}};
    const int port = server_->port();
    const double q0 = scrape_metric(port, "gdn_prefix_cache_queries_total"),
                 h0 = scrape_metric(port, "gdn_prefix_cache_hits_total");
    Json a = ok("/v1/completions", body);
    const double q1 = scrape_metric(port, "gdn_prefix_cache_queries_total"),
                 h1 = scrape_metric(port, "gdn_prefix_cache_hits_total");
    const double computed = (q1 - q0) - (h1 - h0);
    EXPECT_GE(computed, P);
    EXPECT_LT(computed, P + 2 * 16) << "the prompt was prefilled more than once";  // block size 16
    ASSERT_EQ(a["choices"].size(), 3u);
    std::vector<std::string> texts;
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(a["choices"][i]["index"], i);
        texts.push_back(a["choices"][i]["text"]);
    }
    EXPECT_NE(texts[0], texts[1]);
    EXPECT_NE(texts[1], texts[2]);
    EXPECT_EQ(a["usage"]["prompt_tokens"], P);
    Json again = ok("/v1/completions", body);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(again["choices"][i]["text"], texts[i]);
    std::printf("n = 3: prompt %lld tokens, prompt tokens computed %.0f\n", (long long)P, computed);
    EXPECT_GE(a["usage"]["completion_tokens"].get<int>(), 3);
    // Streamed: chunks carry their choice's index and fold to the same texts.
    Json sb = body;
    sb["stream"] = true;
    httplib::Client cl("127.0.0.1", port);
    auto r = cl.Post("/v1/completions", sb.dump(), "application/json");
    ASSERT_TRUE(r);
    std::vector<std::string> streamed(3);
    std::vector<int> finishes(3, 0);
    SseReader sse;
    sse.feed(r->body.data(), r->body.size(), [&](const std::string& data) {
        if (data == "[DONE]") return true;
        const Json c = Json::parse(data)["choices"][0];
        streamed[c["index"].get<size_t>()] += c["text"].get<std::string>();
        finishes[c["index"].get<size_t>()] += !c["finish_reason"].is_null();
        return true;
    });
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(streamed[i], texts[i]);
        EXPECT_EQ(finishes[i], 1);
    }
    // Chat too.
    Json chat = ok("/v1/chat/completions", {{"messages", kUser},
                                            {"n", 2},
                                            {"seed", 1},
                                            {"temperature", 1.0},
                                            {"max_tokens", 6},
                                            {"chat_template_kwargs", {{"enable_thinking", false}}}});
    ASSERT_EQ(chat["choices"].size(), 2u);
    EXPECT_EQ(chat["choices"][1]["index"], 1);
}

// The README lists every field of the table (the promise that unknown fields are documented).
TEST(RequestFields, EveryFieldIsInTheReadme) {
    const std::string readme = read_bytes(source_dir() + "/README.md");
    const size_t at = readme.find("Request fields (");
    ASSERT_NE(at, std::string::npos);
    const std::string section = readme.substr(at, readme.find("\n\n", at) - at);
    for (const RequestField& f : request_fields())
        EXPECT_NE(section.find(std::string("`") + f.name + "`"), std::string::npos)
            << f.name << " is not in the README";
}

TEST(ToolsRequest, ATemplateWithoutToolsRefusesThem) {
    auto tok = Tokenizer::load(demo_model_dir());  // the demo template never reads `tools`
    ASSERT_TRUE(tok.is_ok());
    auto ct = ChatTemplate::create(**tok);
    ASSERT_TRUE(ct.is_ok());
    EXPECT_FALSE((*ct)->renders_tools());
    RequestLimits lim{"demo", (*tok)->vocab_size(), 512};
    CompletionRequest req;
    ASSERT_FALSE(parse_completion_request({{"messages", kUser}, {"tools", kTools}}, true, lim, &req));
    std::vector<int32_t> ids;
    auto e = tokenize_prompt(&req, **tok, ct->get(), lim, &ids);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->param, "tools");
}

// The response formatter on a scripted answer, streamed and not: the same tool calls, ids, reasoning.
TEST(CompletionResponseFormat, ScriptedToolCallsStreamedAndNot) {
    auto tok = Tokenizer::load(demo_model_dir());
    ASSERT_TRUE(tok.is_ok());
    RequestLimits lim{"demo", (*tok)->vocab_size(), 512};
    const std::string answer =
        "Need the "
        "weather.\n</think>\n\nChecking.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n"
        "</parameter>\n</function>\n</tool_call>";
    auto run = [&](bool stream) {
        CompletionRequest req;
        EXPECT_FALSE(parse_completion_request({{"messages", kUser}, {"tools", kTools}, {"stream", stream}},
                                              true, lim, &req));
        req.opens_reasoning = true;
        auto job = std::make_shared<Job>();
        job->accepted = true;
        for (size_t at = 0; at < answer.size(); at += 7) {
            RequestOutput o;
            o.text_delta = answer.substr(at, 7);
            o.completion_tokens = static_cast<int64_t>(at / 7 + 1);
            job->outs.push_back(o);
        }
        job->outs.back().finish = FinishReason::STOP;
        job->done = true;
        ResponseOptions ro;
        ro.id = "chatcmpl-1";
        ro.model = "demo";
        ro.parsers.reasoning = "qwen3";
        ro.parsers.tool_calls = "qwen3_coder";
        auto resp = make_completion_response(job, req, ro, *tok);
        auto head = resp->head();
        EXPECT_TRUE(head.has_value());
        if (!stream) return *parse_json(head->body, "body");
        std::string body;
        EXPECT_TRUE(resp->next_chunk(&body));
        // Fold the deltas as an OpenAI client does.
        Json msg = {{"content", ""}, {"reasoning_content", ""}, {"tool_calls", Json::array()}};
        std::string finish;
        SseReader sse;
        sse.feed(body.data(), body.size(), [&](const std::string& data) {
            if (data == "[DONE]") return true;
            const Json c = Json::parse(data)["choices"][0];
            if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
            const Json& d = c["delta"];
            if (d.contains("content"))
                msg["content"] = msg["content"].get<std::string>() + d["content"].get<std::string>();
            if (d.contains("reasoning_content"))
                msg["reasoning_content"] =
                    msg["reasoning_content"].get<std::string>() + d["reasoning_content"].get<std::string>();
            if (d.contains("tool_calls"))
                for (const Json& t : d["tool_calls"]) {
                    const size_t i = t["index"];
                    if (t.contains("id")) {
                        EXPECT_EQ(msg["tool_calls"].size(), i);
                        msg["tool_calls"].push_back(
                            {{"id", t["id"]},
                             {"type", t["type"]},
                             {"function", {{"name", t["function"]["name"]}, {"arguments", ""}}}});
                    }
                    Json& f = msg["tool_calls"][i]["function"];
                    f["arguments"] =
                        f["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
                }
            return true;
        });
        return Json{{"choices", {{{"message", msg}, {"finish_reason", finish}}}}};
    };
    const Json whole = run(false), streamed = run(true);
    const Json& m = whole["choices"][0]["message"];
    EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_EQ(m["reasoning_content"], "Need the weather.");
    EXPECT_EQ(m["content"], "Checking.");
    ASSERT_EQ(m["tool_calls"].size(), 1u);
    EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city":"Oslo"})");
    EXPECT_EQ(m["tool_calls"][0]["type"], "function");
    const Json& s = streamed["choices"][0]["message"];
    EXPECT_EQ(streamed["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_EQ(s["reasoning_content"], m["reasoning_content"]);
    EXPECT_EQ(s["content"], m["content"]);
    EXPECT_EQ(s["tool_calls"], m["tool_calls"]);
}

}  // namespace
