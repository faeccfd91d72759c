// Measured efficiencies of the all-reduce algorithms per transport (cost_model.h), the tuner
// file that replaces them (SQZ_TUNER_FILE), and the scaling of a model by what init-time
// calibration measures.
//
// Why measured: the alpha-beta terms assume each rank has its own core and link. On a shared
// host (ranks oversubscribing cores, shm or loopback tcp) what costs is synchronisation and
// context switches, not bytes on a wire: naive's two rounds beat rhd's four up to ~1 MiB even
// though naive moves twice the bytes through rank 0. The multipliers below say, per algorithm,
// how far this implementation is from its theoretical terms (registry.cc), with the cores the
// ranks share as a term of the model rather than a constant of the fit. They were fit by
// scripts/fit_tuner.py (least squares on relative error, no multiplier negative) to the medians
// of 10 to 15 runs of every algorithm at 3, 4, 6 and 8 ranks, 8 B to 16 MiB, over all rank
// counts at once, on the reference machine (2 cores, Debian 12 VM, shared with other people's
// compiles while measured: single runs scattered by 2-4x), from scripts/calibrate-tuner.sh,
// which prints such rows and writes them as a tuner file.
//
// Their reference is what init-time calibration (src/core/calibrate.h) measured on that machine
// (median of 32 communicators per transport): a machine that measures k times the reference's
// latency prices with k times the configured latency, and so on, so the rows carry over to
// other machines.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/cost_model.h"
#include "base/error.h"
#include "base/strings.h"

