// Shared driver of the nccl-tests-style benchmarks (sqz-allreduce-perf and friends).
//
// Each benchmark binary is one small file: it fills in a PerfColl (how many elements the
// collective sends and receives, how to make its input and expected output, its bus-bandwidth
// factor, and the call itself) and returns perfMain(argc, argv, coll). The driver parses the
// nccl-tests flags (-b -e -f -i -n -w -c -d -o -r) and -a (force the algorithm through SQZ_ALGO),
// creates the communicator (from the launcher's environment, or a single rank without one),
// sweeps the sizes, times out-of-place and in-place calls, checks the results bit for bit, and
// prints nccl-tests' table on rank 0, with the algorithm the library used as the last column.
// A collective with a compressed variant (all-reduce) also takes -z SPEC: it then times that
// variant through a codec and adds the codec's columns (wire bytes, ratio, relative error).
// -J FILE also writes the printed rows, one JSON object per file (format "squeeze-perf/1"; the
// JSON helpers at the end of this header, shared with sqz-codec-bench).
//
// Only the public C API (squeeze/squeeze.h) is used, so the binaries measure what users get.
#pragma once

#include <squeeze/squeeze.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace squeeze::perf {

/// Element counts of one call, for a "count" that the size sweep chose (size / element size).
/// Mirrors nccl-tests' getCollByteCount.
struct CollCounts {
  size_t sendCount = 0;          ///< elements in each rank's send buffer
  size_t recvCount = 0;          ///< elements in each rank's receive buffer (and expected)
  size_t paramCount = 0;         ///< the count argument of the call (the "count" column)
  size_t sendInplaceOffset = 0;  ///< in place, the send pointer is recvbuf + this * rank elements
  size_t recvInplaceOffset = 0;  ///< in place, the recv pointer is recvbuf + this * rank elements
};

/// What PerfColl::initData fills for one checked call.
struct InitArgs {
  void* input = nullptr;     ///< this rank's input: sendCount elements (send buffer, or in place
                             ///< the receive buffer at the send offset)
  void* expected = nullptr;  ///< recvCount elements this rank must receive
  /// This rank's receive region as the call will see it (recvCount elements, after input was
  /// written; in place it overlaps input). Out of place it holds a poison pattern in checked
  /// calls, so a collective that must leave it alone (reduce on a non-root) copies it to
  /// expected.
  const void* output = nullptr;
  size_t sendCount = 0;
  size_t recvCount = 0;
  sqzDataType_t type = sqzFloat32;
  sqzRedOp_t op = sqzSum;
  int root = 0;
  int rank = 0;
  int nranks = 1;
  uint64_t seed = 0;  ///< changes every checked call, so stale results are caught
};

/// One collective as the driver sees it. Plain function pointers: one constant per binary,
/// best written with designated initializers.
struct PerfColl {
  const char* name;     ///< for messages, e.g. "AllReduce"
  const char* program;  ///< binary name for messages, e.g. "sqz-allreduce-perf"
  /// The collective's name in SQZ_ALGO ("allreduce"): -a NAME sets SQZ_ALGO=<algoColl>:NAME
  /// before the communicator is created. nullptr: the call has no algorithm choice and -a is
  /// rejected.
  const char* algoColl;
  bool usesOp;    ///< false: the redop column shows "none" and -o is ignored
  bool usesRoot;  ///< false: the root column shows -1 and -r is ignored
  bool inPlace;   ///< false: the call cannot run in place; those columns show N/A
  /// Fills *out for `count` elements on `nranks` ranks.
  void (*byteCount)(size_t count, int nranks, CollCounts* out);
  /// Writes this rank's input and the expected output (see fillInput / fillReduced).
  void (*initData)(const InitArgs& args);
  /// busbw = algbw * busFactor(nranks), as nccl-tests' doc/PERFORMANCE.md defines it; algbw is
  /// the size column (max of send and receive bytes) over the time.
  double (*busFactor)(int nranks);
  /// The call under test; the driver reports a non-success result and exits.
  sqzResult_t (*run)(const void* sendbuf, void* recvbuf, size_t count, sqzDataType_t type,
                     sqzRedOp_t op, int root, sqzComm_t comm);
  /// The call through a codec (-z), e.g. sqzAllReduceCompressed; nullptr (leave it out of the
  /// initializer): the collective has no compressed variant and -z is rejected.
  sqzResult_t (*runCompressed)(const void* sendbuf, void* recvbuf, size_t count, sqzDataType_t type,
                               sqzRedOp_t op, sqzCodec_t codec, sqzComm_t comm);
};

