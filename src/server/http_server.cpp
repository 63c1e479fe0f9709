#include "server/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/clock.h"
#include "core/log.h"

namespace gdn {

namespace {

constexpr uint64_t kListenTag = ~0ull, kWakeTag = ~0ull - 1;
constexpr double kLingerSeconds = 2.0;  // after an error answer: drain what the client still sends
constexpr size_t kLingerMaxBytes = 4u << 20;
constexpr size_t kReadBytes = 64 * 1024;
constexpr size_t kSmallRequestBytes = 64 * 1024;  // see worker_loop

// The I/O thread's mailbox: connection ids to poll again and finished handler results, with an
// eventfd to wake epoll. Shared with every Waker, so a waker that outlives the server is harmless.
struct Mailbox {
    int fd = -1;
    std::mutex mu;
    std::vector<uint64_t> woken;
    struct Done {
        uint64_t conn;
        HandlerResult result;
        size_t bytes;  // the request bytes the handler held (returned to the budget)
    };
    std::vector<Done> done;
    Mailbox() : fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
    ~Mailbox() {
        if (fd >= 0) ::close(fd);
    }
    void ring() {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
    }
    void wake(uint64_t conn) {
        {
            std::lock_guard<std::mutex> lock(mu);
            woken.push_back(conn);
        }
        ring();
    }
};

enum class ConnState {
    READING,    // waiting for (the rest of) a request
    WORKING,    // the request is with a worker
    WAITING,    // a Deferred has no head yet
    STREAMING,  // a chunked body is being produced
    LINGER,     // the answer is sent, the write side shut: draining input until the client closes
};

struct Conn {
    uint64_t id = 0;
    int fd = -1;
    ConnState state = ConnState::READING;
    std::string in;
    HttpParser parser;
    std::string out;
    size_t out_off = 0;
    bool keep_alive = true;
    bool close_after_write = false;
    bool peer_closed = false;  // EOF read: the client sends no more (it half-closed, or it is gone)
    bool reading_paused = false;
    bool interim_ok = true;  // the current request is HTTP/1.1: a 1xx may precede its answer
    bool parsing = false;    // inside process_input (a response completed inline must not re-enter it)
    bool head_only = false;  // the current request is a HEAD: its response goes without the body
    std::shared_ptr<Deferred> deferred;
    double t_request = 0;  // first byte of the current request
    double t_idle = 0;     // when the connection became idle (accept, or the last response done)
    double t_write = 0;    // last write progress while output is pending
    double linger_until = 0;
    size_t lingered = 0;
    size_t held = 0;  // request bytes counted in the budget
    explicit Conn(const HttpLimits& l) : parser(l) {}
    size_t pending() const { return out.size() - out_off; }
};

struct Task {
    uint64_t conn;
    HttpRequest req;
    const HttpHandler* handler;
    size_t bytes;  // the request's bytes (head + body) as the budget counted them
};

void set_nonblocking(int fd) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

std::string head_text(const HttpResponse& r, bool keep_alive, size_t content_length) {
    std::string h = "HTTP/1.1 " + std::to_string(r.status) + " " + http_reason(r.status) + "\r\n";
    if (!r.content_type.empty()) h += "Content-Type: " + r.content_type + "\r\n";
    for (const auto& [k, v] : r.headers) h += k + ": " + v + "\r\n";
    if (r.chunked)
        h += "Transfer-Encoding: chunked\r\n";
    else if (r.status != 204)  // RFC 9110 8.6: a 204 carries no Content-Length
        h += "Content-Length: " + std::to_string(content_length) + "\r\n";
    h += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    return h;
}

void append_chunk(std::string* out, const std::string& piece) {
    if (piece.empty()) return;
    char size[24];
    std::snprintf(size, sizeof(size), "%zx\r\n", piece.size());
    *out += size;
    *out += piece;
    *out += "\r\n";
}

}  // namespace

struct HttpServer::Impl {
    HttpServerConfig cfg;
    struct Route {
        std::string method, path;
        HttpHandler handler;
        bool inline_on_io;
    };
    std::vector<Route> routes;
    std::function<HttpResponse(int, const std::string&)> error_body;
    int listen_fd = -1, ep = -1;
    int spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // see accept_all()
    std::shared_ptr<Mailbox> mail = std::make_shared<Mailbox>();
    std::atomic<bool> stopping{false};
    std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
    std::atomic<size_t> n_conns{0};
    uint64_t next_id = 1;
    size_t held_bytes = 0;  // I/O thread only

