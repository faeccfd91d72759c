// The text every nccl-tests-style perf driver prints, and its -J JSON, in one place: the
// sqz-*-perf binaries (common.cc), the peer drivers in perf/compare/ (compare_common.cc) and
// sqz-codec-bench share it, so their tables and files line up column for column.
//
// What is here knows no communication library: the common flags (-b -e -f -i -n -w -c -J) and
// their size suffixes, the size sweep's steps, nccl-tests' header, rank, column, row and summary
// lines (as strings; each driver prints them on its rank 0), and the JSON writer, file and row
// format ("squeeze-perf/1"). The drivers own the flags of their own, the calls and the timing.
#pragma once

#include <getopt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace squeeze::perf {

// ---- Flags shared by every driver ------------------------------------------------------------

/// The sweep's flags, with nccl-tests' defaults.
struct SweepOptions {
  size_t minBytes = 32u << 20;
  size_t maxBytes = 32u << 20;
  size_t stepBytes = 1u << 20;
  size_t stepFactor = 2;  // > 1: multiply; 1: add stepBytes
  int iters = 20;
  int warmup = 5;
  int check = 1;
  const char* jsonPath = nullptr;  // -J: the rows as JSON to this file (rank 0)
};

/// The usage lines of -b .. -c (-J's text differs per driver, so it is theirs).
inline constexpr const char* kSweepUsage =
    "  -b, --minbytes <size>     smallest size in bytes (default 32M; K/M/G suffixes)\n"
    "  -e, --maxbytes <size>     largest size in bytes (default 32M)\n"
    "  -f, --stepfactor <n>      multiply the size by n each step (default 2;\n"
    "                            1 means add -i bytes instead)\n"
    "  -i, --stepbytes <size>    add this many bytes each step (instead of -f)\n"
    "  -n, --iters <n>           timed iterations per size (default 20)\n"
    "  -w, --warmup_iters <n>    warm-up iterations (default 5)\n"
    "  -c, --check <n>           checked calls per size, 0 to skip (default 1)\n";

/// Parses "<number>[K|M|G][B]" (binary units; the B only when `byteSuffix`); false on anything
/// else, or above 4e18.
bool parseSize(const char* text, size_t* out, bool byteSuffix = true);

/// Parses an integer in [lo, hi] (decimal, 0x hex or 0 octal); false on anything else.
bool parseInt(const char* text, long lo, long hi, long* out);

/// Reads argv with getopt_long: the shared flags into *o, and hands the driver its own. A driver
/// loops `for (int c; (c = flags.next()) != -1;)` over a switch on its own flags whose default
/// is `return bad(flags.error());`.
class FlagReader {
 public:
  /// ownShort: getopt letters of the driver's flags; ownLong: their long names.
  FlagReader(int argc, char** argv, const char* ownShort, std::initializer_list<option> ownLong,
             SweepOptions* o);

  /// The driver's next flag (its value in optarg); -1 after the last; '?' when a flag is unknown,
  /// lacks its value, or a shared flag's value is bad, and after the last flag when arguments are
  /// left over or the shared flags contradict each other, with error() saying what.
  int next();
  const std::string& error() const { return error_; }

 private:
  std::string finish() const;  // what is wrong after the last flag, or ""

  int argc_;
  char** argv_;
  std::string short_;
  std::vector<option> long_;
  SweepOptions* o_;
  std::string error_;
};

/// Steps *size to the sweep's next size; false when the sweep is done (the next would pass
/// maxBytes, or overflow).
bool nextSize(const SweepOptions& o, size_t* size);

/// A heap buffer for a driver's send, receive or expected data, aligned to pages.
struct AlignedBuffer {
  void* ptr = nullptr;
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(ptr); }
  /// Allocates `bytes` rounded up to whole pages (at least one) and zeroes them, so the pages are
  /// touched now and not in the first timed call. Returns false when out of memory.
  bool allocate(size_t bytes);
  /// The rounded size allocate(bytes) asks for.
  static size_t roundedBytes(size_t bytes);
  float* floats() const { return static_cast<float*>(ptr); }
};

// ---- nccl-tests' table ---------------------------------------------------------------------
// Each returns the text for the caller to print (on rank 0): the drivers interleave it with
// lines of their own.

/// printf on stdout on the rank that prints the table (0); the others print nothing.
void printOnRoot(int rank, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/// "# nThread 1 ..." and "# Using devices", before the rank lines.
std::string headerLines(const SweepOptions& o);

/// One "#  Rank ..." line (with its newline).
std::string rankLine(int rank, const char* pid, const char* host);

/// The line above the columns that says which are out of place and which in place.
std::string columnGroupLine();

/// The column names up to and including the in-place "#wrong" and the two spaces after it; the
/// caller ends the line (algo, and codec columns for -z).
std::string columnNames();

/// The units under columnNames(), up to the in-place "#wrong" column, without the line's end.
std::string columnUnits();

/// A row's first columns: size, count, type, redop, root.
std::string rowStart(size_t bytes, size_t count, const char* type, const char* redop, int root);

/// One measured half of a row (out of place or in place): time, algbw, busbw, #wrong (N/A when
/// `wrong` < 0, that is, not checked).
std::string timedCells(double timeUs, double algBw, double busBw, int64_t wrong);

/// A half the collective cannot run: N/A in every column.
std::string naCells();

/// The lines after the table: wrong-result count and average bus bandwidth.
std::string summaryLines(int errors, double bwSum, int bwCount);

// ---- JSON output (-J FILE) -----------------------------------------------------------------
// Written by hand, so that no driver needs a JSON library.

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
  const char* format = kJsonFormat;  ///< the file's format; sqz-train-sim's differs
  std::string library = "squeeze";  ///< what is measured: "squeeze", or a peer ("gloo")
  std::string program;              ///< binary name, e.g. "sqz-allreduce-perf"
  std::string collective;           ///< e.g. "allreduce", or "codec-bench"
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
  w.key("format").string(info.format);
  w.key("library").string(info.library);
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

/// One row of a -J file: the out-of-place or the in-place half of a printed row.
struct JsonRow {
  size_t size = 0;
  size_t count = 0;
  const char* type = "";
  const char* redop = "";
  int root = -1;
  bool inPlace = false;
  double timeUs = 0;
  double algBw = 0;
  double busBw = 0;
  int64_t wrong = -1;  // < 0: not checked (null)
  std::string algo;
  const char* codec = nullptr;  // -z only, like the three below; NaN: null
  double wirePerRank = NAN;
  double ratio = NAN;
  double relErr = NAN;
};

/// Writes the "rows" member (after writeJsonPreamble): every row, each an object on a line.
void writeJsonRows(JsonWriter& w, const std::vector<JsonRow>& rows);

}  // namespace squeeze::perf
