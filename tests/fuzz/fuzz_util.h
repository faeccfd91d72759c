// What the fuzz targets share: reading a fuzzer's input field by field, and failing loudly when
// a contract breaks, so libFuzzer (and the replay in the test suite) report it as a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "base/error.h"

namespace squeeze::fuzz {

// Consumes the input from the front; past its end every read gives zeros, so a short input is
// still a complete (if dull) case and no target needs a length check per field.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  template <class T>
  T pod() {
    T v{};
    const size_t n = left_ < sizeof v ? left_ : sizeof v;
    if (n) std::memcpy(&v, p_, n);
    p_ += n;
    left_ -= n;
    return v;
  }
  uint8_t byte() { return pod<uint8_t>(); }
  // A value in [0, n) (n > 0).
  size_t pick(size_t n) { return pod<uint16_t>() % n; }
  // Everything not consumed yet.
  const uint8_t* rest() const { return p_; }
  size_t left() const { return left_; }
  std::string restString() const { return std::string(reinterpret_cast<const char*>(p_), left_); }

 private:
  const uint8_t* p_;
  size_t left_;
};

// A broken contract: print what and stop the process (the fuzzer saves the input).
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz contract broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs body, which may only finish or throw squeeze::Error with one of the codes the contract
// allows (a bitmask of 1 << int(ErrorCode)); anything else is fail(). Returns whether it threw.
template <class F>
bool expectOnlyErrors(const char* what, unsigned allowedCodes, F&& body) {
  try {
    body();
    return false;
  } catch (const Error& e) {
    if (!(allowedCodes & (1u << static_cast<int>(e.code()))))
      fail(strCat(what, " threw code ", static_cast<int>(e.code()),
                  ", which its contract does not "
                  "allow: ",
                  e.what()));
    if (e.what()[0] == '\0') fail(strCat(what, " threw an Error with an empty message"));
    return true;
  } catch (const std::exception& e) {
    fail(strCat(what, " threw a non-squeeze exception: ", e.what()));
  } catch (...) {
    fail(strCat(what, " threw something that is not an exception"));
  }
}

constexpr unsigned codeBit(ErrorCode c) { return 1u << static_cast<int>(c); }

}  // namespace squeeze::fuzz