    // Worker pool.
    std::mutex tq_mu;
    std::condition_variable tq_cv;
    std::deque<Task> tasks;
    std::vector<std::thread> workers;

    HttpResponse error_response(int status, const std::string& msg) {
        if (error_body) return error_body(status, msg);
        HttpResponse r;
        r.status = status;
        r.content_type = "text/plain";
        r.body = msg + "\n";
        return r;
    }

    void worker_loop(bool small_only);
    HandlerResult call_handler(const HttpHandler& h, const HttpRequest& req, uint64_t conn);
    void loop();
    void accept_all();
    void on_readable(Conn& c);
    void on_peer_eof(Conn& c);
    void on_writable(Conn& c);
    void process_input(Conn& c);
    void dispatch(Conn& c, HttpRequest req);
    void install(Conn& c, HandlerResult r);
    void poll_deferred(Conn& c);
    void send_response(Conn& c, const HttpResponse& r);
    void send_error(Conn& c, int status, const std::string& msg);
    void response_done(Conn& c);
    void flush(Conn& c);
    void update_events(Conn& c);
    void close_conn(uint64_t id);
    void sweep(double now);
    void release_held(Conn& c) {
        held_bytes -= c.held;
        c.held = 0;
    }
    bool evict_for_new();
};

// Runs a handler with a waker for its connection; an exception is our bug: logged, answered 500.
HandlerResult HttpServer::Impl::call_handler(const HttpHandler& h, const HttpRequest& req, uint64_t conn) {
    std::weak_ptr<Mailbox> wm = mail;
    const Waker waker = [wm, conn] {
        if (auto m = wm.lock()) m->wake(conn);
    };
    try {
        return h(req, waker);
    } catch (const std::exception& e) {
        GDN_LOG_ERROR("http: handler for %s %s threw: %s", req.method.c_str(), req.path.c_str(), e.what());
    } catch (...) {
        GDN_LOG_ERROR("http: handler for %s %s threw a non-standard exception", req.method.c_str(),
                      req.path.c_str());
    }
    return error_response(500, "internal error (logged by the server)");
}

// `small_only`: this worker takes only requests of at most kSmallRequestBytes, so that a flood of
// huge prompts (each parsed and tokenized for up to a second) never leaves ordinary requests waiting
// for a worker (measured: a 16-token request waited up to 2.8 s behind four 8 MiB prompts without it).
void HttpServer::Impl::worker_loop(bool small_only) {
    while (true) {
        Task t;
        {
            std::unique_lock<std::mutex> lock(tq_mu);
            std::deque<Task>::iterator it;
            auto find = [&] {
                it = tasks.begin();
                if (small_only)
                    while (it != tasks.end() && it->bytes > kSmallRequestBytes) ++it;
                return it != tasks.end();
            };
            tq_cv.wait(lock, [&] { return stopping || find(); });
            if (!find()) {
                if (stopping) return;
                continue;
            }
            t = std::move(*it);
            tasks.erase(it);
        }
        const uint64_t conn = t.conn;
        HandlerResult result = call_handler(*t.handler, t.req, conn);
        t.req = HttpRequest();  // free the body before the I/O thread counts it returned
        {
            std::lock_guard<std::mutex> lock(mail->mu);
            mail->done.push_back({conn, std::move(result), t.bytes});
        }
        mail->ring();
    }
}

void HttpServer::Impl::update_events(Conn& c) {
    epoll_event ev{};
    ev.data.u64 = c.id;
    // After EOF the socket stays readable forever: only writes and errors (always reported) matter.
    ev.events = c.peer_closed ? 0 : EPOLLRDHUP;
    if (!c.reading_paused && !c.peer_closed) ev.events |= EPOLLIN;
    if (c.pending() > 0) ev.events |= EPOLLOUT;
    ::epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
}

void HttpServer::Impl::close_conn(uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    if (c.deferred) {
        c.deferred->abandon();
        c.deferred.reset();
    }
    release_held(c);
    ::epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    conns.erase(it);
    n_conns = conns.size();
    // A connection whose request is with a worker is dropped here; the worker's result finds no
    // connection and its Deferred (if any) is abandoned when it arrives.
}

bool HttpServer::Impl::evict_for_new() {
    // The victim: a lingering connection if any, else the one still sending its request or idle
    // between requests for the longest (a slow-header client ages; a served client is never evicted).
    Conn* victim = nullptr;
    double victim_since = 0;
    for (auto& [id, c] : conns) {
        if (c->state == ConnState::LINGER) {
            victim = c.get();
            break;
        }
        if (c->state != ConnState::READING) continue;
        const double since = c->parser.started() ? c->t_request : c->t_idle;
        if (!victim || since < victim_since) {
            victim = c.get();
            victim_since = since;
        }
    }
    if (!victim) return false;
    close_conn(victim->id);
    return true;
}

void HttpServer::Impl::accept_all() {
    while (true) {
        const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR) continue;
            if ((errno == EMFILE || errno == ENFILE) && spare_fd >= 0) {
                // Out of descriptors: accept with the spare one and close at once, so that the pending
                // connection does not keep the listening socket readable (a busy loop).
                ::close(spare_fd);
                const int drop = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
                if (drop >= 0) ::close(drop);
                spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
                GDN_LOG_WARN("http: out of file descriptors: a connection was refused");
                continue;
            }
            return;  // EAGAIN, or an aborted connection
        }
        if (conns.size() >= cfg.max_connections && !evict_for_new()) {
            static const char busy[] =
                "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: "
                "close\r\n\r\n";
            [[maybe_unused]] ssize_t n = ::send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL);
            ::close(fd);
            continue;
        }
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        auto c = std::make_unique<Conn>(cfg.limits);
        c->id = next_id++;
        c->fd = fd;
        c->t_idle = now_seconds();
        epoll_event ev{};
        ev.data.u64 = c->id;
        ev.events = EPOLLIN | EPOLLRDHUP;
        ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
        conns.emplace(c->id, std::move(c));
        n_conns = conns.size();
    }
}

