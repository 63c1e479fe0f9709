// The server against an attacker, on loopback: every reproducer of the hardening issue replayed with raw
// sockets. Each asserts the right status with OpenAI error JSON (or a closed connection for the slow and
// huge transfers), that a normal request is answered within 5 s while the attack runs, bounded memory,
// and, at the end of every test, that the server is alive with every KV block and state slot free.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "raw_http.h"
#include "server/openai_server.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

constexpr const char* kAuth = "Authorization: Bearer k3y\r\n";

size_t rss_bytes() {
    std::ifstream f("/proc/self/statm");
    size_t pages = 0, resident = 0;
    f >> pages >> resident;
    return resident * 4096;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

struct LoopbackServer {
    std::unique_ptr<OpenAIServer> server;
    std::thread thread;
    int port = 0;
    LoopbackServer(EngineConfig ec, ServerConfig sc) {
        auto m = Model::load(ExecContext::process(), demo_model_dir());
        auto t = Tokenizer::load(demo_model_dir());
        EXPECT_TRUE(m.is_ok() && t.is_ok());
        auto e = Engine::create(std::shared_ptr<const Model>(std::move(*m)), *t, ec);
        EXPECT_TRUE(e.is_ok()) << e.message();
        sc.port = 0;
        sc.served_model_name = "demo";
        server = std::make_unique<OpenAIServer>(std::move(*e), *t, sc);
        thread = std::thread([this] { server->run(); });
        for (int i = 0; i < 500 && server->bound_port() == 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        port = server->bound_port();
    }
    ~LoopbackServer() {
        server->stop();
        thread.join();
    }
};

class Hostile : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        EngineConfig ec;
        ec.max_model_len = 4096;
        ec.max_num_seqs = 8;
        ec.cache_memory = 96ull << 20;
        ServerConfig sc;
        sc.api_key = "k3y";
        sc.header_timeout_s = 2;
        sc.request_timeout_s = 4;
        sc.idle_timeout_s = 3;
        sc.grammar_cache_bytes = 32u << 20;
        srv_ = new LoopbackServer(ec, sc);
        ASSERT_GT(srv_->port, 0);
    }
    static void TearDownTestSuite() { delete srv_; }
    void TearDown() override { expect_idle_and_alive(); }

    static int port() { return srv_->port; }
    static RawResponse post(const std::string& path, const std::string& body,
                            const std::string& headers = kAuth) {
        return raw_request(port(), http_post(path, body, headers));
    }
    static double metric(const std::string& name) { return raw_metric(port(), name, kAuth); }
    // A normal request, answered with 200 within 5 s; returns the seconds it took.
    static double normal_request_seconds() {
        const double t0 = now_seconds();
        RawResponse r = raw_request(
            port(), http_post("/v1/completions", R"({"prompt":"The cat","max_tokens":2})", kAuth), 5);
        EXPECT_EQ(r.status, 200) << r.body;
        return now_seconds() - t0;
    }
    // Status + OpenAI error JSON whose message holds `needle`.
    static void expect_api_error(const RawResponse& r, int status, const std::string& needle) {
        EXPECT_EQ(r.status, status) << r.body;
        auto j = parse_json(r.body, "error body");
        ASSERT_TRUE(j.is_ok()) << r.body;
        ASSERT_TRUE(j->contains("error")) << r.body;
        EXPECT_TRUE((*j)["error"]["message"].is_string());
        EXPECT_TRUE((*j)["error"]["type"].is_string());
        EXPECT_TRUE((*j)["error"].contains("param") && (*j)["error"].contains("code"));
        EXPECT_NE((*j)["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
    }
    static void expect_idle_and_alive() {
        bool freed = false;
        for (int i = 0; i < 300 && !freed; ++i) {
            freed = metric("gdn_kv_blocks_free") == metric("gdn_kv_blocks_total") &&
                    metric("gdn_state_slots_free") == metric("gdn_state_slots_total") &&
                    metric("gdn_requests_running") == 0 && metric("gdn_requests_in_flight") == 0;
            if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        EXPECT_TRUE(freed) << "blocks or slots still held after the test";
        EXPECT_LT(normal_request_seconds(), 5.0);
    }
    static LoopbackServer* srv_;
};
LoopbackServer* Hostile::srv_ = nullptr;

std::string nested(int depth) {
    return std::string(depth, '[') + std::string(depth, ']');
}

// 1. Deeply nested JSON: a clear 400 on every endpoint and every path into the request.
TEST_F(Hostile, DeeplyNestedJson) {
    const std::string deep = nested(30000);
    expect_api_error(
        post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi","x":)" + deep + "}]}"),
        400, "nested deeper than");
    expect_api_error(
        post("/v1/chat/completions",
             R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"a":)" + deep + "}}"),
        400, "nested deeper than");
    expect_api_error(post("/tokenize", R"({"messages":)" + deep + "}"), 400, "nested deeper than");
    expect_api_error(post("/v1/completions", R"({"prompt":)" + deep + "}"), 400, "nested deeper than");
    expect_api_error(post("/detokenize", R"({"tokens":)" + deep + "}"), 400, "nested deeper than");
    // Brackets inside strings are text, not nesting; moderate real nesting is fine.
    RawResponse ok = post("/tokenize", R"({"prompt":")" + std::string(5000, '[') + R"("})");
    EXPECT_EQ(ok.status, 200) << ok.body;
    ok = post("/v1/chat/completions",
              R"({"messages":[{"role":"user","content":"hi","x":)" + nested(60) + R"(}],"max_tokens":1})");
    EXPECT_EQ(ok.status, 200) << ok.body;
}

