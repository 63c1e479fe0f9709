#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <mutex>

namespace gdn {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::INFO)};
std::mutex g_log_mutex;
const char* level_name(LogLevel l) {
    switch (l) {
        case LogLevel::DEBUG:
            return "debug";
        case LogLevel::INFO:
            return "info";
        case LogLevel::WARN:
            return "warn";
        case LogLevel::ERROR:
            return "error";
    }
    return "?";
}
}  // namespace

void set_log_level(LogLevel level) {
    g_level = static_cast<int>(level);
}
LogLevel log_level() {
    return static_cast<LogLevel>(g_level.load());
}

void log_message(LogLevel level, const char* fmt, ...) {
    if (static_cast<int>(level) < g_level.load()) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    std::lock_guard<std::mutex> lock(g_log_mutex);
    fprintf(stderr, "gdn %s: %s\n", level_name(level), buf);
}

void check_failed(const char* file, int line, const char* cond, const char* fmt, ...) {
    char buf[1024] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
    }
    fprintf(stderr, "gdn: check failed at %s:%d: %s %s\n", file, line, cond, buf);
    fflush(stderr);
    abort();
}

std::string strprintf(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(nullptr, 0, fmt, ap);
    va_end(ap);
    std::string s(n > 0 ? n : 0, '\0');
    if (n > 0) vsnprintf(s.data(), n + 1, fmt, ap2);
    va_end(ap2);
    return s;
}

}  // namespace gdn