void HttpServer::Impl::flush(Conn& c) {
    while (c.pending() > 0) {
        const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.pending(), MSG_NOSIGNAL);
        if (n > 0) {
            c.out_off += static_cast<size_t>(n);
            c.t_write = now_seconds();
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        close_conn(c.id);  // EPIPE / ECONNRESET: the client is gone
        return;
    }
    if (c.pending() == 0) {
        c.out.clear();
        c.out_off = 0;
        if (c.close_after_write && c.peer_closed) return close_conn(c.id);  // nothing left to drain
        if (c.close_after_write && c.state != ConnState::LINGER) {
            // Lingering close: shut our side, then drain what the client still sends for a moment, so
            // that an error answered before its body was read is not lost to a reset.
            ::shutdown(c.fd, SHUT_WR);
            c.state = ConnState::LINGER;
            c.linger_until = now_seconds() + kLingerSeconds;
            c.reading_paused = false;
            release_held(c);
        }
    } else if (c.out_off > (1u << 20)) {
        c.out.erase(0, c.out_off);
        c.out_off = 0;
    }
    update_events(c);
}

// Queues a response head (and a whole body, or a stream's first piece). The connection closes after
// the response when the request asked so, or the server is stopping (response_done decides).
void HttpServer::Impl::send_response(Conn& c, const HttpResponse& r) {
    if (stopping) c.keep_alive = false;
    if (c.pending() == 0) c.t_write = now_seconds();
    c.out += head_text(r, c.keep_alive, r.body.size());
    if (c.head_only) return;  // RFC 9110 9.3.2: the GET response's head, no body
    if (r.chunked)
        append_chunk(&c.out, r.body);
    else
        c.out += r.body;
}