/// Runs the benchmark; returns the process exit status (0 ok, 1 wrong results or a library
/// error, 2 bad flags).
int perfMain(int argc, char** argv, const PerfColl& coll);

// ---- Data helpers for initData -------------------------------------------------------------
// Inputs are small integers chosen so that every reduction over any number of ranks is exact in
// every datatype (int8 and bfloat16 included): for sum and avg at most 8 ranks contribute a
// non-zero value to each element (values in [-5, 5], or [0, 10] for unsigned types); prod uses
// values in {1, 2} (and -1 for signed types) with at most 3 factors of 2 per element; max and
// min use values in [-20, 20] (or [0, 40]). Avg is the exact sum divided by the rank count:
// truncated for integer types, rounded to nearest even for floating types.

/// Size in bytes of one element of `type` (0 for an unknown type).
size_t typeSize(sqzDataType_t type);

/// Writes rank `rank`'s input for elements first .. first+count-1 into buf[0 .. count-1].
void fillInput(void* buf, size_t count, size_t first, sqzDataType_t type, sqzRedOp_t op, int rank,
               int nranks, uint64_t seed);

/// Writes the reduction with `op` over all nranks ranks' fillInput values into buf.
void fillReduced(void* buf, size_t count, size_t first, sqzDataType_t type, sqzRedOp_t op,
                 int nranks, uint64_t seed);

/// For collectives that move data without reducing it (broadcast, all-gather, all-to-all,
/// send/receive): writes rank `rank`'s values for elements first .. first+count-1, all of them
/// non-trivial (41 values in every datatype) and different per rank, element and seed, so a
/// block that lands at the wrong place or comes from the wrong rank is caught.
void fillPattern(void* buf, size_t count, size_t first, sqzDataType_t type, int rank,
                 uint64_t seed);

/// Gradient-like float32 input for the compressed runs (-z), where small integers would make
/// every codec look exact (fp16 carries them without error): element j of rank `rank` is
/// s_j * (m_j / 2 + n_{j,rank}), with a per-element scale s_j log-uniform in [2^-8, 1] and a
/// component m_j shared by the ranks (both the same on every rank), and per-rank noise n; m and
/// n are roughly standard normal. Deterministic from (j, rank, seed), so any rank can compute
/// every rank's input and hence the exact sum.
float gradientValue(size_t j, int rank, uint64_t seed);

/// Writes gradientValue(first + i, rank, seed) into buf[i] for i < count.
void fillGradient(float* buf, size_t count, size_t first, int rank, uint64_t seed);

// ---- 16-bit floating point (round to nearest even; NaN stays NaN) -------------------------
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBfloat16(float f);
float bfloat16ToFloat(uint16_t b);

// ---- JSON output (-J FILE) -----------------------------------------------------------------
// Header-only so that sqz-codec-bench, which links the internal archive rather than this
// driver's library, writes the same format without a JSON library dependency.

/// The value of the "format" member of every -J file; a reader refuses any other.
inline constexpr const char* kJsonFormat = "squeeze-perf/1";

/// Builds one JSON text by hand: objects, arrays, keys and values, with the commas placed for
/// it. Members of objects and arrays nested at most `lineDepth` deep each start a line; deeper
/// ones stay on their parent's line, so each table row is one line of the file. Strings are
/// escaped (quote, backslash, control characters; bytes that are not UTF-8 become U+FFFD, so
/// any argv still gives valid JSON); non-finite numbers are written as null.
class JsonWriter {
 public:
  explicit JsonWriter(int lineDepth = 2) : lineDepth_(lineDepth) {}

