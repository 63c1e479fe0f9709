// Logging and invariant checks. Log lines go to stderr so stdout stays machine-readable.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace gdn {

enum class LogLevel { DEBUG = 0, INFO = 1, WARN = 2, ERROR = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* fmt = nullptr, ...);

std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace gdn

#define GDN_LOG_DEBUG(...) ::gdn::log_message(::gdn::LogLevel::DEBUG, __VA_ARGS__)
#define GDN_LOG_INFO(...) ::gdn::log_message(::gdn::LogLevel::INFO, __VA_ARGS__)
#define GDN_LOG_WARN(...) ::gdn::log_message(::gdn::LogLevel::WARN, __VA_ARGS__)
#define GDN_LOG_ERROR(...) ::gdn::log_message(::gdn::LogLevel::ERROR, __VA_ARGS__)

// Aborts with file:line on a broken invariant (a bug, never user input).
#define GDN_CHECK(cond, ...)                                                                             \
    do {                                                                                                 \
        if (__builtin_expect(!(cond), 0)) ::gdn::check_failed(__FILE__, __LINE__, #cond, ##__VA_ARGS__); \
    } while (0)