// Answers an error the connection cannot recover from (a broken or refused request): the answer,
// then a lingering close.
void HttpServer::Impl::send_error(Conn& c, int status, const std::string& msg) {
    c.keep_alive = false;
    if (c.deferred) {
        c.deferred->abandon();
        c.deferred.reset();
    }
    send_response(c, error_response(status, msg));
    response_done(c);
}

void HttpServer::Impl::response_done(Conn& c) {
    c.head_only = false;
    c.deferred.reset();
    release_held(c);
    if (!c.keep_alive || stopping) {
        c.close_after_write = true;
        c.state = ConnState::WORKING;
        flush(c);
        return;
    }
    c.state = ConnState::READING;
    c.parser.reset();
    c.t_idle = now_seconds();
    c.reading_paused = false;
    const uint64_t id = c.id;
    flush(c);
    if (conns.count(id) && !c.in.empty())
        process_input(c);  // a pipelined request already arrived
    else if (conns.count(id) && c.peer_closed)
        close_conn(id);
}

void HttpServer::Impl::install(Conn& c, HandlerResult r) {
    if (!r.deferred) {
        send_response(c, r.response);
        response_done(c);
        return;
    }
    c.deferred = std::move(r.deferred);
    c.state = ConnState::WAITING;
    poll_deferred(c);
}

void HttpServer::Impl::poll_deferred(Conn& c) {
    if (c.state == ConnState::WAITING) {
        std::optional<HttpResponse> h = c.deferred->head();
        if (!h) return;
        send_response(c, *h);
        if (!h->chunked || c.head_only) return response_done(c);
        c.state = ConnState::STREAMING;
    }
    if (c.state != ConnState::STREAMING) return;
    while (c.pending() < cfg.max_pending_output) {
        std::string piece;
        const bool end = c.deferred->next_chunk(&piece);
        if (c.pending() == 0) c.t_write = now_seconds();
        append_chunk(&c.out, piece);
        if (end) {
            c.out += "0\r\n\r\n";
            return response_done(c);
        }
        if (piece.empty()) break;
    }
    flush(c);
}

void HttpServer::Impl::dispatch(Conn& c, HttpRequest req) {
    c.keep_alive = req.keep_alive && !c.peer_closed;
    c.interim_ok = req.version_minor >= 1;
    // HEAD runs the path's GET route and answers its head only; OPTIONS answers which methods the path
    // takes (RFC 9110 9.3.2, 9.3.7).
    const bool head = req.method == "HEAD";
    const Route* found = nullptr;
    std::string allow;
    bool has_get = false;
    for (const Route& r : routes) {
        if (r.path != req.path) continue;
        if (r.method == req.method || (head && r.method == "GET")) found = &r;
        has_get |= r.method == "GET";
        allow += (allow.empty() ? "" : ", ") + r.method;
    }
    if (!allow.empty()) allow += std::string(has_get ? ", HEAD" : "") + ", OPTIONS";
    if (!found && req.method == "OPTIONS" && !allow.empty()) {
        HttpResponse r;
        r.status = 204;
        r.content_type.clear();
        r.headers.emplace_back("Allow", allow);
        send_response(c, r);
        return response_done(c);
    }
    c.head_only = head;  // its answer, an error too, goes without a body
    if (!found) {
        if (allow.empty())
            return send_response(c, error_response(404, "no such endpoint: " + req.path)), response_done(c);
        HttpResponse r = error_response(
            405, "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")");
        r.headers.emplace_back("Allow", allow);
        send_response(c, r);
        return response_done(c);
    }
    if (found->inline_on_io) return install(c, call_handler(found->handler, req, c.id));
    c.state = ConnState::WORKING;
    {
        std::lock_guard<std::mutex> lock(tq_mu);
        tasks.push_back({c.id, std::move(req), &found->handler, c.held});
    }
    c.held = 0;          // the worker holds the bytes now; they come back with its result
    tq_cv.notify_all();  // not one: the woken worker might be the small-only one
}

