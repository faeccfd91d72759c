// The perf drivers' shared flags and size sweep; see sweep_flags.h.
#include "sweep_flags.h"

#include <cerrno>
#include <cstdlib>

namespace squeeze::perf {

bool parseSize(const char* text, size_t* out, bool byteSuffix) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text, &end);
  if (end == text || errno != 0 || !(v >= 0)) return false;
  double unit = 1;
  switch (*end) {
    case 'k':
    case 'K':
      unit = 1024.0;
      ++end;
      break;
    case 'm':
    case 'M':
      unit = 1024.0 * 1024;
      ++end;
      break;
    case 'g':
    case 'G':
      unit = 1024.0 * 1024 * 1024;
      ++end;
      break;
    default:
      break;
  }
  if (byteSuffix && (*end == 'B' || *end == 'b')) ++end;
  if (*end != '\0') return false;
  double bytes = v * unit;
  if (bytes > 4.0e18) return false;
  *out = static_cast<size_t>(bytes);
  return true;
}

bool parseInt(const char* text, long lo, long hi, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 0);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
}

namespace {

// Applies getopt's `flag` with value `arg` to *o when it is a shared one, and returns true
// (*error then empty, or saying what is wrong with the value); false for any other flag.
bool parseSweepFlag(int flag, const char* arg, SweepOptions* o, std::string* error) {
  const std::string value = arg ? arg : "";
  long v = 0;
  error->clear();
  switch (flag) {
    case 'b':
      if (!parseSize(arg, &o->minBytes)) *error = "invalid size '" + value + "' for -b (minbytes)";
      return true;
    case 'e':
      if (!parseSize(arg, &o->maxBytes)) *error = "invalid size '" + value + "' for -e (maxbytes)";
      return true;
    case 'f':
      if (!parseInt(arg, 1, 1 << 20, &v))
        *error = "invalid step factor '" + value + "' for -f (need >= 1)";
      else
        o->stepFactor = static_cast<size_t>(v);
      return true;
    case 'i':
      if (!parseSize(arg, &o->stepBytes) || o->stepBytes == 0)
        *error = "invalid step '" + value + "' for -i (need > 0 bytes)";
      else
        o->stepFactor = 1;
      return true;
    case 'n':
      if (!parseInt(arg, 1, 1 << 30, &v))
        *error = "invalid iteration count '" + value + "' for -n (need >= 1)";
      else
        o->iters = static_cast<int>(v);
      return true;
    case 'w':
      if (!parseInt(arg, 0, 1 << 30, &v))
        *error = "invalid warm-up count '" + value + "' for -w (need >= 0)";
      else
        o->warmup = static_cast<int>(v);
      return true;
    case 'c':
      if (!parseInt(arg, 0, 1 << 20, &v))
        *error = "invalid check count '" + value + "' for -c (need 0 or 1)";
      else
        o->check = static_cast<int>(v);
      return true;
    case 'J':
      if (value.empty())
        *error = "-J needs a file name, e.g. -J allreduce.json";
      else
        o->jsonPath = arg;
      return true;
    default:
      return false;
  }
}

}  // namespace

FlagReader::FlagReader(int argc, char** argv, const char* ownShort,
                       std::initializer_list<option> ownLong, SweepOptions* o)
    : argc_(argc), argv_(argv), short_(std::string(":b:e:f:i:n:w:c:J:") + ownShort), o_(o) {
  long_ = {
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"iters", required_argument, nullptr, 'n'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},
      {"json", required_argument, nullptr, 'J'},
  };
  long_.insert(long_.end(), ownLong);
  long_.push_back({nullptr, 0, nullptr, 0});
  opterr = 0;  // the messages are ours
  optind = 1;
}

int FlagReader::next() {
  for (;;) {
    int c = getopt_long(argc_, argv_, short_.c_str(), long_.data(), nullptr);
    if (c == -1) {
      error_ = finish();
      return error_.empty() ? -1 : '?';
    }
    if (c == ':') {
      error_ = std::string("option '") + argv_[optind - 1] + "' needs a value";
      return '?';
    }
    if (c == '?') {
      error_ = optopt != 0 ? std::string("unknown option '-") + char(optopt) + "'"
                           : std::string("unknown option '") + argv_[optind - 1] + "'";
      return '?';
    }
    if (!parseSweepFlag(c, optarg, o_, &error_)) return c;
    if (!error_.empty()) return '?';
  }
}

std::string FlagReader::finish() const {
  if (optind < argc_) return std::string("unexpected argument '") + argv_[optind] + "'";
  if (o_->minBytes > o_->maxBytes)
    return "minbytes (" + std::to_string(o_->minBytes) + ") is larger than maxbytes (" +
           std::to_string(o_->maxBytes) + ")";
  return "";
}

bool nextSize(const SweepOptions& o, size_t* size) {
  if (o.stepFactor > 1) {
    if (*size > o.maxBytes / o.stepFactor) return false;
    *size *= o.stepFactor;
  } else {
    if (*size > o.maxBytes - o.stepBytes) return false;
    *size += o.stepBytes;
  }
  return true;
}

}  // namespace squeeze::perf
