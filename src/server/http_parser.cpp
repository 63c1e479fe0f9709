#include "server/http_parser.h"

#include <algorithm>
#include <cctype>

namespace gdn {

namespace {

std::string lower(std::string_view s) {
    std::string r(s);
    for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return r;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// RFC 9110 token characters (method and header names).
bool is_tchar(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

// Does a comma-separated header value hold `item` (case-insensitive)?
bool has_item(std::string_view value, std::string_view item) {
    while (!value.empty()) {
        const size_t c = value.find(',');
        if (lower(trim(value.substr(0, c))) == item) return true;
        if (c == std::string_view::npos) break;
        value.remove_prefix(c + 1);
    }
    return false;
}

constexpr size_t kMaxChunkLine = 1024;  // chunk size + extensions

}  // namespace

std::string_view HttpRequest::header(std::string_view lower_name) const {
    for (const auto& [k, v] : headers)
        if (k == lower_name) return v;
    return {};
}

void HttpParser::reset() {
    req_ = HttpRequest();
    state_ = State::NEED_MORE;
    phase_ = Phase::HEAD;
    head_bytes_ = 0;
    remaining_ = 0;
    started_ = false;
    head_reported_ = false;
    err_status_ = 0;
    err_msg_.clear();
}

HttpParser::State HttpParser::fail(int status, std::string msg) {
    err_status_ = status;
    err_msg_ = std::move(msg);
    phase_ = Phase::DONE;
    return state_ = State::ERROR;
}

bool HttpParser::next_line(std::string_view data, std::string_view* line) {
    const size_t nl = data.find('\n', pos_);
    if (nl == std::string_view::npos) return false;
    *line = data.substr(pos_, nl - pos_);
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    pos_ = nl + 1;
    return true;
}

// The request line: method, target (origin-form "/path?query", or absolute-form "http://host/path", which
// RFC 9112 §3.2.2 requires a server to accept: its path is the target's), and version.
HttpParser::State HttpParser::request_line(std::string_view line) {
    const size_t a = line.find(' '), b = a == std::string_view::npos ? a : line.find(' ', a + 1);
    if (b == std::string_view::npos || line.find(' ', b + 1) != std::string_view::npos)
        return fail(400, "malformed request line");
    const std::string_view method = line.substr(0, a), version = line.substr(b + 1);
    std::string_view target = line.substr(a + 1, b - a - 1);
    for (char c : target)
        if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return fail(400, "malformed request target");
    if (const std::string_view scheme = target.substr(0, target.find("://"));
        scheme.size() < target.size() && (lower(scheme) == "http" || lower(scheme) == "https")) {
        const std::string_view rest = target.substr(scheme.size() + 3);  // authority, then the path
        const size_t path = rest.find_first_of("/?");
        if (path == 0 || rest.empty()) return fail(400, "malformed request target (no host)");
        target = path == std::string_view::npos ? std::string_view("/") : rest.substr(path);
        if (target[0] == '?') return fail(400, "malformed request target (a query without a path)");
    }
    if (!is_token(method) || target.empty() || target[0] != '/') return fail(400, "malformed request line");
    if (version != "HTTP/1.1" && version != "HTTP/1.0")
        return fail(505, "only HTTP/1.0 and HTTP/1.1 are supported");
    req_.method = method;
    req_.target = target;
    const size_t q = target.find('?');
    req_.path = target.substr(0, q);
    req_.query = q == std::string_view::npos ? "" : target.substr(q + 1);
    req_.version_minor = version.back() - '0';
    return State::NEED_MORE;
}

// A header field line, or the empty line that ends the head.
HttpParser::State HttpParser::header_line(std::string_view line) {
    if (line.empty()) return finish_head();
    if (line[0] == ' ' || line[0] == '\t') return fail(400, "obsolete header line folding is not accepted");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
        return fail(400, "malformed header line");
    if (req_.headers.size() >= limits_.max_headers)
        return fail(431, "more than " + std::to_string(limits_.max_headers) + " header fields");
    req_.headers.emplace_back(lower(line.substr(0, colon)), std::string(trim(line.substr(colon + 1))));
    return State::NEED_MORE;
}

// A chunk-size line of a chunked body: the next chunk's size (0: the trailers follow).
HttpParser::State HttpParser::chunk_size_line(std::string_view line) {
    if (line.size() > kMaxChunkLine) return fail(400, "malformed chunked body (chunk size line too long)");
    const std::string_view hex = trim(line.substr(0, line.find(';')));
    uint64_t size = 0;
    bool ok = !hex.empty() && hex.size() <= 15;  // < 2^60: no overflow below
    for (char c : hex) {
        const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                      : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
                      : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                                  : -1;
        if (d < 0) ok = false;
        size = size * 16 + static_cast<uint64_t>(std::max(d, 0));
    }
    if (!ok) return fail(400, "malformed chunked body (bad chunk size)");
    if (size > limits_.max_body_bytes - req_.body.size())
        return fail(413, "the request body is too large (limit " + std::to_string(limits_.max_body_bytes) +
                             " bytes)");
    if (size == 0) {
        phase_ = Phase::TRAILERS;
    } else {
        remaining_ = size;
        phase_ = Phase::CHUNK_DATA;
    }
    return State::NEED_MORE;
}

HttpParser::State HttpParser::feed(std::string_view data, size_t* used) {
    pos_ = 0;
    *used = 0;
    if (state_ == State::DONE || state_ == State::ERROR) return state_;
    if (!data.empty()) started_ = true;
    State s = State::NEED_MORE;
    while (s == State::NEED_MORE) {
        std::string_view line;
        switch (phase_) {
            case Phase::HEAD:
            case Phase::TRAILERS: {
                const size_t before = pos_;
                if (!next_line(data, &line)) {
                    if (head_bytes_ + (data.size() - pos_) > limits_.max_header_bytes)
                        s = fail(431, "the request head is too large (limit " +
                                          std::to_string(limits_.max_header_bytes) + " bytes)");
                    goto out;
                }
                head_bytes_ += pos_ - before;
                if (head_bytes_ > limits_.max_header_bytes) {
                    s = fail(431, "the request head is too large (limit " +
                                      std::to_string(limits_.max_header_bytes) + " bytes)");
                    break;
                }
                if (phase_ == Phase::TRAILERS) {
                    if (line.empty()) {
                        phase_ = Phase::DONE;
                        s = state_ = State::DONE;
                    }
                    break;  // trailer fields are read and dropped
                }
                if (req_.method.empty()) {
                    if (!line.empty()) s = request_line(line);  // RFC 9112: empty lines before it are ignored
                    break;
                }
                s = header_line(line);
                break;
            }
            case Phase::BODY_LENGTH:
            case Phase::CHUNK_DATA: {
                const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, data.size() - pos_));
                req_.body.append(data.data() + pos_, n);
                pos_ += n;
                remaining_ -= n;
                if (remaining_ > 0) goto out;
                if (phase_ == Phase::BODY_LENGTH) {
                    phase_ = Phase::DONE;
                    s = state_ = State::DONE;
                } else {
                    phase_ = Phase::CHUNK_DATA_END;
                }
                break;
            }
            case Phase::CHUNK_DATA_END:
            case Phase::CHUNK_SIZE: {
                if (!next_line(data, &line)) {
                    if (data.size() - pos_ > kMaxChunkLine)
                        s = fail(400, "malformed chunked body (chunk size line too long)");
                    goto out;
                }
                if (phase_ == Phase::CHUNK_DATA_END) {
                    if (!line.empty())
                        s = fail(400, "malformed chunked body (no CRLF after chunk data)");
                    else
                        phase_ = Phase::CHUNK_SIZE;
                    break;
                }
                s = chunk_size_line(line);
                break;
            }
            case Phase::DONE:
                s = state_;
                break;
        }
        if (s == State::HEAD_DONE) break;
    }
out:
    *used = pos_;
    if (s == State::NEED_MORE && pos_ == 0 && data.empty()) return state_;
    if (s != State::HEAD_DONE) state_ = s;
    return s;
}

HttpParser::State HttpParser::finish_head() {
    if (req_.method.empty()) return fail(400, "malformed request line");
    const std::string_view te = req_.header("transfer-encoding"), conn = req_.header("connection");
    std::string_view cl;
    for (const auto& [k, v] : req_.headers) {
        if (k != "content-length") continue;
        if (!cl.empty() && cl != v) return fail(400, "conflicting Content-Length headers");
        cl = v;
    }
    req_.keep_alive = req_.version_minor == 1 ? !has_item(conn, "close") : has_item(conn, "keep-alive");
    req_.expect_continue = lower(req_.header("expect")) == "100-continue";
    if (!te.empty()) {
        // A request with both is a smuggling attempt (RFC 9112 6.1): refuse it rather than guess.
        if (!cl.empty())
            return fail(400, "a request must not carry both Transfer-Encoding and Content-Length");
        if (lower(te) != "chunked")
            return fail(501, "unsupported Transfer-Encoding '" + std::string(te) + "' (only chunked)");
        phase_ = Phase::CHUNK_SIZE;
    } else if (!cl.empty()) {
        uint64_t n = 0;
        if (cl.size() > 18 || !std::all_of(cl.begin(), cl.end(), [](char c) { return c >= '0' && c <= '9'; }))
            return fail(400, "malformed Content-Length");
        for (char c : cl) n = n * 10 + static_cast<uint64_t>(c - '0');
        if (n > limits_.max_body_bytes)
            return fail(413, "the request body is too large (limit " +
                                 std::to_string(limits_.max_body_bytes) + " bytes)");
        remaining_ = n;
        req_.body.reserve(static_cast<size_t>(n));
        phase_ = Phase::BODY_LENGTH;
        if (n == 0) {
            phase_ = Phase::DONE;
            return state_ = State::DONE;
        }
    } else {
        phase_ = Phase::DONE;
        return state_ = State::DONE;  // no body
    }
    if (head_reported_) return State::NEED_MORE;
    head_reported_ = true;
    return State::HEAD_DONE;
}

const char* http_reason(int status) {
    switch (status) {
        case 100:
            return "Continue";
        case 200:
            return "OK";
        case 204:
            return "No Content";
        case 400:
            return "Bad Request";
        case 401:
            return "Unauthorized";
        case 404:
            return "Not Found";
        case 405:
            return "Method Not Allowed";
        case 408:
            return "Request Timeout";
        case 413:
            return "Payload Too Large";
        case 429:
            return "Too Many Requests";
        case 431:
            return "Request Header Fields Too Large";
        case 500:
            return "Internal Server Error";
        case 501:
            return "Not Implemented";
        case 503:
            return "Service Unavailable";
        case 505:
            return "HTTP Version Not Supported";
        default:
            return "Unknown";
    }
}

}  // namespace gdn
