// Status and Result: how every layer inside gradwire reports failure.
// The C ABI turns a Status into a gw_result_t plus the thread-local message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "gradwire/export.h"

namespace gw {

// Values match gw_result_t in gradwire.h one for one.
enum class Code : int {
  kOk = 0,
  kInvalidArgument = 1,
  kInvalidMessage = 2,
  kUnsupported = 3,
  kOutOfMemory = 4,
  kBufferTooSmall = 5,
  kInternal = 6,
  kSystem = 7,
  kRemote = 8,
  kTimeout = 9,
  kAborted = 10,
  kCuda = 11,
  kInvalidUsage = 12,
  kRevoked = 13,
};

class GW_API Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return is_ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

  // Prefixes the message with where the failure was seen ("decode: ...").
  Status with_context(const std::string& where) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

GW_API const char* code_name(Code code);

inline Status invalid_argument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status invalid_message(std::string m) { return {Code::kInvalidMessage, std::move(m)}; }
inline Status unsupported(std::string m) { return {Code::kUnsupported, std::move(m)}; }
inline Status buffer_too_small(std::string m) { return {Code::kBufferTooSmall, std::move(m)}; }
inline Status internal_error(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status invalid_usage(std::string m) { return {Code::kInvalidUsage, std::move(m)}; }

// A value or the Status that explains why there is none.
template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design

  bool is_ok() const { return status_.is_ok(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace gw

#define GW_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::gw::Status gw_status_ = (expr);           \
    if (!gw_status_.is_ok()) return gw_status_; \
  } while (0)

#define GW_CONCAT_INNER_(a, b) a##b
#define GW_CONCAT_(a, b) GW_CONCAT_INNER_(a, b)
#define GW_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.is_ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
#define GW_ASSIGN_OR_RETURN(lhs, expr) GW_ASSIGN_OR_RETURN_IMPL_(GW_CONCAT_(gw_result_, __LINE__), lhs, expr)
