// mpi-allreduce-perf: sqz-allreduce-perf's table for MPI_Allreduce (MPI_FLOAT, MPI_SUM), so
// Squeeze can be compared with the MPI the machine has (Debian's Open MPI).
//
// Out of place from a send buffer to a receive buffer, and in place with MPI_IN_PLACE, timed as
// sqz-allreduce-perf times its calls (see compare_common.cc). Which algorithm Open MPI's coll
// component picks is not observable through MPI, so the algo column says "MPI_Allreduce"; the
// JSON's env records any OMPI_MCA_* setting that forced one.
//   mpirun --allow-run-as-root --oversubscribe -np 4 mpi-allreduce-perf -b 16M -e 256M -f 16
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "compare_common.h"

namespace {

constexpr const char* kProgram = "mpi-allreduce-perf";

// MPI reports errors through return codes once MPI_ERRORS_RETURN is set; turn one into a message.
void check(int rc, const char* what, int rank) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  std::fflush(stdout);
  std::fprintf(stderr, "%s: rank %d: %s failed: %s\n", kProgram, rank, what, text);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

class MpiGroup : public squeeze::compare::RankGroup {
 public:
  MpiGroup() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  double maxOverRanks(double value) override {
    check(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
          "MPI_Allreduce (max)", rank_);
    return value;
  }
  int64_t sumOverRanks(int64_t value) override {
    check(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce (sum)", rank_);
    return value;
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", rank_); }
  std::vector<std::string> gatherToRoot(const std::string& mine) override {
    constexpr int kBytes = 256;
    std::vector<char> cell(kBytes, '\0');
    mine.copy(cell.data(), kBytes - 1);
    std::vector<char> cells(rank_ == 0 ? static_cast<size_t>(kBytes) * size_ : 0);
    check(MPI_Gather(cell.data(), kBytes, MPI_CHAR, cells.data(), kBytes, MPI_CHAR, 0,
                     MPI_COMM_WORLD),
          "MPI_Gather", rank_);
    std::vector<std::string> all;
    for (int r = 0; rank_ == 0 && r < size_; ++r) all.emplace_back(&cells[r * kBytes]);
    return all;
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // one line at a time, so progress shows
  static const squeeze::compare::DriverInfo kInfo = {
      .program = kProgram,
      .library = "openmpi",
      .launchHint =
          "Several ranks: mpirun --allow-run-as-root --oversubscribe -np 4 "
          "mpi-allreduce-perf ...\n",
      .algoHelp = nullptr,
      .algos = {},
      .takesStore = false,
  };
  // Flags first, so -h and bad flags need no MPI (and speak once, from rank 0).
  int launcherRank = 0, launcherSize = 1;
  std::string ignored;
  squeeze::compare::launcherRankAndSize(&launcherRank, &launcherSize, &ignored);
  squeeze::compare::Options o;
  int status = squeeze::compare::parseOptions(argc, argv, kInfo, launcherRank == 0, &o);
  if (status >= 0) return status;

  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MpiGroup group;

  struct Call {
    const float* send = nullptr;
    float* recv = nullptr;
    int count = 0;
  };
  auto call = std::make_shared<Call>();
  squeeze::compare::Target target;
  target.algo = "MPI_Allreduce";
  target.title = "MPI_Allreduce (MPI_FLOAT, MPI_SUM; in place with MPI_IN_PLACE)";
  target.outOfPlace = true;
  target.inPlace = true;
  target.setup = [call](size_t count, float* send, float* recv) {
    call->send = send;
    call->recv = recv;
    call->count = static_cast<int>(count);
  };
  const int rank = group.rank();
  target.call = [call, rank](bool inPlace) {
    check(MPI_Allreduce(inPlace ? MPI_IN_PLACE : call->send, call->recv, call->count, MPI_FLOAT,
                        MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce", rank);
  };
  std::vector<squeeze::compare::Target> targets = {target};

  // The transport Open MPI was told to use, when it was told.
  const char* btl = std::getenv("OMPI_MCA_btl");
  int result = squeeze::compare::runBenchmark(argc, argv, kInfo, o, group, targets, btl);
  MPI_Finalize();
  return result;
}
