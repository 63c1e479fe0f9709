// An event-driven HTTP/1.1 server built for hostile networks. One I/O thread owns every socket (epoll):
// a connection costs a few hundred bytes and no thread, so slow or silent clients hold nothing that
// others need. Handlers run on a small worker pool (parsing, tokenizing) or, when marked cheap, inline
// on the I/O thread (/health stays instant under any load). A handler may answer later: it returns a
// Deferred that the I/O thread polls whenever its producer (the engine thread) calls the waker.
//
// What the server enforces for every request, whatever its transfer encoding (HttpLimits, HttpServerConfig):
//  - head size and field count, body size after de-chunking (431 / 413, then the connection closes);
//  - a deadline for the whole head and one for the whole request from its first byte (408): a client
//    that drips one header line every few seconds is cut off, not waited for;
//  - an idle deadline between keep-alive requests, a cap on connections (the oldest connection that is
//    still sending a request or idle is evicted for a new one) and a write deadline for clients that
//    stop reading their response;
//  - a budget for the request bytes held by all connections together (503 beyond it).
// Requests pipelined on one connection are answered in order. A client that closes its connection
// before its response is complete makes the server call Deferred::abandon() (the engine aborts it); one
// that half-closes after its request (shutdown(SHUT_WR)) is answered, then the connection closes.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/http_parser.h"

namespace gdn {

struct HttpResponse {
    int status = 200;
    std::string content_type = "application/json";
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    bool chunked =
        false;  // a streamed body (Deferred only): `body` is its first piece, next_chunk() the rest
};

// A response completed later, by other threads. All calls come from the I/O thread.
class Deferred {
  public:
    virtual ~Deferred() = default;
    // The response's head once it is known (called after each wake and once when the handler returns).
    virtual std::optional<HttpResponse> head() = 0;
    // Streamed responses: appends what is ready now to *out; true once the body is complete.
    virtual bool next_chunk(std::string* out) = 0;
    // The client left (connection closed, write deadline) before the response was complete.
    virtual void abandon() = 0;
};

// Thread-safe and cheap; harmless after the connection or the server is gone.
using Waker = std::function<void()>;

struct HandlerResult {
    HttpResponse response;
    std::shared_ptr<Deferred> deferred;                                     // when set, `response` is unused
    HandlerResult(HttpResponse r) : response(std::move(r)) {}               // NOLINT: implicit by design
    HandlerResult(std::shared_ptr<Deferred> d) : deferred(std::move(d)) {}  // NOLINT
};

using HttpHandler = std::function<HandlerResult(const HttpRequest&, const Waker&)>;

struct HttpServerConfig {
    HttpLimits limits;
    int workers = 4;  // handler threads (not per connection)
    size_t max_connections = 1024;
    double header_timeout_s = 10;            // first byte of a request -> its complete head
    double request_timeout_s = 60;           // first byte of a request -> its complete body
    double idle_timeout_s = 15;              // keep-alive connection without a request
    double write_timeout_s = 60;             // pending response bytes the client does not take
    size_t max_buffered_bytes = 256u << 20;  // request bytes of all connections (and handlers) together
    size_t max_pending_output = 1u << 20;    // a streamed response is not polled while more is unsent
};

class HttpServer {
  public:
    explicit HttpServer(HttpServerConfig cfg);
    ~HttpServer();
    // Routes are set before run(). `inline_on_io`: the handler is cheap and never blocks (runs on the
    // I/O thread, ahead of any queue).
    void route(const std::string& method, const std::string& path, HttpHandler h, bool inline_on_io = false);
    // The body of every error the server answers by itself (400, 404, 405, 408, 413, 431, 500, 503).
    void set_error_body(std::function<HttpResponse(int status, const std::string& message)> f);
    // Binds and listens; port 0 picks a free one. Returns the bound port.
    Result<int> bind(const std::string& host, int port);
    // Serves until stop(); returns after every connection is closed and every worker joined.
    void run();
    // Thread-safe (and async-signal-unsafe): run() returns soon after.
    void stop();
    // Open connections (for tests and /metrics).
    size_t connections() const;

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace gdn
