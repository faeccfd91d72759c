// Typed exceptions used inside Squeeze, and the SQZ_ENFORCE invariant macros. The C API turns
// them into sqzResult_t codes in exactly one place (src/api/api_guard.h). See docs/errors.md for
// the policy: bad input and remote failures are Errors with a user-facing sentence; broken
// invariants are InternalErrors.
#pragma once

#include <stdexcept>
#include <string>

#include "base/strings.h"

namespace squeeze {

enum class ErrorCode {
  kCuda = 1,
  kSystem = 2,
  kInternal = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemote = 6,
  kTimeout = 8,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// A failed system call: appends strerror(errno) to the message.
class SysError : public Error {
 public:
  SysError(const std::string& what, int err);
  int err() const { return err_; }

 private:
  int err_;
};

template <class... Args>
[[noreturn]] void raise(ErrorCode code, const Args&... args) {
  throw Error(code, strCat(args...));
}

}  // namespace squeeze

#define SQZ_ENFORCE(cond, ...)                                                           \
  do {                                                                                   \
    if (!(cond))                                                                         \
      ::squeeze::raise(::squeeze::ErrorCode::kInternal, __FILE__, ":", __LINE__,         \
                       ": internal check failed: " #cond ". " __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

#define SQZ_ENFORCE_EQ(a, b, ...)                                                          \
  do {                                                                                     \
    const auto& sqzA_ = (a);                                                               \
    const auto& sqzB_ = (b);                                                               \
    if (!(sqzA_ == sqzB_))                                                                 \
      ::squeeze::raise(::squeeze::ErrorCode::kInternal, __FILE__, ":", __LINE__,           \
                       ": internal check failed: " #a " == " #b " (", sqzA_, " vs ", sqzB_, \
                       "). " __VA_OPT__(, ) __VA_ARGS__);                                  \
  } while (0)