  JsonWriter& beginObject() { return open('{'); }
  JsonWriter& endObject() { return close('}'); }
  JsonWriter& beginArray() { return open('['); }
  JsonWriter& endArray() { return close(']'); }
  JsonWriter& key(std::string_view name) {
    separate();
    appendString(name);
    out_ += ": ";
    afterKey_ = true;
    return *this;
  }
  JsonWriter& string(std::string_view s) {
    separate();
    appendString(s);
    return *this;
  }
  /// nullptr is written as null.
  JsonWriter& stringOrNull(const char* s) { return s ? string(s) : null(); }
  JsonWriter& number(double v) {
    if (!std::isfinite(v)) return null();
    separate();
    char buf[32];
    // Shortest text that reads back as the same double.
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, ec == std::errc() ? end : buf);
    return *this;
  }
  JsonWriter& integer(int64_t v) {
    separate();
    out_ += std::to_string(v);
    return *this;
  }
  JsonWriter& boolean(bool v) {
    separate();
    out_ += v ? "true" : "false";
    return *this;
  }
  JsonWriter& null() {
    separate();
    out_ += "null";
    return *this;
  }
  /// The text so far; complete once every object and array is closed.
  const std::string& text() const { return out_; }

 private:
  JsonWriter& open(char bracket) {
    separate();
    out_ += bracket;
    firsts_.push_back(true);
    return *this;
  }
  JsonWriter& close(char bracket) {
    bool empty = firsts_.back();
    firsts_.pop_back();
    if (!empty && depth() < lineDepth_) newline();
    out_ += bracket;
    return *this;
  }
  int depth() const { return static_cast<int>(firsts_.size()); }
  void newline() {
    out_ += '\n';
    out_.append(2 * firsts_.size(), ' ');
  }
  // Before a key or a value: the comma and line break that go before it, unless it is the value
  // of the key just written.
  void separate() {
    if (afterKey_) {
      afterKey_ = false;
      return;
    }
    if (firsts_.empty()) return;
    if (!firsts_.back()) out_ += ',';
    if (depth() <= lineDepth_)
      newline();
    else if (!firsts_.back())
      out_ += ' ';
    firsts_.back() = false;
  }
  void appendString(std::string_view s) {
    static const char kHex[] = "0123456789abcdef";
    out_ += '"';
    for (size_t i = 0; i < s.size();) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      if (c == '"' || c == '\\') {
        out_ += '\\';
        out_ += static_cast<char>(c);
      } else if (c == '\n') {
        out_ += "\\n";
      } else if (c == '\t') {
        out_ += "\\t";
      } else if (c == '\r') {
        out_ += "\\r";
      } else if (c < 0x20) {
        out_ += "\\u00";
        out_ += kHex[c >> 4];
        out_ += kHex[c & 15];
      } else if (c >= 0x80) {
        size_t n = utf8Length(s.substr(i));
        if (n == 0) {
          out_ += "\\ufffd";
          ++i;
        } else {
          out_.append(s.substr(i, n));
          i += n;
        }
        continue;
      } else {
        out_ += static_cast<char>(c);
      }
      ++i;
    }
    out_ += '"';
  }
  // Bytes in the well-formed UTF-8 sequence that starts s (s[0] >= 0x80), or 0 if there is none
  // (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
  static size_t utf8Length(std::string_view s) {
    auto byte = [&](size_t i) { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
    auto cont = [&](size_t i) { return (byte(i) & 0xc0u) == 0x80u; };
    unsigned c = byte(0);
    if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
      unsigned lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
      return byte(1) >= lo && byte(1) <= hi && cont(2) ? 3 : 0;
    }
    if (c >= 0xf0 && c <= 0xf4) {
      unsigned lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
      return byte(1) >= lo && byte(1) <= hi && cont(2) && cont(3) ? 4 : 0;
    }
    return 0;
  }

  std::string out_;
  std::vector<bool> firsts_;  // per open object/array: nothing written in it yet
  bool afterKey_ = false;
  int lineDepth_;
};

/// The -J file: PATH.tmp is opened for writing when the flags are read, so a path that cannot
/// be written stops the run before any collective; commit() writes the text there and renames
/// it to PATH, so a run that dies leaves no half-written PATH.
class JsonFile {
 public:
  JsonFile() = default;
  JsonFile(const JsonFile&) = delete;
  JsonFile& operator=(const JsonFile&) = delete;
  ~JsonFile() { discard(); }

