// Incremental HTTP/1.x request parser with hard limits. The server feeds it whatever bytes arrived;
// it says when a whole request (head + body, Content-Length or chunked) is there, or which error to
// answer. Every size it accepts is bounded before the bytes are stored, whatever the transfer encoding:
// a request can never make the server hold more than max_header_bytes + max_body_bytes of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gdn {

struct HttpLimits {
    size_t max_header_bytes = 64 * 1024;  // request line + headers (+ chunked trailers)
    size_t max_headers = 100;
    size_t max_body_bytes = 8u << 20;  // after de-chunking
};

struct HttpRequest {
    std::string method, target, path, query;                   // target = path[?query]
    int version_minor = 1;                                     // HTTP/1.<minor>
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
    std::string body;
    bool keep_alive = true;        // HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with keep-alive
    bool expect_continue = false;  // "Expect: 100-continue"
    // The first value of a header (name in lower case), or "" when absent.
    std::string_view header(std::string_view lower_name) const;
};

class HttpParser {
  public:
    enum class State {
        NEED_MORE,  // feed more bytes
        HEAD_DONE,  // the head is parsed and the body is still to come (once per request: a chance to
                    // answer "100 Continue" or refuse early); keep feeding
        DONE,       // request() is complete; consumed() bytes of the input belong to it
        ERROR,      // error_status() / error_message() say what to answer; the connection must close
    };
    explicit HttpParser(HttpLimits limits) : limits_(limits) {}

    // Parses from `data` (the bytes received and not yet consumed); *used says how many it consumed,
    // which the caller drops from its buffer at once (a body is copied out as it is decoded, so the raw
    // chunked bytes are never held whole). Returns as soon as the state changes; after DONE the next
    // request starts with reset().
    State feed(std::string_view data, size_t* used);
    void reset();

    State state() const { return state_; }
    const HttpRequest& request() const { return req_; }
    HttpRequest& request() { return req_; }
    int error_status() const { return err_status_; }
    const std::string& error_message() const { return err_msg_; }
    // True once any byte of a request was seen (a connection idle between requests has none).
    bool started() const { return started_; }
    // True once the request line and every header field are in (the head deadline ends here).
    bool head_complete() const { return phase_ != Phase::HEAD; }

  private:
    State fail(int status, std::string msg);
    State finish_head();
    // One line of the head or of a chunked body: NEED_MORE to go on, or what fail() / finish_head() said.
    State request_line(std::string_view line);
    State header_line(std::string_view line);
    State chunk_size_line(std::string_view line);
    // The next line of data from pos_ (without CR LF), or false when it is not complete yet.
    bool next_line(std::string_view data, std::string_view* line);

    HttpLimits limits_;
    HttpRequest req_;
    State state_ = State::NEED_MORE;
    enum class Phase {
        HEAD,
        BODY_LENGTH,
        CHUNK_SIZE,
        CHUNK_DATA,
        CHUNK_DATA_END,
        TRAILERS,
        DONE
    } phase_ = Phase::HEAD;
    size_t pos_ = 0;          // bytes of the current feed() consumed
    size_t head_bytes_ = 0;   // bytes of head (and trailers) consumed
    uint64_t remaining_ = 0;  // body or chunk bytes still to read
    bool started_ = false;
    bool head_reported_ = false;
    int err_status_ = 0;
    std::string err_msg_;
};

// The reason phrase of a status code ("Not Found").
const char* http_reason(int status);

}  // namespace gdn