// 2. Slowloris: 200 sockets dripping header lines, then 200 silent sockets. Normal requests keep being
// answered; the drippers are cut off at the head deadline (408 or closed), the silent ones at idle.
TEST_F(Hostile, SlowlorisAndSilentSockets) {
    std::vector<int> socks;
    for (int i = 0; i < 200; ++i) {
        const int fd = raw_connect(port());
        ASSERT_GE(fd, 0);
        raw_send(fd, "GET /health HTTP/1.1\r\n");
        socks.push_back(fd);
    }
    const double t0 = now_seconds();
    double worst = 0;
    while (now_seconds() - t0 < 3.0) {  // past the 2 s head deadline
        for (int fd : socks) raw_send(fd, "X-Drip: 1\r\n");
        worst = std::max(worst, normal_request_seconds());
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    EXPECT_LT(worst, 5.0);
    int cut = 0;
    for (int fd : socks) {
        cut += raw_closed_within(fd, 3.0);
        ::close(fd);
    }
    EXPECT_EQ(cut, 200) << "every dripping connection is closed at the head deadline";
    socks.clear();
    for (int i = 0; i < 200; ++i) socks.push_back(raw_connect(port()));
    EXPECT_LT(normal_request_seconds(), 5.0);
    int closed = 0;
    for (int fd : socks) {
        closed += raw_closed_within(fd, 6.0);
        ::close(fd);
    }
    EXPECT_EQ(closed, 200) << "silent connections are closed at the idle deadline";
}

// 3. A 100 MB chunked body (and a 100 MB Content-Length) is refused at the 8 MiB limit: memory stays
// bounded while it is sent, the connection closes, other clients are served throughout.
TEST_F(Hostile, HugeChunkedBodyIsCutAtTheLimit) {
    const size_t rss0 = rss_bytes();
    const int fd = raw_connect(port());
    ASSERT_GE(fd, 0);
    raw_send(fd, std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n") +
                     kAuth + "\r\n");
    raw_send(fd, "10000\r\n{\"prompt\":\"" + std::string(65536 - 11, 'a') + "\r\n");
    const std::string chunk = "10000\r\n" + std::string(65536, 'a') + "\r\n";
    size_t sent = 65536, peak = 0;
    bool refused = false;
    std::atomic<bool> done{false};
    std::thread side([&] {
        while (!done) {
            EXPECT_LT(normal_request_seconds(), 5.0);
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    });
    while (sent < (100u << 20)) {
        if (!raw_send(fd, chunk)) {
            refused = true;
            break;
        }
        sent += 65536;
        peak = std::max(peak, rss_bytes());
    }
    std::string buf;
    RawResponse r = raw_read_response(fd, &buf, 5);
    if (r.status) expect_api_error(r, 413, "too large");
    EXPECT_TRUE(refused || r.status == 413);
    EXPECT_LT(sent, 100u << 20) << "the server read the whole 100 MB";
    done = true;
    side.join();
    ::close(fd);
    // ASan keeps freed blocks in quarantine and adds shadow memory: the bound is relaxed there only.
    const size_t bound = kAsan ? (1200u << 20) : (400u << 20);
    std::printf("chunked 100 MB upload: rss %.0f -> peak %.0f MiB, %.1f MiB sent before the server refused\n",
                rss0 / 1048576.0, peak / 1048576.0, sent / 1048576.0);
    EXPECT_LT(peak, bound);
    // Content-Length beyond the limit: answered before any body byte is read.
    RawResponse cl = raw_request(
        port(), std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n") +
                    kAuth + "\r\n");
    expect_api_error(cl, 413, "too large");
}

// 4. Client errors are 400 with OpenAI error JSON, never 500.
TEST_F(Hostile, ClientErrorsAre400) {
    expect_api_error(post("/v1/completions", R"({"prompt":"hi","max_tokens":1e400})"), 400, "invalid JSON");
    expect_api_error(post("/v1/completions", "{\"prompt\":\"\xff\xfe\"}"), 400, "malformed JSON");
    expect_api_error(post("/v1/completions", "{\"prompt\xc3\":1}"), 400, "malformed JSON");
    expect_api_error(post("/v1/completions", "[1,2"), 400, "malformed JSON");
    expect_api_error(post("/v1/completions", "\"just a string\""), 400, "must be a JSON object");
    expect_api_error(post("/v1/completions", R"({"prompt":"hi","stream_options":3})"), 400, "stream_options");
    expect_api_error(post("/v1/completions", R"({"prompt":"hi","stream":"yes"})"), 400,
                     "'stream' must be a boolean");
    EXPECT_EQ(metric("gdn_requests_rejected_total"), 0.0);
}

// An assistant turn may leave out `content` (OpenAI: a turn that only calls tools): it is null, and the
// template renders it; a user turn without content is a 400 that names it (issue 53, finding 4).
TEST_F(Hostile, AssistantTurnsWithoutContent) {
    const std::string call =
        R"({"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}})";
    RawResponse r = post("/v1/chat/completions",
                         R"({"max_tokens":2,"messages":[{"role":"user","content":"weather?"},)"
                         R"({"role":"assistant","tool_calls":[)" +
                             call + R"(]},{"role":"tool","tool_call_id":"c1","content":"sunny"}]})");
    EXPECT_EQ(r.status, 200) << r.body;
    r = post("/v1/chat/completions", R"({"max_tokens":2,"messages":[{"role":"user","content":"hi"},)"
                                     R"({"role":"assistant"},{"role":"user","content":"again"}]})");
    EXPECT_EQ(r.status, 200) << r.body;
    expect_api_error(post("/v1/chat/completions", R"({"max_tokens":2,"messages":[{"role":"user"}]})"), 400,
                     "messages[0].content is required");
    expect_idle_and_alive();
}

