// Measured efficiencies of the all-reduce algorithms per transport (cost_model.h).
//
// Why measured: the alpha-beta terms assume each rank has its own core and link. On a shared
// host (ranks oversubscribing cores, shm or loopback tcp) what costs is synchronisation and
// context switches, not bytes on a wire: naive's two rounds beat rhd's four up to ~1 MiB even
// though naive moves twice the bytes through rank 0. The multipliers below say, per algorithm,
// how far this implementation is from its theoretical terms; they were fit by least squares on
// relative error to the medians of 3 runs at 4 ranks, 8 B to 256 MiB, on the reference machine
// (2 cores, 4 ranks, Debian 12 VM), by scripts/calibrate-tuner.sh, which prints these rows (shm:
// the mean of two such medians, as shm timings vary by up to 30% between runs).
#include "algorithms/algorithm.h"
#include "algorithms/cost_model.h"

namespace squeeze {

CostModel calibratedModel(const std::string& transport, double alpha, double beta, double gamma) {
  CostModel m{alpha, beta, gamma};
  // Between hosts (tcp, each rank with its own link) loopback's rows mislead: there naive's bytes
  // through rank 0 are memory copies; on a wire they queue on one link (on 1 Gbit/s lab hosts
  // naive was 3x slower than ring at 1 MiB where loopback's row chose it). The "net" row is
  // measured on 4 lab hosts at 1 Gbit/s (docs/netlab.md), 64 KiB to 16 MiB, with beta set to
  // the link (SQZ_TCP_GBPS=0.1175): ring meets its bound; naive beats its serial 2(P-1)n term
  // because rank 0 sends and receives at once; rhd and ps lose 13% to TCP's slow start on
  // connections that idle between their steps; the tree's two trees share links.
  static const AlgoEfficiency net[5] = {{1, 0.61, 0}, {1, 1.13, 0}, {1, 1.0, 0}, {1, 1.13, 0}, {1, 1.84, 0}};
  //                                    naive               ps                  ring                rhd                 tree
  static const AlgoEfficiency tcp[5] = {{1.21, 0.17, 0.18}, {0.84, 0.73, 0.44}, {0.67, 1.08, 0.13}, {0.85, 0.86, 0.28}, {0.43, 0.69, 0.71}};
  static const AlgoEfficiency shm[5] = {{4.43, 0.14, 0.06}, {3.16, 0.38, 0.18}, {2.78, 0.52, 0.06}, {4.53, 0.39, 0.19}, {3.19, 0.58, 0.23}};
  const AlgoEfficiency* eff = transport == "shm" ? shm : transport == "net" ? net : tcp;
  for (int i = 0; i < 5; ++i) m.allReduce[i] = eff[i];
  return m;
}

}  // namespace squeeze
