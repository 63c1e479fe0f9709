// A deliberately low-level HTTP/1.1 client for the hostility tests: raw sockets, so a test can send
// exactly the bytes an attacker would (half a head, a drip of header lines, a huge chunked body,
// pipelined requests) and read back exactly what the server answered.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

namespace gdn::test {

inline double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A blocking loopback connection; -1 on failure.
inline int raw_connect(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        ::close(fd);
        return -1;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

inline bool raw_send(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n <= 0) return false;
        bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
}

// Waits up to timeout_s for bytes; appends them to *buf. Returns false on EOF, error or timeout.
inline bool raw_recv_some(int fd, std::string* buf, double timeout_s) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return false;
    char tmp[65536];
    const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf->append(tmp, static_cast<size_t>(n));
    return true;
}

// True when the server closed the connection (EOF or reset) within timeout_s; bytes before are dropped.
inline bool raw_closed_within(int fd, double timeout_s) {
    const double end = now_seconds() + timeout_s;
    while (now_seconds() < end) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        char tmp[65536];
        const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
        if (n <= 0) return true;
    }
    return false;
}

struct RawResponse {
    int status = 0;                              // 0: no complete response (closed or timed out)
    std::map<std::string, std::string> headers;  // names lower-cased
    std::string body;                            // de-chunked
};

// Reads one response from fd (and any bytes already in *buf); leaves what follows it in *buf.
inline RawResponse raw_read_response(int fd, std::string* buf, double timeout_s = 10) {
    RawResponse r;
    const double end = now_seconds() + timeout_s;
    auto need = [&](auto ready) {
        while (!ready()) {
            if (now_seconds() > end || !raw_recv_some(fd, buf, end - now_seconds())) return false;
        }
        return true;
    };
    size_t he = 0;
    if (!need([&] { return (he = buf->find("\r\n\r\n")) != std::string::npos; })) return r;
    const std::string head = buf->substr(0, he);
    buf->erase(0, he + 4);
    size_t eol = head.find("\r\n");
    const std::string status_line = head.substr(0, eol);
    if (status_line.size() < 12) return r;
    const int status = std::atoi(status_line.c_str() + 9);
    while (eol != std::string::npos && eol < head.size()) {
        const size_t next = head.find("\r\n", eol + 2);
        const std::string line =
            head.substr(eol + 2, next == std::string::npos ? std::string::npos : next - eol - 2);
        const size_t c = line.find(':');
        if (c != std::string::npos) {
            std::string k = line.substr(0, c), v = line.substr(c + 1);
            for (char& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            while (!v.empty() && v.front() == ' ') v.erase(0, 1);
            r.headers[k] = v;
        }
        eol = next;
    }
    if (status == 100) return raw_read_response(fd, buf, end - now_seconds());
    if (r.headers.count("transfer-encoding")) {
        while (true) {
            size_t le = 0;
            if (!need([&] { return (le = buf->find("\r\n")) != std::string::npos; })) return r;
            const size_t n = std::strtoul(buf->substr(0, le).c_str(), nullptr, 16);
            if (!need([&] { return buf->size() >= le + 2 + n + 2; })) return r;
            r.body += buf->substr(le + 2, n);
            buf->erase(0, le + 2 + n + 2);
            if (n == 0) break;
        }
    } else {
        const size_t n = r.headers.count("content-length") ? std::stoul(r.headers["content-length"]) : 0;
        if (!need([&] { return buf->size() >= n; })) return r;
        r.body = buf->substr(0, n);
        buf->erase(0, n);
    }
    r.status = status;
    return r;
}

// One request on a fresh connection; the response (status 0 if none came).
inline RawResponse raw_request(int port, const std::string& bytes, double timeout_s = 10) {
    const int fd = raw_connect(port);
    if (fd < 0) return {};
    std::string buf;
    RawResponse r;
    if (raw_send(fd, bytes)) r = raw_read_response(fd, &buf, timeout_s);
    ::close(fd);
    return r;
}

inline std::string http_post(const std::string& path, const std::string& body,
                             const std::string& extra_headers = "") {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

// The value of the unlabelled /metrics sample `name` (its sample line, not # HELP); -1 when absent.
inline double raw_metric(int port, const std::string& name, const std::string& extra_headers = "") {
    const RawResponse r = raw_request(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n" + extra_headers + "\r\n");
    const size_t p = r.body.find("\n" + name + " ");
    return p == std::string::npos ? -1 : std::stod(r.body.substr(p + name.size() + 2));
}

}  // namespace gdn::test