// A response_format schema that admits no finite document is a 400, not a 200 of whitespace (issue 53,
// finding 3).
TEST_F(Hostile, SelfReferencingSchemasAre400) {
    for (const char* schema :
         {R"({"$ref":"#"})",
          R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})"})
        expect_api_error(
            post("/v1/chat/completions",
                 std::string(R"({"max_tokens":8,"messages":[{"role":"user","content":"hi"}],)") +
                     R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" +
                     schema + "}}}"),
            400, "admits no finite JSON document");
    expect_idle_and_alive();
}

// The resident memory of this process (the server runs in it), in MiB.
double rss_mib() {
    std::ifstream f("/proc/self/statm");
    long pages = 0, resident = 0;
    f >> pages >> resident;
    return resident * (sysconf(_SC_PAGESIZE) / 1048576.0);
}

// A small schema that compiles to gigabytes is refused once its grammar passes the budget (issue 53,
// finding 1: 30 x 30 x 30 nested anyOf leaves of maxLength 1000 grew the server from 575 MB to 6.3 GB).
TEST_F(Hostile, SchemasThatCompileToGigabytesAreRefused) {
    std::string leaf = R"({"type":"string","maxLength":1000})", l1 = R"({"anyOf":[)", l2 = l1, l3 = l1;
    for (int i = 0; i < 30; ++i) l1 += (i ? "," : "") + leaf + R"(,{"type":"integer"})";
    l1 += "]}";
    for (int i = 0; i < 30; ++i) l2 += (i ? "," : "") + l1;
    l2 += "]}";
    for (int i = 0; i < 30; ++i) l3 += (i ? "," : "") + l2;
    l3 += "]}";
    ASSERT_GT(l3.size(), size_t{1} << 20);  // 54k leaves
    const double rss0 = rss_mib(), t0 = now_seconds();
    expect_api_error(post("/v1/chat/completions",
                          R"({"max_tokens":8,"messages":[{"role":"user","content":"hi"}],"response_format":)"
                          R"({"type":"json_schema","json_schema":{"name":"x","schema":)" +
                              l3 + "}}}"),
                     400, "MiB of grammar (the limit)");
    EXPECT_LT(now_seconds() - t0, 10.0);
    EXPECT_LT(rss_mib() - rss0, 512.0);  // the 64 MiB budget and the request's own JSON, not gigabytes
    expect_idle_and_alive();
}

