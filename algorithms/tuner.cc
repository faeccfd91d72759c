// Tuner (see tuner.h).
#include "algorithms/tuner.h"

#include <cstdio>
#include <limits>

#include "base/error.h"
#include "base/strings.h"

namespace squeeze {
namespace {

bool parseColl(const std::string& s, CollKind* out) {
  for (CollKind k : {CollKind::kAllReduce, CollKind::kBroadcast, CollKind::kReduce,
                     CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAlltoAll})
    if (s == collKindName(k)) {
      *out = k;
      return true;
    }
  return false;
}

// "allreduce: naive, ps, ring, rhd, tree; broadcast: ring, naive; ..."
std::string algoNames() {
  std::string out;
  const AlgorithmEntry* prev = nullptr;
  for (const auto& a : algorithms()) {
    if (!prev || prev->coll != a.coll)
      out += strCat(prev ? "; " : "", collKindName(a.coll), ": ", a.name);
    else
      out += strCat(", ", a.name);
    prev = &a;
  }
  return out;
}

}  // namespace

double priceOf(const AlgorithmEntry& a, const CostModel& m, double bytes, int nranks) {
  const double cost = a.cost(m, bytes, nranks);
  if (m.anchorBytes <= 0 || a.coll != CollKind::kAllReduce || a.id == AlgoId::kDirect)
    return cost;
  const double measured = m.anchorSeconds[static_cast<int>(a.id)];
  const double atAnchor = a.cost(m, m.anchorBytes, nranks);
  if (measured <= 0 || atAnchor <= 0) return cost;
  // Past the anchor the bytes beyond it cost what the model says they cost more; below it the
  // call is latency-bound, and scales as the model's cost does.
  return bytes >= m.anchorBytes ? measured + (cost - atAnchor) : measured * cost / atAnchor;
}

Tuner::Tuner(const std::string& spec, const CostModel& model) : model_(model) {
  for (const std::string& part : split(spec, ';')) {
    if (part.empty()) continue;
    Rule base{true, CollKind::kAllReduce, 0, UINT64_MAX, nullptr, ""};
    std::string body = part;
    size_t colon = part.find(':');
    if (colon != std::string::npos) {
      if (!parseColl(part.substr(0, colon), &base.coll))
        raise(ErrorCode::kInvalidArgument, "SQZ_ALGO: '", part.substr(0, colon),
              "' is not a collective (allreduce, broadcast, reduce, allgather, reducescatter, "
              "alltoall).");
      base.anyColl = false;
      body = part.substr(colon + 1);
    }
    for (const std::string& item : split(body, ',')) {
      Rule rule = base;
      std::string name = item;
      size_t eq = item.find('=');
      if (eq != std::string::npos) {
        std::string range = item.substr(0, eq);
        name = item.substr(eq + 1);
        size_t dash = range.find('-');
        std::string loStr = dash == std::string::npos ? "" : range.substr(0, dash);
        std::string hiStr = dash == std::string::npos ? "" : range.substr(dash + 1);
        uint64_t lo = parseBytes(loStr).value_or(UINT64_MAX);
        uint64_t hi = hiStr == "inf" ? UINT64_MAX : parseBytes(hiStr).value_or(0);
        if (lo == UINT64_MAX || lo >= hi)
          raise(ErrorCode::kInvalidArgument, "SQZ_ALGO: '", range,
                "' is not a byte range; write LO-HI, e.g. 0-64K or 64K-inf.");
        rule.lo = lo;
        rule.hi = hi;
      }
      bool known = false;
      for (const auto& a : algorithms()) known |= name == a.name;
      if (!known)
        raise(ErrorCode::kInvalidArgument, "SQZ_ALGO: '", name, "' is not an algorithm; choose "
              "from ", algoNames(), ".");
      rule.name = name;
      if (!rule.anyColl) {
        rule.algo = findAlgorithm(rule.coll, name);
        if (!rule.algo)
          raise(ErrorCode::kInvalidArgument, "SQZ_ALGO: ", name, " does not implement ",
                collKindName(rule.coll), ".");
      }
      rules_.push_back(rule);
    }
  }
}

const AlgorithmEntry& Tuner::byModel(const CollRequest& req, int nranks) const {
  const AlgorithmEntry* best = nullptr;
  double bestCost = std::numeric_limits<double>::infinity();
  for (const auto& a : algorithms()) {
    if (a.coll != req.kind || !a.supports(req, nranks)) continue;
    // Where ranks share memory, direct moves the least of it with the fewest waits: measured
    // the fastest at every size and rank count there (perf/RESULTS.md, "Direct all-reduce").
    if (a.id == AlgoId::kDirect) return a;
    double c = priceOf(a, model_, static_cast<double>(req.bytes()), nranks);
    if (c < bestCost) {
      bestCost = c;
      best = &a;
    }
  }
  if (!best) raise(ErrorCode::kInternal, "no algorithm implements ", collKindName(req.kind));
  return *best;
}

const AlgorithmEntry& Tuner::choose(const CollRequest& req, int nranks) const {
  const uint64_t bytes = req.bytes();
  for (const Rule& rule : rules_) {
    if (bytes < rule.lo || bytes >= rule.hi) continue;
    if (!rule.anyColl && rule.coll != req.kind) continue;
    const AlgorithmEntry* a = rule.algo ? rule.algo : findAlgorithm(req.kind, rule.name);
    if (a && a->supports(req, nranks)) return *a;
  }
  return byModel(req, nranks);
}

std::string Tuner::choiceTable(CollKind coll, int nranks, const std::vector<size_t>& sizes) const {
  std::string out = strCat("# ", collKindName(coll), ", ", nranks, " ranks; model alpha ",
                           model_.alpha * 1e6, " us, beta ", 1e-9 / model_.beta,
                           " GB/s, reduce ", 1e-9 / model_.gamma, " GB/s",
                           model_.cores > 0 ? strCat(", ", model_.cores, " cores") : "",
                           model_.anchorBytes > 0
                               ? strCat("; all-reduce timed at ", size_t(model_.anchorBytes),
                                        " bytes")
                               : "",
                           "\n");
  char line[256];
  std::snprintf(line, sizeof line, "%12s %8s", "bytes", "choice");
  out += line;
  for (const auto& a : algorithms())
    if (a.coll == coll) {
      std::snprintf(line, sizeof line, " %10s", strCat(a.name, "(us)").c_str());
      out += line;
    }
  out += "\n";
  for (size_t bytes : sizes) {
    CollRequest req;
    req.kind = coll;
    req.dtype = DataType::kUint8;
    req.count = bytes;
    std::snprintf(line, sizeof line, "%12zu %8s", bytes, byModel(req, nranks).name);
    out += line;
    for (const auto& a : algorithms())
      if (a.coll == coll) {
        std::snprintf(line, sizeof line, " %10.1f",
                      priceOf(a, model_, double(bytes), nranks) * 1e6);
        out += line;
      }
    out += "\n";
  }
  return out;
}

}  // namespace squeeze
