// The squeeze-perf/1 document of a -J file (README.md describes its members): what every
// file records about its run (the preamble), and the table rows of the sqz-*-perf binaries and
// the peer drivers in perf/compare/. sqz-codec-bench and sqz-train-sim add their own members
// after the same preamble. The document is nlohmann's; jsonText (json_text.h) writes it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "json_text.h"

namespace squeeze::perf {

/// The value of the "format" member of every -J file; a reader refuses any other.
inline constexpr const char* kJsonFormat = "squeeze-perf/1";

/// This host's name (gethostname), "?" if it has none.
std::string hostName();

/// What a -J file records about the run besides its rows.
struct JsonRunInfo {
  const char* format = kJsonFormat;  ///< the file's format; sqz-train-sim's differs
  std::string library = "squeeze";   ///< what is measured: "squeeze", or a peer ("gloo")
  std::string program;               ///< binary name, e.g. "sqz-allreduce-perf"
  std::string collective;            ///< e.g. "allreduce", or "codec-bench"
  int nranks = 1;
  std::vector<std::string> hosts;   ///< every rank's host name, in rank order
  const char* transport = nullptr;  ///< what the library was told; nullptr: null
  int argc = 0;
  char** argv = nullptr;
  std::time_t started = 0;  ///< the "date" member (UTC)
};

/// The file's object with its members up to "rows": format, library, program, collective,
/// nranks, hosts, transport, command, date and env (every SQZ_*, GLOO_* and OMPI_MCA_* variable,
/// sorted; the job's credentials SQZ_UNIQUE_ID and SQZ_SECRET only as "(set, hidden)", as
/// sqz-info shows them). The caller adds its own members after these.
Json jsonPreamble(const JsonRunInfo& info);

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
  const char* codec = nullptr;  // -z only, like the four below; NaN: null
  double wirePerRank = NAN;
  double ratio = NAN;
  double relErr = NAN;
  int64_t denseCalls = -1;  // of this half's timed calls, those that ran dense; < 0: null
};

/// The "rows" member: every row, each an object (one line of the file).
Json jsonRows(const std::vector<JsonRow>& rows);

/// The whole text of a table driver's file: the preamble and the rows.
std::string perfJsonText(const JsonRunInfo& info, const std::vector<JsonRow>& rows);

}  // namespace squeeze::perf
