// The cost model the tuner prices algorithms with: alpha-beta-gamma per transport (configured by
// SQZ_TCP_*, SQZ_SHM_* and SQZ_REDUCE_GBPS, scaled at init by what calibration measures), the
// host's cores (ranks beyond them share them), and per all-reduce algorithm how efficiently this
// implementation achieves its theoretical terms on that transport (measured: calibration.cc, or
// a tuner file written by scripts/calibrate-tuner.sh, SQZ_TUNER_FILE).
#pragma once

#include <cstdint>
#include <string>

namespace squeeze {

// Multipliers on an algorithm's theoretical terms, with s = ranks per core (at least 1): predicted
// seconds = lat * latency term + latShared * latency term * (s - 1)
//         + bw * bandwidth term of the bytes up to CostModel::cacheBytes
//         + bwCold * bandwidth term of the bytes past it
// (data that no longer fits in cache moves slower, and how much slower depends on the
// algorithm's access pattern). latShared is what each message step costs more when ranks queue
// for cores: little for an algorithm whose steps involve few ranks at once, much for one whose
// every step needs every rank to run.
struct AlgoEfficiency {
  double lat = 1;  // the defaults: the plain alpha-beta terms
  double latShared = 0;
  double bw = 1;
  double bwCold = 1;
};

constexpr int kAllReduceAlgos = 5;  // naive, ps, ring, rhd, tree (AlgoId order)

struct CostModel {
  double alpha;  // seconds per message
  double beta;   // seconds per byte moved
  double gamma;  // seconds per byte combined
  double cacheBytes = 2 << 20;
  // The cores of the one host every rank runs on (0: unknown, or ranks on several hosts). With
  // more ranks than cores the ranks share them: an all-reduce's bytes cost their total work (the
  // same for every algorithm) spread over the cores, however an algorithm spreads it over ranks,
  // and each message step waits for its ranks to get a core (registry.cc).
  int cores = 0;
  AlgoEfficiency allReduce[kAllReduceAlgos];  // indexed by AlgoId
  // Between hosts, what init-time calibration timed (core/calibrate.h): every all-reduce
  // algorithm's seconds per call at anchorBytes (0: not timed). The tuner then prices an
  // algorithm at its measured time there, plus the model's cost of the bytes beyond (or, below
  // it, scaled by the model's ratio), so that per-step overheads the rows cannot know (a shaped
  // link's burst, a schedule's own waits) count where latency decides (tuner.cc, priceOf).
  double anchorBytes = 0;
  double anchorSeconds[kAllReduceAlgos] = {};
};

// What init-time calibration measures (src/core/calibrate.h), and what the same measurement gave
// on the machine that efficiency rows were fit on (their reference).
struct MeasuredTerms {
  // Seconds per message: half a round trip of a small message (one pair on one host; between
  // hosts the slowest ring link's).
  double alpha = 0;
  // Seconds per byte: what a medium message costs more, per byte (between hosts the slowest
  // link's slope from a medium to a large message).
  double beta = 0;
  double gamma = 0;    // seconds per byte of the CPU float-sum kernel, in cache
  double seconds = 0;  // how long the measurement took (slowest rank)
};

// The efficiency rows of one transport and the measurement they are relative to.
struct TransportRows {
  AlgoEfficiency allReduce[kAllReduceAlgos];
  bool hasReference = false;  // without one, the measured alpha and beta replace the constants
  MeasuredTerms reference;
};

// The built-in rows for "shm", "tcp" (ranks on one host) or "net" (tcp between hosts).
const TransportRows& builtinRows(const std::string& transport);

// The model for "shm", "tcp" or "net" with the built-in rows and this host's cores (0 for "net").
CostModel calibratedModel(const std::string& transport, double alpha, double beta, double gamma);

// `model` with `rows`' efficiencies and, given a measurement: for rows with a reference, its
// alpha, beta and gamma scaled by measured / reference (this machine prices as the reference
// machine did, as much slower or faster as it measures); for rows without one (the built-in
// "net" rows, fit against the link's own latency and rate), the measured alpha and beta as they
// are, gamma as configured. Deterministic: the same inputs give the same model bit for bit.
CostModel withRows(const CostModel& model, const TransportRows& rows,
                   const MeasuredTerms* measured = nullptr);

// A hash of `rows` (FNV-1a over their values), to check that ranks price alike.
uint64_t hashRows(const TransportRows& rows);

// The online cores of this host (at least 1).
int onlineCores();

// A tuner file (scripts/calibrate-tuner.sh writes one; SQZ_TUNER_FILE loads it): rows per
// transport, replacing the built-in ones for the transports it names. Format, one item a line,
// fields separated by blanks, '#' to the end of a line is a comment, blank lines are ignored:
//   sqz-tuner 1                                      first item: format and version
//   reference TRANSPORT ALPHA_US BETA_GBPS GAMMA_GBPS   optional, once per transport
//   row TRANSPORT ALGORITHM LAT LAT_SHARED BW BW_COLD   one per all-reduce algorithm
// TRANSPORT is shm, tcp or net; ALGORITHM an all-reduce algorithm (naive ps ring rhd tree); a
// transport named by any line must have a row for every algorithm. Rows are multipliers in
// [0, 1000]; a reference is what init-time calibration measured where the rows were fit.
struct TunerFile {
  bool has[3] = {false, false, false};  // shm, tcp, net
  TransportRows rows[3];
  // The rows for `transport` ("shm", "tcp" or "net"), or null when the file has none.
  const TransportRows* find(const std::string& transport) const;
};

// Parses `text`, naming `name` in errors: Error(kInvalidArgument) "NAME:LINE: what was wrong;
// what is expected".
TunerFile parseTunerFile(const std::string& text, const std::string& name);
// Reads and parses `path`; a file that cannot be read is Error(kInvalidArgument) naming it.
TunerFile loadTunerFile(const std::string& path);

}  // namespace squeeze
