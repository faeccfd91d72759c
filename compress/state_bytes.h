// The byte writer and reader of saved codec state (CodecHandle::saveState/loadState, and the
// adaptive policies' own fields): native byte order, length-prefixed strings, and a reader that
// checks every length against what is left and says so in terms a caller can act on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"

namespace squeeze {

struct StateWriter {
  std::vector<char>& out;
  void bytes(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p, n);
  }
  template <class T>
  void pod(T v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    pod(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
};

struct StateReader {
  const char* p;
  size_t left;
  void need(size_t n) const {
    if (n > left)
      raise(ErrorCode::kInvalidArgument, "codec state is truncated: ", n, " more bytes needed, ",
            left, " left. Pass the whole buffer sqzCodecSaveState wrote.");
  }
  void bytes(void* dst, size_t n) {
    need(n);
    if (n == 0) return;  // dst may be an empty array's null data()
    std::memcpy(dst, p, n);
    p += n;
    left -= n;
  }
  template <class T>
  T pod() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  std::string str() {
    uint32_t n = pod<uint32_t>();
    need(n);
    std::string s(p, n);
    p += n;
    left -= n;
    return s;
  }
};

}  // namespace squeeze