void HttpServer::Impl::process_input(Conn& c) {
    if (c.parsing) return;  // the caller's loop goes on with the next pipelined request
    const uint64_t id = c.id;
    c.parsing = true;
    // A client that pipelines requests but reads no answers gets no more parsed once max_pending_output
    // bytes of answers wait (on_writable resumes).
    while (c.state == ConnState::READING && !c.in.empty() && c.pending() < cfg.max_pending_output) {
        if (!c.parser.started()) c.t_request = now_seconds();
        size_t used = 0;
        const HttpParser::State st = c.parser.feed(c.in, &used);
        c.in.erase(0, used);
        // Budget: the request's stored bytes (decoded body) + what is still unparsed.
        const size_t now_held = c.parser.request().body.size() + c.in.size();
        const size_t grew = now_held > c.held ? now_held - c.held : 0;
        if (grew > 0) {
            if (held_bytes + grew > cfg.max_buffered_bytes) {
                GDN_LOG_WARN(
                    "http: request bytes of all connections over the budget of %zu MiB: refusing one",
                    cfg.max_buffered_bytes >> 20);
                c.parsing = false;
                return send_error(c, 503, "the server holds too many large requests right now; retry later");
            }
            held_bytes += grew;
            c.held += grew;
        }
        if (st == HttpParser::State::ERROR) {
            c.parsing = false;
            return send_error(c, c.parser.error_status(), c.parser.error_message());
        }
        if (st == HttpParser::State::HEAD_DONE) {
            if (c.parser.request().expect_continue) {
                c.out += "HTTP/1.1 100 Continue\r\n\r\n";
                flush(c);
                if (!conns.count(id)) return;
            }
            continue;
        }
        if (st == HttpParser::State::DONE) {
            HttpRequest req = std::move(c.parser.request());
            c.parser.reset();
            dispatch(c, std::move(req));
            if (!conns.count(id)) return;
            continue;
        }
        break;  // NEED_MORE
    }
    if (!conns.count(id)) return;
    c.parsing = false;
    // While a request is being answered, a pipelining client's next bytes wait in `in`; past a head's
    // worth we stop reading (EPOLLRDHUP still reports a close). Likewise while its answers are not read.
    const bool pause = c.state != ConnState::LINGER &&
                       ((c.state != ConnState::READING && c.in.size() > cfg.limits.max_header_bytes) ||
                        (c.state == ConnState::READING && c.pending() >= cfg.max_pending_output));
    if (pause != c.reading_paused) {
        c.reading_paused = pause;
        update_events(c);
    }
}