// Compiled grammars are kept by schema, within the cache's budget (issue 53, finding 1): a schema sent
// again is a hit, distinct schemas evict the least recently used ones instead of adding up (190 KB schemas
// of 4,000 anyOf strings added ~600 MB each), no request holds a grammar after it ends, and the memory
// comes back.
TEST_F(Hostile, CompiledGrammarsAreCachedWithinABudget) {
    auto schema_request = [](int variant) {
        std::string any = R"({"anyOf":[)";
        for (int i = 0; i < 2000; ++i)  // ~12 MiB of grammar
            any += (i ? "," : "") + std::string(R"({"type":"string","maxLength":)") +
                   std::to_string(20 + variant) + "}";
        any += "]}";
        return R"({"max_tokens":4,"messages":[{"role":"user","content":"hi"}],"response_format":)"
               R"({"type":"json_schema","json_schema":{"name":"x","schema":)" +
               any + "}}}";
    };
    const double hits0 = metric("gdn_grammar_cache_hits_total"),
                 misses0 = metric("gdn_grammar_cache_misses_total");
    const double rss0 = rss_mib();
    // A request compiles its grammar and masks 4 tokens with it: seconds under ASan on a busy machine.
    auto send = [](const std::string& body) {
        return raw_request(port(), http_post("/v1/chat/completions", body, kAuth), 120).status;
    };
    ASSERT_EQ(send(schema_request(0)), 200);
    ASSERT_EQ(send(schema_request(0)), 200);
    EXPECT_EQ(metric("gdn_grammar_cache_hits_total"), hits0 + 1);
    EXPECT_EQ(metric("gdn_grammar_cache_misses_total"), misses0 + 1);
    for (int v = 1; v <= (kAsan ? 3 : 5); ++v) ASSERT_EQ(send(schema_request(v)), 200);
    const double budget = metric("gdn_grammar_cache_budget_bytes"), bytes = metric("gdn_grammar_cache_bytes");
    std::fprintf(stderr, "grammar cache: %.0f entries, %.1f MiB of %.1f; %.0f evictions; RSS +%.0f MiB\n",
                 metric("gdn_grammar_cache_entries"), bytes / 1048576, budget / 1048576,
                 metric("gdn_grammar_cache_evictions_total"), rss_mib() - rss0);
    EXPECT_LE(bytes, budget);
    EXPECT_GT(metric("gdn_grammar_cache_evictions_total"), 0);
    // The last answer reaches the client a moment before its request's record (which holds the grammar)
    // is dropped: wait for that, briefly.
    bool released = false;
    for (int i = 0; i < 250 && !released; ++i) {
        released = metric("gdn_grammar_cache_in_use") == 0;
        if (!released) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(released) << "a finished request still holds its grammar";
    // Under ASan freed memory waits in its quarantine (256 MiB) and the heap has its shadow: measured +529
    // MiB there without a leak (LeakSanitizer checks for real ones at exit).
    EXPECT_LT(rss_mib() - rss0, kAsan ? 1024.0 : 256.0);
    expect_idle_and_alive();
}

// A request object with a huge number of members is refused in time linear in the body (issue 53, finding
// 2): 100k logit_bias entries took 14 s of a core before their count was checked (ordered JSON objects
// insert in time linear in their size), as did any large object. The bound here is ~5x the time the
// parse of such a body takes, far below the old cost.
TEST_F(Hostile, HugeObjectsAreRefusedWithoutQuadraticWork) {
    std::string bias = R"({"prompt":"hi","max_tokens":1,"logit_bias":{)";
    for (int i = 0; i < 100000; ++i) bias += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
    bias += "}}";
    double t0 = now_seconds();
    expect_api_error(post("/v1/completions", bias), 400, "'logit_bias' has more than 1024 members");
    EXPECT_LT(now_seconds() - t0, 3.0);
    std::string meta = R"({"prompt":"hi","max_tokens":1,"metadata":{)";
    for (int i = 0; i < 200000; ++i) meta += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
    meta += "}}";
    t0 = now_seconds();
    expect_api_error(post("/v1/completions", meta), 400, "'metadata' has more than 512 members");
    EXPECT_LT(now_seconds() - t0, 3.0);
    // At the limit the request is served (1024 biases).
    std::string ok = R"({"prompt":"hi","max_tokens":1,"logit_bias":{)";
    for (int i = 0; i < 1024; ++i) ok += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
    ok += "}}";
    EXPECT_EQ(post("/v1/completions", ok).status, 200);
    expect_idle_and_alive();
}

// 5. A non-streaming request whose client leaves is aborted, not run to completion.
TEST_F(Hostile, NonStreamingRequestsAbortWhenTheClientLeaves) {
    const double aborted0 = metric("gdn_requests_aborted_total");
    std::vector<int> socks;
    for (int i = 0; i < 6; ++i) {
        const int fd = raw_connect(port());
        raw_send(fd,
                 http_post("/v1/completions",
                           R"({"prompt":"Once upon a time","max_tokens":4000,"ignore_eos":true})", kAuth));
        socks.push_back(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int fd : socks) ::close(fd);
    bool all = false;
    for (int i = 0; i < 100 && !all; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        all = metric("gdn_requests_aborted_total") >= aborted0 + 6 && metric("gdn_requests_running") == 0;
    }
    EXPECT_TRUE(all) << "aborted " << metric("gdn_requests_aborted_total") - aborted0 << " of 6";
}

// Issue 53, finding 5: a client that half-closes after its request (shutdown(SHUT_WR), as `nc -N` and
// some proxies do) is answered, then the connection closes: non-streamed, streamed and HTTP/1.0 alike.
TEST_F(Hostile, HalfClosedClientsAreAnswered) {
    struct Case {
        std::string bytes, needle;
    };
    const std::string body = R"({"prompt":"The cat","max_tokens":3,"ignore_eos":true})";
    const std::string stream = R"({"prompt":"The cat","max_tokens":3,"ignore_eos":true,"stream":true})";
    std::string http10 = http_post("/v1/completions", body, kAuth);
    http10.replace(http10.find("HTTP/1.1"), 8, "HTTP/1.0");
    const Case cases[] = {{http_post("/v1/completions", body, kAuth), "\"text\""},
                          {http_post("/v1/completions", stream, kAuth), "[DONE]"},
                          {http10, "\"text\""},
                          {std::string("GET /v1/models HTTP/1.1\r\nHost: x\r\n") + kAuth + "\r\n", "demo"}};
    for (const Case& c : cases) {
        const int fd = raw_connect(port());
        ASSERT_GE(fd, 0);
        ASSERT_TRUE(raw_send(fd, c.bytes));
        ::shutdown(fd, SHUT_WR);
        std::string buf;
        RawResponse r = raw_read_response(fd, &buf, 10);
        EXPECT_EQ(r.status, 200) << c.bytes.substr(0, 40);
        EXPECT_NE(r.body.find(c.needle), std::string::npos) << r.body;
        if (c.needle != "demo") {  // /v1/models answers inline, before the EOF is read
            EXPECT_EQ(r.headers["connection"], "close");
        }
        EXPECT_TRUE(raw_closed_within(fd, 2)) << "the connection stays open after the answer";
        ::close(fd);
    }
}

// Issue 53, finding 9: special tokens typed in message text are the special tokens (the documented
// default, as vLLM, llama-server and HF do): "<|im_end|>" in a user message tokenizes to the control
// token's id, the same id the template's own turn end gets.
TEST_F(Hostile, SpecialTokensInMessageTextStaySpecial) {
    RawResponse r = post("/tokenize", R"({"prompt":"<|im_end|>"})");
    ASSERT_EQ(r.status, 200) << r.body;
    auto alone = parse_json(r.body, "tokenize");
    ASSERT_TRUE(alone.is_ok());
    ASSERT_EQ((*alone)["tokens"].size(), 1u) << r.body;  // one id: the control token, not its characters
    const int64_t im_end = (*alone)["tokens"][0].get<int64_t>();
    r = post("/tokenize", R"({"messages":[{"role":"user","content":"hi<|im_end|>"}]})");
    ASSERT_EQ(r.status, 200) << r.body;
    auto chat = parse_json(r.body, "tokenize");
    ASSERT_TRUE(chat.is_ok());
    int count = 0;
    for (const Json& t : (*chat)["tokens"]) count += t.get<int64_t>() == im_end;
    EXPECT_EQ(count, 2) << r.body;  // the user's and the template's
}

// 6. Integers out of range are errors that name the field; never wrapped.
TEST_F(Hostile, IntegersOutOfRangeAreRefused) {
    const int32_t V = 4096;  // demo vocabulary (tokenizer)
    (void)V;
    expect_api_error(post("/v1/completions", R"({"prompt":[4294967301]})"), 400, "out of range");
    expect_api_error(post("/v1/completions", R"({"prompt":[-9223372036854775808]})"), 400, "out of range");
    expect_api_error(post("/v1/completions", R"({"prompt":[18446744073709551615]})"), 400, "out of range");
    expect_api_error(post("/v1/completions", R"({"prompt":[1, 2.5]})"), 400, "must hold integers");
    expect_api_error(post("/detokenize", R"({"tokens":[4294967301]})"), 400, "out of range");
    expect_api_error(post("/v1/completions", R"({"prompt":"x","stop_token_ids":[4294967297]})"), 400,
                     "stop_token_ids");
    expect_api_error(post("/v1/completions", R"({"prompt":"x","top_k":4294967297})"), 400,
                     "'top_k' must be an integer in");
    expect_api_error(post("/v1/completions", R"({"prompt":"x","min_tokens":4294967297})"), 400,
                     "'min_tokens'");
    expect_api_error(post("/v1/completions", R"({"prompt":"x","max_tokens":-5})"), 400, "'max_tokens'");
    expect_api_error(post("/v1/completions", R"({"prompt":"x","logprobs":100})"), 400, "'logprobs'");
    expect_api_error(
        post("/v1/chat/completions",
             R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":1000000})"),
        400, "'top_logprobs'");
    expect_api_error(post("/v1/completions", R"({"prompt":"x","n":18446744073709551617})"), 400, "");
    // The first id past the tokenizer's vocabulary is refused even if the model has a (padding) row.
    RawResponse m =
        raw_request(port(), std::string("GET /v1/models HTTP/1.1\r\nHost: x\r\n") + kAuth + "\r\n");
    const int vocab = (*parse_json(m.body, "models"))["data"][0]["vocab_size"].get<int>();
    expect_api_error(post("/v1/completions", "{\"prompt\":[" + std::to_string(vocab) + "]}"), 400,
                     "out of range");
    EXPECT_EQ(
        post("/v1/completions", "{\"prompt\":[" + std::to_string(vocab - 1) + "],\"max_tokens\":1}").status,
        200);
    // Seeds take any 64-bit integer.
    EXPECT_EQ(post("/v1/completions", R"({"prompt":"x","max_tokens":1,"seed":18446744073709551615})").status,
              200);
    EXPECT_EQ(post("/v1/completions", R"({"prompt":"x","max_tokens":1,"seed":-1})").status, 200);
}

// 7. + 8. max_tokens beyond the context is a 400 (as vLLM), and so is every validation failure of a
// streamed request: before the response starts, never a 200 with an error event.
TEST_F(Hostile, ContextLengthAndStreamedValidation) {
    expect_api_error(post("/v1/completions", R"({"prompt":"The cat","max_tokens":5000})"), 400,
                     "maximum context length is 4096 tokens. However, you requested");
    expect_api_error(post("/v1/completions", R"({"prompt":"The cat","max_tokens":5000,"stream":true})"), 400,
                     "maximum context length");
    expect_api_error(post("/v1/chat/completions",
                          R"({"messages":[{"role":"user","content":"x"}],"max_tokens":4095,"stream":true})"),
                     400, "maximum context length");
    const std::string big(20000, 'z');
    expect_api_error(post("/v1/completions", R"({"prompt":")" + big + R"(","stream":true})"), 400,
                     "maximum context length");
    expect_api_error(post("/v1/completions", R"({"prompt":"x","temperature":-1,"stream":true})"), 400,
                     "temperature");
    expect_api_error(post("/v1/completions", R"({"prompt":[],"stream":true})"), 400, "");
    // Exactly filling the context is fine.
    RawResponse t = post("/tokenize", R"({"prompt":"The cat"})");
    const int n = (*parse_json(t.body, "t"))["count"].get<int>();
    // Only the head matters (the request was accepted): generating up to ~4000 tokens to the end would
    // take longer than any read timeout under the sanitizers. Closing the socket aborts the request.
    const int fd = raw_connect(port());
    ASSERT_TRUE(raw_send(fd, http_post("/v1/completions",
                                       "{\"prompt\":\"The cat\",\"max_tokens\":" + std::to_string(4096 - n) +
                                           ",\"stream\":true}",
                                       kAuth)));
    std::string head;
    const double t0 = now_seconds();
    while (head.find("\r\n\r\n") == std::string::npos && now_seconds() - t0 < 30 &&
           raw_recv_some(fd, &head, 30)) {
    }
    ::close(fd);
    EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
}

// 10. Protocol details: pipelining, long keep-alive, bodies without Content-Type, what the HTTP layer
// refuses by itself, /metrics behind the key, /health open.
TEST_F(Hostile, ProtocolDetails) {
    {  // 5 pipelined requests in one write: 5 answers, in order
        const int fd = raw_connect(port());
        std::string all;
        for (int i = 0; i < 5; ++i)
            all += http_post("/tokenize", "{\"prompt\":\"" + std::string(i + 1, 'a') + "\"}", kAuth);
        raw_send(fd, all);
        std::string buf;
        for (int i = 0; i < 5; ++i) {
            RawResponse r = raw_read_response(fd, &buf);
            ASSERT_EQ(r.status, 200) << i;
            EXPECT_EQ((*parse_json(r.body, "t"))["count"].get<int>() > 0, true);
        }
        ::close(fd);
    }
    {  // 3000 pipelined requests sent before any answer is read: all answered, in order, while the server
       // stops parsing whenever too many answers wait unread
        const int fd = raw_connect(port());
        std::string all;
        for (int i = 0; i < 3000; ++i)
            all += "GET /health HTTP/1.1\r\nX-N: " + std::to_string(i) + "\r\n\r\n";
        std::thread writer([&] { raw_send(fd, all); });
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        EXPECT_LT(normal_request_seconds(), 5.0);
        std::string buf;
        int ok = 0;
        for (int i = 0; i < 3000; ++i) ok += raw_read_response(fd, &buf).status == 200;
        writer.join();
        EXPECT_EQ(ok, 3000);
        ::close(fd);
    }
    {  // 50 requests on one keep-alive connection
        const int fd = raw_connect(port());
        std::string buf;
        int ok = 0;
        for (int i = 0; i < 50; ++i) {
            raw_send(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
            ok += raw_read_response(fd, &buf).status == 200;
        }
        EXPECT_EQ(ok, 50);
        ::close(fd);
    }
    // A body > 8 KB without Content-Type (curl -d sends a form type; none here) is read as JSON.
    const std::string body = R"({"prompt":")" + std::string(20000, ' ') + R"(hi","max_tokens":1})";
    RawResponse r = raw_request(port(), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                            std::to_string(body.size()) + "\r\n" + kAuth + "\r\n" + body);
    EXPECT_EQ(r.status, 200) << r.body;
    r = raw_request(
        port(),
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        "Content-Length: " +
            std::to_string(body.size()) + "\r\n" + kAuth + "\r\n" + body);
    EXPECT_EQ(r.status, 200) << r.body;
    // Expect: 100-continue is honoured.
    r = raw_request(port(),
                    "POST /tokenize HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 15\r\n" +
                        std::string(kAuth) + "\r\n{\"prompt\":\"hi\"}");
    EXPECT_EQ(r.status, 200) << r.body;
    // What the HTTP layer refuses.
    expect_api_error(
        raw_request(port(), "GET /health HTTP/1.1\r\nX: " + std::string(70000, 'a') + "\r\n\r\n"), 431,
        "too large");
    expect_api_error(raw_request(port(), "GARBAGE\r\n\r\n"), 400, "malformed request line");
    expect_api_error(raw_request(port(), "GET /nope HTTP/1.1\r\n\r\n"), 404, "no such endpoint");
    expect_api_error(raw_request(port(), "DELETE /health HTTP/1.1\r\n\r\n"), 405, "not allowed");
    // HEAD answers the GET route's head (an error's too) without a body; OPTIONS lists the methods
    // (issue 53, finding 8).
    auto head_of = [&](const std::string& path) {
        const int fd = raw_connect(port());
        std::string all;
        if (fd < 0 || !raw_send(fd, "HEAD " + path + " HTTP/1.1\r\nConnection: close\r\n" + kAuth + "\r\n"))
            return all;
        while (raw_recv_some(fd, &all, 5.0)) {
        }
        ::close(fd);
        return all;
    };
    for (const char* path : {"/health", "/v1/models"}) {
        const std::string all = head_of(path);
        EXPECT_EQ(all.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << all;
        EXPECT_NE(all.find("Content-Length: "), std::string::npos) << all;
        EXPECT_EQ(all.find("Content-Length: 0\r\n"), std::string::npos) << all;  // the GET body's length
        EXPECT_EQ(all.size(), all.find("\r\n\r\n") + 4) << "a body followed the head: " << all;
    }
    const std::string refused = head_of("/v1/chat/completions");
    EXPECT_EQ(refused.rfind("HTTP/1.1 405 ", 0), 0u) << refused;
    EXPECT_NE(refused.find("Allow: POST, OPTIONS\r\n"), std::string::npos) << refused;
    EXPECT_EQ(refused.size(), refused.find("\r\n\r\n") + 4) << refused;
    RawResponse opt = raw_request(port(), "OPTIONS /health HTTP/1.1\r\n\r\n");
    EXPECT_EQ(opt.status, 204);
    EXPECT_EQ(opt.headers["allow"], "GET, HEAD, OPTIONS");
    opt = raw_request(port(), "OPTIONS /v1/chat/completions HTTP/1.1\r\n\r\n");
    EXPECT_EQ(opt.status, 204);
    EXPECT_EQ(opt.headers["allow"], "POST, OPTIONS");
    expect_api_error(raw_request(port(), "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 501,
                     "Transfer-Encoding");
    expect_api_error(
        raw_request(port(),
                    "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"),
        400, "both");
    expect_api_error(
        raw_request(port(), "POST /tokenize HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"), 400,
        "conflicting");
    expect_api_error(
        raw_request(port(), "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), 400,
        "chunk");
    expect_api_error(raw_request(port(), "GET /health HTTP/2.0\r\n\r\n"), 505, "HTTP/1.0 and HTTP/1.1");
    // The absolute-form request target (RFC 9112 3.2.2: a server must accept it; what proxies send).
    EXPECT_EQ(raw_request(port(), "GET http://127.0.0.1:8000/health HTTP/1.1\r\nHost: x\r\n\r\n").status,
              200);
    EXPECT_EQ(raw_request(port(), "GET HTTP://x/health?a=1 HTTP/1.1\r\n\r\n").status, 200);
    expect_api_error(raw_request(port(), "GET http://x HTTP/1.1\r\n\r\n"), 404,
                     "no such endpoint");  // path "/"
    expect_api_error(raw_request(port(), "GET http:///health HTTP/1.1\r\n\r\n"), 400, "no host");
    expect_api_error(raw_request(port(), "GET ftp://x/health HTTP/1.1\r\n\r\n"), 400,
                     "malformed request line");
    // Authentication: /health open, /metrics and the API behind the key.
    EXPECT_EQ(raw_request(port(), "GET /health HTTP/1.1\r\n\r\n").status, 200);
    expect_api_error(raw_request(port(), "GET /metrics HTTP/1.1\r\n\r\n"), 401, "Missing API key");
    expect_api_error(raw_request(port(), "GET /metrics HTTP/1.1\r\nAuthorization: Bearer k3z\r\n\r\n"), 401,
                     "Incorrect API key");
    expect_api_error(raw_request(port(), "GET /v1/models HTTP/1.1\r\nAuthorization: Bearer k3y0\r\n\r\n"),
                     401, "Incorrect API key");
    // Half a request, then silence: 408 at the head deadline.
    const int fd = raw_connect(port());
    raw_send(fd, "POST /tokenize HTTP/1.1\r\nContent-Length: 50\r\n");
    std::string buf;
    expect_api_error(raw_read_response(fd, &buf, 6), 408, "not received in time");
    ::close(fd);
}

// --max-queue: beyond the running requests and the queue, 503 with Retry-After.
TEST(HostileQueue, AdmissionLimitAnswers503) {
    EngineConfig ec;
    ec.max_model_len = 4096;
    ec.max_num_seqs = 1;
    ec.cache_memory = 32ull << 20;
    ServerConfig sc;
    sc.max_queue = 1;
    LoopbackServer s(ec, sc);
    ASSERT_GT(s.port, 0);
    const std::string long_req =
        http_post("/v1/completions", R"({"prompt":"x","max_tokens":3000,"ignore_eos":true})");
    std::vector<int> socks;
    for (int i = 0; i < 2; ++i) {
        socks.push_back(raw_connect(s.port));
        raw_send(socks.back(), long_req);
    }
    // Both admitted (one running, one queued) before the third arrives, however slow the machine.
    auto in_flight = [&] {
        RawResponse m = raw_request(s.port, "GET /metrics HTTP/1.1\r\n\r\n");
        const size_t p = m.body.find("\ngdn_requests_in_flight ");
        return p == std::string::npos ? -1.0 : std::stod(m.body.substr(p + 24));
    };
    for (int i = 0; i < 200 && in_flight() < 2; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(in_flight(), 2.0);
    RawResponse r = raw_request(s.port, long_req);
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_EQ(r.headers["retry-after"], "1");
    EXPECT_NE(r.body.find("at capacity"), std::string::npos);
    for (int fd : socks) ::close(fd);
    // Once the two leave (aborted), the server admits again.
    bool ok = false;
    for (int i = 0; i < 50 && !ok; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        ok = raw_request(s.port, http_post("/v1/completions", R"({"prompt":"x","max_tokens":1})")).status ==
             200;
    }
    EXPECT_TRUE(ok);
}

}  // namespace
