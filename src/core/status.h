// Status / Result<T>: errors a user can cause (bad file, bad request, out of cache) travel as values.
// Broken invariants are not errors but bugs: they abort through GDN_CHECK (log.h).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace gdn {

class Status {
  public:
    Status() = default;
    static Status ok() { return Status(); }
    static Status error(std::string message) {
        Status s;
        s.message_ = std::move(message);
        s.ok_ = false;
        return s;
    }
    bool is_ok() const { return ok_; }
    explicit operator bool() const { return ok_; }
    const std::string& message() const { return message_; }

  private:
    bool ok_ = true;
    std::string message_;
};

template <typename T>
class Result {
  public:
    Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
    Result(Status status) : v_(std::move(status)) {}  // NOLINT: must be an error status
    bool is_ok() const { return std::holds_alternative<T>(v_); }
    explicit operator bool() const { return is_ok(); }
    T& value() { return std::get<T>(v_); }
    const T& value() const { return std::get<T>(v_); }
    T& operator*() { return value(); }
    T* operator->() { return &value(); }
    Status status() const { return is_ok() ? Status::ok() : std::get<Status>(v_); }
    const std::string& message() const {
        static const std::string empty;
        return is_ok() ? empty : std::get<Status>(v_).message();
    }

  private:
    std::variant<T, Status> v_;
};

}  // namespace gdn

// Propagate an error Status/Result from an expression returning Status.
#define GDN_RETURN_IF_ERROR(expr)     \
    do {                              \
        ::gdn::Status _st = (expr);   \
        if (!_st.is_ok()) return _st; \
    } while (0)

#define GDN_CONCAT_INNER(a, b) a##b
#define GDN_CONCAT(a, b) GDN_CONCAT_INNER(a, b)
// auto x = GDN_TRY(result_expr);  — unwraps a Result<T> or returns its error Status.
#define GDN_ASSIGN_OR_RETURN(lhs, expr)                                                    \
    auto GDN_CONCAT(_res_, __LINE__) = (expr);                                             \
    if (!GDN_CONCAT(_res_, __LINE__).is_ok()) return GDN_CONCAT(_res_, __LINE__).status(); \
    lhs = std::move(GDN_CONCAT(_res_, __LINE__).value())