void HttpServer::Impl::on_readable(Conn& c) {
    const uint64_t id = c.id;
    char buf[kReadBytes];
    while (!c.reading_paused) {
        const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
        if (n > 0) {
            if (c.state == ConnState::LINGER) {
                c.lingered += static_cast<size_t>(n);
                if (c.lingered > kLingerMaxBytes) return close_conn(id);
                continue;
            }
            c.in.append(buf, static_cast<size_t>(n));
            if (c.state == ConnState::READING) {
                process_input(c);
                if (!conns.count(id)) return;
            } else if (c.in.size() > cfg.limits.max_header_bytes) {
                c.reading_paused = true;
                update_events(c);
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0 || c.state == ConnState::LINGER) return close_conn(id);  // reset, or done draining
        return on_peer_eof(c);
    }
}

// The client sends no more. TCP cannot tell a half-close (shutdown(SHUT_WR), as `nc -N` and some proxies
// do after a request; HTTP allows it) from a client that is gone, until we send: a closed socket answers
// data with a reset. So a request being answered is answered, then the connection closes; and when its
// answer has not started, an HTTP/1.1 client gets an interim "100 Continue" at once (RFC 9110 15.2: a
// client parses 1xx responses it did not ask for), whose reset (EPOLLERR) abandons the request of a
// client that left now instead of after its request ran to the end. A streamed answer probes with its
// next chunk. Mid-request or between requests, EOF ends the connection (after the last answer drains).
void HttpServer::Impl::on_peer_eof(Conn& c) {
    c.peer_closed = true;
    c.keep_alive = false;
    const bool answering =
        c.state == ConnState::WORKING || c.state == ConnState::WAITING || c.state == ConnState::STREAMING;
    if (!answering && (c.state != ConnState::READING || c.parser.started() || c.pending() == 0))
        return close_conn(c.id);
    if (answering && c.state != ConnState::STREAMING && c.interim_ok) {
        c.out += "HTTP/1.1 100 Continue\r\n\r\n";
        return flush(c);
    }
    update_events(c);
}

void HttpServer::Impl::on_writable(Conn& c) {
    const uint64_t id = c.id;
    flush(c);
    if (!conns.count(id)) return;
    if (c.state == ConnState::READING && c.pending() < cfg.max_pending_output &&
        (c.reading_paused || !c.in.empty())) {
        c.reading_paused = false;  // the client reads its answers again: parse on
        process_input(c);
        if (!conns.count(id)) return;
        update_events(c);
    }
    if (c.state == ConnState::STREAMING && c.pending() < cfg.max_pending_output) poll_deferred(c);
    if (conns.count(id) && c.pending() == 0 && c.peer_closed && c.state == ConnState::READING) close_conn(id);
}

void HttpServer::Impl::sweep(double now) {
    std::vector<std::pair<uint64_t, int>> expired;  // id, status (0: close silently)
    for (auto& [id, cp] : conns) {
        Conn& c = *cp;
        if (c.pending() > 0 && now - c.t_write > cfg.write_timeout_s)
            expired.emplace_back(id, 0);
        else if (c.state == ConnState::LINGER && now > c.linger_until)
            expired.emplace_back(id, 0);
        else if (c.state == ConnState::READING && c.pending() == 0) {
            if (!c.parser.started()) {
                if (now - c.t_idle > cfg.idle_timeout_s) expired.emplace_back(id, 0);
            } else if (now - c.t_request > cfg.request_timeout_s ||
                       (!c.parser.head_complete() && now - c.t_request > cfg.header_timeout_s)) {
                expired.emplace_back(id, 408);
            }
        }
    }
    for (auto [id, status] : expired) {
        auto it = conns.find(id);
        if (it == conns.end()) continue;
        if (status == 0)
            close_conn(id);
        else
            send_error(*it->second, status, "the request was not received in time");
    }
}

void HttpServer::Impl::loop() {
    epoll_event evs[256];
    double last_sweep = now_seconds();
    while (!stopping) {
        const int n = ::epoll_wait(ep, evs, 256, 250);
        for (int i = 0; i < n; ++i) {
            const uint64_t tag = evs[i].data.u64;
            if (tag == kListenTag) {
                accept_all();
                continue;
            }
            if (tag == kWakeTag) {
                uint64_t v;
                [[maybe_unused]] ssize_t r = ::read(mail->fd, &v, sizeof(v));
                continue;
            }
            auto it = conns.find(tag);
            if (it == conns.end()) continue;
            Conn& c = *it->second;
            const uint32_t e = evs[i].events;
            if (e & EPOLLOUT) {
                on_writable(c);
                if (!conns.count(tag)) continue;
            }
            if (e & EPOLLERR) {
                close_conn(tag);  // reset by the peer
                continue;
            }
            if (e & (EPOLLIN | EPOLLHUP)) {
                on_readable(c);
                if (!conns.count(tag)) continue;
            }
            if ((e & EPOLLRDHUP) && c.reading_paused) {
                // Peer closed while we were not reading: it can take no answer.
                close_conn(tag);
            }
        }
        // Results of workers and wakes from producers.
        std::vector<Mailbox::Done> done;
        std::vector<uint64_t> woken;
        {
            std::lock_guard<std::mutex> lock(mail->mu);
            done.swap(mail->done);
            woken.swap(mail->woken);
        }
        for (auto& d : done) {
            held_bytes -= d.bytes;
            auto it = conns.find(d.conn);
            if (it == conns.end()) {
                if (d.result.deferred) d.result.deferred->abandon();
                continue;
            }
            install(*it->second, std::move(d.result));
        }
        for (uint64_t id : woken) {
            auto it = conns.find(id);
            if (it == conns.end()) continue;
            Conn& c = *it->second;
            if ((c.state == ConnState::WAITING || c.state == ConnState::STREAMING) && c.deferred)
                poll_deferred(c);
        }
        const double t = now_seconds();
        if (t - last_sweep > 0.25) {
            sweep(t);
            last_sweep = t;
        }
    }
}

HttpServer::HttpServer(HttpServerConfig cfg) : impl_(std::make_unique<Impl>()) {
    impl_->cfg = std::move(cfg);
}

HttpServer::~HttpServer() {
    stop();
    if (impl_->spare_fd >= 0) ::close(impl_->spare_fd);
    if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
    if (impl_->ep >= 0) ::close(impl_->ep);
}

void HttpServer::route(const std::string& method, const std::string& path, HttpHandler h, bool inline_on_io) {
    impl_->routes.push_back({method, path, std::move(h), inline_on_io});
}

void HttpServer::set_error_body(std::function<HttpResponse(int, const std::string&)> f) {
    impl_->error_body = std::move(f);
}

size_t HttpServer::connections() const {
    return impl_->n_conns;
}

Result<int> HttpServer::bind(const std::string& host, int port) {
    // Every connection is a descriptor: raise the soft limit to the hard one, and keep the connection
    // cap below it (with room for the model's files and the engine).
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            ::setrlimit(RLIMIT_NOFILE, &rl);
            ::getrlimit(RLIMIT_NOFILE, &rl);
        }
        const size_t room = rl.rlim_cur > 128 ? static_cast<size_t>(rl.rlim_cur) - 128 : 16;
        if (impl_->cfg.max_connections > room) {
            GDN_LOG_WARN("http: %zu connections need more descriptors than the limit of %llu: capped at %zu",
                         impl_->cfg.max_connections, (unsigned long long)rl.rlim_cur, room);
            impl_->cfg.max_connections = room;
        }
    }
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    const std::string ps = std::to_string(port);
    if (int rc = ::getaddrinfo(host.c_str(), ps.c_str(), &hints, &res); rc != 0)
        return Status::error("cannot resolve host '" + host + "': " + ::gai_strerror(rc));
    std::string why = "no address";
    int fd = -1;
    for (addrinfo* a = res; a; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) break;
        why = std::strerror(errno);
        ::close(fd);
        fd = -1;
    }
    ::freeaddrinfo(res);
    if (fd < 0) return Status::error("cannot bind " + host + ":" + ps + " (" + why + ")");
    set_nonblocking(fd);
    sockaddr_storage sa{};
    socklen_t len = sizeof(sa);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    const int bound = sa.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port)
                                               : ntohs(reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
    impl_->listen_fd = fd;
    return bound;
}