namespace squeeze {
namespace {

constexpr const char* kTransports[3] = {"shm", "tcp", "net"};
constexpr double kMaxScale = 3;

int transportIndex(const std::string& t) {
  for (int i = 0; i < 3; ++i)
    if (t == kTransports[i]) return i;
  return -1;
}

// Microseconds and GB/s (a tuner file's units) to seconds per message and per byte.
MeasuredTerms fromUnits(double alphaUs, double betaGbps, double gammaGbps) {
  MeasuredTerms m;
  m.alpha = alphaUs * 1e-6;
  m.beta = 1 / (betaGbps * 1e9);
  m.gamma = 1 / (gammaGbps * 1e9);
  return m;
}

const char* allReduceName(int id) {
  for (const AlgorithmEntry& e : algorithms())
    if (e.coll == CollKind::kAllReduce && static_cast<int>(e.id) == id) return e.name;
  return "?";
}

TransportRows makeRows(const AlgoEfficiency (&eff)[kAllReduceAlgos], const MeasuredTerms* ref) {
  TransportRows r;
  for (int i = 0; i < kAllReduceAlgos; ++i) r.allReduce[i] = eff[i];
  if (ref) {
    r.hasReference = true;
    r.reference = *ref;
  }
  return r;
}

}  // namespace

const TransportRows& builtinRows(const std::string& transport) {
  // {lat, latShared, bw, bwCold} per algorithm: naive, ps, ring, rhd, tree.
  // tcp: fit by scripts/fit_tuner.py to three calibrate-tuner.sh runs on the 2-core reference
  // machine (3, 4, 6, 8 ranks; 64 KiB, 1 MiB, 16 MiB; 11 runs per cell in all, medians). The rows
  // before these (fit while other jobs loaded the machine, and at 8 B-16 MiB) picked tree at
  // 1 MiB, where ring ran 1.1-1.25x faster at 4-8 ranks.
  static const AlgoEfficiency tcpEff[kAllReduceAlgos] = {{0.117, 0.0209, 0.451, 0.648},
                                                         {0.153, 0.195, 0.433, 0.566},
                                                         {0.303, 0.118, 0.319, 0.5},
                                                         {0.119, 0.178, 0.432, 0.513},
                                                         {0.112, 0.0855, 0.399, 0.558}};
  // shm: refit after the executor began polling before it sleeps (SQZ_SPIN_US) and the rings'
  // pages were mapped at init, which cut shm's per-message cost most (calibrate-tuner.sh 3, twice,
  // 64 KiB to 16 MiB; the old rows kept naive up to 2 MiB, 1.2-1.4x slower than ps or rhd at
  // 256 KiB-4 MiB).
  static const AlgoEfficiency shmEff[kAllReduceAlgos] = {{0, 0.0354, 0.704, 0.98},
                                                         {0.682, 0.517, 0.519, 1.05},
                                                         {0.108, 0.465, 0.642, 0.937},
                                                         {0.268, 0.619, 0.609, 0.955},
                                                         {0.504, 0.389, 0.583, 1.03}};
  // What calibration measured there (communicators of 3 to 8 ranks, medians of 132 for tcp, of 96
  // for the shm refit): alpha us, beta GB/s, gamma GB/s.
  static const MeasuredTerms tcpRef = fromUnits(12.83, 3.341, 43.41);
  static const MeasuredTerms shmRef = fromUnits(8.5, 4.52, 11.8);
  // Between hosts (tcp, each rank with its own link) loopback's rows mislead: there naive's bytes
  // through rank 0 are memory copies; on a wire they queue on one link (on 1 Gbit/s lab hosts
  // naive was 3x slower than ring at 1 MiB where loopback's row chose it). The "net" row is
  // measured on 4 lab hosts at 1 Gbit/s (docs/netlab.md), 64 KiB to 16 MiB, with beta set to
  // the link (SQZ_TCP_GBPS=0.1175): ring meets its bound; naive beats its serial 2(P-1)n term
  // because rank 0 sends and receives at once; rhd and ps lose 13% to TCP's slow start on
  // connections that idle between their steps; the tree's two trees share links. Naive's lat is
  // 1/3 since its latency term became 2(P-1) alpha (was 2 alpha): the same price at 4 ranks.
  // It has no reference: between hosts calibration measures every ring link's latency and rate
  // (core/calibrate.h, Probe::kRingLinks) and the slowest link's alpha and beta replace the
  // configured ones as they are (withRows), which is what the rows were fit against.
  static const AlgoEfficiency netEff[kAllReduceAlgos] = {{1.0 / 3, 0, 0.61, 0.61},
                                                         {1, 0, 1.13, 1.13},
                                                         {1, 0, 1.0, 1.0},
                                                         {1, 0, 1.13, 1.13},
                                                         {1, 0, 1.84, 1.84}};
  static const TransportRows tcp = makeRows(tcpEff, &tcpRef);
  static const TransportRows shm = makeRows(shmEff, &shmRef);
  static const TransportRows net = makeRows(netEff, nullptr);
  return transport == "shm" ? shm : transport == "net" ? net : tcp;
}

int onlineCores() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

CostModel calibratedModel(const std::string& transport, double alpha, double beta, double gamma) {
  CostModel m{alpha, beta, gamma};
  // Ranks on one host share its cores; between hosts each host's share is unknown here.
  m.cores = transport == "net" ? 0 : onlineCores();
  return withRows(m, builtinRows(transport));
}

CostModel withRows(const CostModel& model, const TransportRows& rows,
                   const MeasuredTerms* measured) {
  CostModel m = model;
  for (int i = 0; i < kAllReduceAlgos; ++i) m.allReduce[i] = rows.allReduce[i];
  if (measured && !rows.hasReference) {
    // The rows are relative to the plain terms of the network itself: price with what it
    // measured, unbounded (a 1 Gbit/s link is 30x slower than loopback, and that is the point).
    m.alpha = measured->alpha;
    m.beta = measured->beta;
  } else if (measured) {
    // One measurement moves each term by at most kMaxScale either way: on the reference machine
    // single init-time measurements scatter around the reference by up to 3x (cores shared with
    // other ranks and other work), and the picks hold within that range; a machine further off
    // moves as far as the bound and says so in its calibration log line.
    auto scale = [](double measured, double reference) {
      return std::clamp(measured / reference, 1 / kMaxScale, kMaxScale);
    };
    m.alpha *= scale(measured->alpha, rows.reference.alpha);
    m.beta *= scale(measured->beta, rows.reference.beta);
    m.gamma *= scale(measured->gamma, rows.reference.gamma);
  }
  return m;
}

uint64_t hashRows(const TransportRows& rows) {
  std::vector<double> v;
  for (const AlgoEfficiency& e : rows.allReduce)
    v.insert(v.end(), {e.lat, e.latShared, e.bw, e.bwCold});
  v.insert(v.end(), {rows.hasReference ? 1.0 : 0.0, rows.reference.alpha, rows.reference.beta,
                     rows.reference.gamma});
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bit
  for (double d : v) {
    unsigned char b[sizeof d];
    std::memcpy(b, &d, sizeof d);
    for (unsigned char c : b) h = (h ^ c) * 1099511628211ull;
  }
  return h;
}

// ---- tuner files ------------------------------------------------------------------------------

const TransportRows* TunerFile::find(const std::string& transport) const {
  int i = transportIndex(transport);
  return i >= 0 && has[i] ? &rows[i] : nullptr;
}

TunerFile parseTunerFile(const std::string& text, const std::string& name) {
  TunerFile file;
  bool seenRow[3][kAllReduceAlgos] = {}, seenRef[3] = {}, header = false;
  int lastLine[3] = {};
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  auto fail = [&](const auto&... what) {
    raise(ErrorCode::kInvalidArgument, name, ":", lineno, ": ", what...,
          " (SQZ_TUNER_FILE; the format is in algorithms/cost_model.h, and "
          "scripts/calibrate-tuner.sh writes such files).");
  };
  // A number of the line's field `i`: finite and within [lo, hi].
  auto number = [&](const std::vector<std::string>& f, size_t i, const char* what, double lo,
                    double hi) {
    const std::string& s = f[i];
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
      fail("'", s, "' is not a number (", what, ")");
    if (v < lo || v > hi) fail(what, " ", s, " is out of range; use ", lo, " to ", hi);
    return v;
  };
  auto transport = [&](const std::string& t) {
    int i = transportIndex(t);
    if (i < 0) fail("'", t, "' is not a transport; use shm, tcp or net");
    lastLine[i] = lineno;
    return i;
  };
  while (std::getline(in, line)) {
    ++lineno;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::vector<std::string> f;
    std::istringstream words(line);
    for (std::string w; words >> w;) f.push_back(w);
    if (f.empty()) continue;
    if (!header) {
      if (f[0] != "sqz-tuner") fail("the first line must be 'sqz-tuner 1', not '", trim(line), "'");
      if (f.size() != 2 || f[1] != "1")
        fail("'", trim(line), "': this library reads version 1 of the format ('sqz-tuner 1')");
      header = true;
      continue;
    }
    if (f[0] == "reference") {
      if (f.size() != 5)
        fail("'reference' takes 4 fields (TRANSPORT ALPHA_US BETA_GBPS GAMMA_GBPS), not ",
             f.size() - 1);
      int t = transport(f[1]);
      if (seenRef[t]) fail("a second reference for ", f[1]);
      seenRef[t] = true;
      file.rows[t].hasReference = true;
      file.rows[t].reference = fromUnits(number(f, 2, "ALPHA_US", 1e-3, 1e7),
                                         number(f, 3, "BETA_GBPS", 1e-6, 1e6),
                                         number(f, 4, "GAMMA_GBPS", 1e-6, 1e6));
    } else if (f[0] == "row") {
      if (f.size() != 7)
        fail("'row' takes 6 fields (TRANSPORT ALGORITHM LAT LAT_SHARED BW BW_COLD), not ",
             f.size() - 1);
      int t = transport(f[1]);
      const AlgorithmEntry* algo = findAlgorithm(CollKind::kAllReduce, f[2]);
      if (!algo || algo->id == AlgoId::kDirect)
        fail("'", f[2],
             "' is not an all-reduce algorithm with a row; use naive, ps, ring, rhd or "
             "tree");
      int a = static_cast<int>(algo->id);
      if (seenRow[t][a]) fail("a second row for ", f[1], " ", f[2]);
      seenRow[t][a] = true;
      AlgoEfficiency& e = file.rows[t].allReduce[a];
      e.lat = number(f, 3, "LAT", 0, 1000);
      e.latShared = number(f, 4, "LAT_SHARED", 0, 1000);
      e.bw = number(f, 5, "BW", 0, 1000);
      e.bwCold = number(f, 6, "BW_COLD", 0, 1000);
      if (e.lat == 0 && e.latShared == 0)
        fail("LAT and LAT_SHARED are both 0: every call would be priced as free of latency");
      if (e.bw == 0 && e.bwCold == 0)
        fail("BW and BW_COLD are both 0: every byte would be priced as free");
    } else {
      fail("'", f[0], "' is not an item; use 'reference' or 'row'");
    }
  }
  if (!header) {
    lineno = std::max(lineno, 1);
    fail("the file is empty; it must start with 'sqz-tuner 1'");
  }
  for (int t = 0; t < 3; ++t) {
    bool any = seenRef[t];
    for (bool s : seenRow[t]) any |= s;
    if (!any) continue;
    for (int a = 0; a < kAllReduceAlgos; ++a)
      if (!seenRow[t][a]) {
        lineno = lastLine[t];
        fail(kTransports[t], " has no row for ", allReduceName(a),
             ": a transport needs a row for every all-reduce algorithm");
      }
    file.has[t] = true;
  }
  return file;
}

TunerFile loadTunerFile(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    raise(ErrorCode::kInvalidArgument, "SQZ_TUNER_FILE=", path, ": cannot read it (",
          std::strerror(errno), "); give a file written by scripts/calibrate-tuner.sh, or unset "
          "SQZ_TUNER_FILE for the built-in rows.");
  std::stringstream text;
  text << in.rdbuf();
  return parseTunerFile(text.str(), path);
}

}  // namespace squeeze