  /// Opens PATH.tmp for writing. On failure returns false with *error saying why (the errno
  /// text, or that PATH is a directory).
  bool open(const std::string& path, std::string* error) {
    discard();
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      *error = "it is a directory";
      return false;
    }
    path_ = path;
    tmpPath_ = path + ".tmp";
    file_ = std::fopen(tmpPath_.c_str(), "w");
    if (!file_) {
      *error = std::strerror(errno);
      return false;
    }
    return true;
  }
  bool isOpen() const { return file_ != nullptr; }
  /// Writes text and a final newline to PATH.tmp and renames it to PATH.
  bool commit(const std::string& text, std::string* error) {
    if (!file_) {
      *error = "the file was not opened";
      return false;
    }
    bool ok = std::fwrite(text.data(), 1, text.size(), file_) == text.size() &&
              std::fputc('\n', file_) != EOF && std::fflush(file_) == 0;
    int err = ok ? 0 : errno;
    if (std::fclose(file_) != 0 && ok) {
      ok = false;
      err = errno;
    }
    file_ = nullptr;
    if (ok && std::rename(tmpPath_.c_str(), path_.c_str()) != 0) {
      err = errno;
      ok = false;
    }
    if (!ok) {
      *error = std::strerror(err);
      std::remove(tmpPath_.c_str());
    }
    return ok;
  }
  /// Closes and removes PATH.tmp, if open (a run that stops early writes no file).
  void discard() {
    if (!file_) return;
    std::fclose(file_);
    file_ = nullptr;
    std::remove(tmpPath_.c_str());
  }

 private:
  std::string path_, tmpPath_;
  FILE* file_ = nullptr;
};

/// This host's name (gethostname), "?" if it has none.
inline std::string hostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !host[0]) return "?";
  return host;
}

/// What a -J file records about the run besides its rows.
struct JsonRunInfo {
  std::string program;     ///< binary name, e.g. "sqz-allreduce-perf"
  std::string collective;  ///< e.g. "allreduce", or "codec-bench"
  int nranks = 1;
  std::vector<std::string> hosts;   ///< every rank's host name, in rank order
  const char* transport = nullptr;  ///< what the library was told; nullptr: null
  int argc = 0;
  char** argv = nullptr;
  std::time_t started = 0;  ///< the "date" member (UTC)
};

/// Opens the file's object and writes its members up to "rows" (json.md's order): format,
/// library, program, collective, nranks, hosts, transport, command, date and env (every SQZ_*,
/// GLOO_* and OMPI_MCA_* variable, sorted; the job's credentials SQZ_UNIQUE_ID and SQZ_SECRET
/// only as "(set, hidden)", as sqz-info shows them). The caller then writes the rows array and
/// closes the object.
inline void writeJsonPreamble(JsonWriter& w, const JsonRunInfo& info) {
  w.beginObject();
  w.key("format").string(kJsonFormat);
  w.key("library").string("squeeze");
  w.key("program").string(info.program);
  w.key("collective").string(info.collective);
  w.key("nranks").integer(info.nranks);
  w.key("hosts").beginArray();
  for (const std::string& h : info.hosts) w.string(h);
  w.endArray();
  w.key("transport").stringOrNull(info.transport);
  std::string command;
  for (int i = 0; i < info.argc; ++i) {
    if (i) command += ' ';
    command += info.argv[i];
  }
  w.key("command").string(command);
  char date[32] = "";
  std::tm tm{};
  if (gmtime_r(&info.started, &tm)) std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  w.key("date").stringOrNull(date[0] ? date : nullptr);

  std::vector<std::pair<std::string, std::string>> vars;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    std::string name(entry.substr(0, eq));
    if (name.rfind("SQZ_", 0) != 0 && name.rfind("GLOO_", 0) != 0 &&
        name.rfind("OMPI_MCA_", 0) != 0)
      continue;
    bool secret = name == "SQZ_UNIQUE_ID" || name == "SQZ_SECRET";
    vars.emplace_back(name, secret ? "(set, hidden)" : std::string(entry.substr(eq + 1)));
  }
  std::sort(vars.begin(), vars.end());
  w.key("env").beginObject();
  for (const auto& [name, value] : vars) w.key(name).string(value);
  w.endObject();
}

}  // namespace squeeze::perf