void HttpServer::run() {
    Impl& im = *impl_;
    GDN_CHECK(im.listen_fd >= 0);
    im.ep = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenTag;
    ::epoll_ctl(im.ep, EPOLL_CTL_ADD, im.listen_fd, &ev);
    ev.data.u64 = kWakeTag;
    ::epoll_ctl(im.ep, EPOLL_CTL_ADD, im.mail->fd, &ev);
    const int n_workers = std::max(1, im.cfg.workers);
    for (int i = 0; i < n_workers; ++i)
        im.workers.emplace_back([&im, small = n_workers > 1 && i == 0] { im.worker_loop(small); });
    im.loop();
    im.tq_cv.notify_all();
    for (auto& w : im.workers) w.join();
    im.workers.clear();
    std::vector<uint64_t> ids;
    for (auto& [id, c] : im.conns) ids.push_back(id);
    for (uint64_t id : ids) im.close_conn(id);
    for (auto& d : im.mail->done)
        if (d.result.deferred) d.result.deferred->abandon();
    im.mail->done.clear();
    ::close(im.listen_fd);
    im.listen_fd = -1;
}

void HttpServer::stop() {
    impl_->stopping = true;
    impl_->tq_cv.notify_all();
    impl_->mail->ring();
}

}  // namespace gdn
