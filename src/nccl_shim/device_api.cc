// The host functions of NCCL 2.28's device API (nccl_device.h), which a program built against
// it links whether or not it calls them (torch 2.x's libtorch_cuda.so does: without them the
// loader refuses it). Teams are answered for real, by NCCL's definitions: the world team is
// every rank; the LSA team (the ranks whose memory this rank's kernels can load and store,
// through NCCL's symmetric windows) is this rank alone, since Squeeze registers no windows; the
// rail team is the world's outer factor of the LSA team, so the world again. The LL all-to-all's
// slot count is NCCL's arithmetic. A device communicator (ncclDevCommCreate), and the resources
// only it uses (barriers, LL all-to-all buffers), fail with ncclInvalidUsage: Squeeze's
// collectives are called from the host.
// clang-format off
#include <cstddef>  // before nccl_device.h, which uses size_t without including it
#include <nccl_device.h>
// clang-format on

#include "nccl_shim/shim_call.h"

using namespace squeeze;
using namespace squeeze::nccl_shim;

namespace {

// comm's size and rank, or false (the error recorded) for a dead communicator.
bool worldOf(ncclComm_t comm, const char* fn, int* nRanks, int* rank) {
  if (!liveComm(comm)) {
    fail(ncclInvalidArgument, fn, ": comm is ",
         comm ? "not a live communicator (destroyed, or not from ncclCommInitRank)" : "NULL", ".");
    return false;
  }
  return sqzCommCount(comm->sqz, nRanks) == sqzSuccess &&
         sqzCommUserRank(comm->sqz, rank) == sqzSuccess;
}

// What a team function returns for a dead communicator: no ranks.
constexpr ncclTeam_t kNoTeam = {0, -1, 1};

ncclResult_t noDeviceComm(const char* fn) {
  return fail(ncclInvalidUsage, fn,
              " is not supported by Squeeze: it has no NCCL device communicators (kernels that "
              "communicate through symmetric memory); call the collectives (ncclAllReduce, ...) "
              "from the host.");
}

}  // namespace

ncclResult_t ncclDevCommCreate(ncclComm_t, ncclDevCommRequirements_t const*,
                               ncclDevComm_t* outDevComm) {
  enter();
  (void)outDevComm;
  return noDeviceComm("ncclDevCommCreate");
}

ncclResult_t ncclDevCommDestroy(ncclComm_t, ncclDevComm_t const*) {
  enter();
  return fail(ncclInvalidUsage,
              "ncclDevCommDestroy: Squeeze makes no device communicators, so there is none to "
              "destroy (ncclDevCommCreate always fails).");
}

ncclTeam_t ncclTeamWorld(ncclComm_t comm) {
  enter();
  int n = 0, r = 0;
  if (!worldOf(comm, "ncclTeamWorld", &n, &r)) return kNoTeam;
  return {n, r, 1};
}

ncclTeam_t ncclTeamLsa(ncclComm_t comm) {
  enter();
  int n = 0, r = 0;
  if (!worldOf(comm, "ncclTeamLsa", &n, &r)) return kNoTeam;
  return {1, 0, 1};
}

ncclTeam_t ncclTeamRail(ncclComm_t comm) {
  enter();
  int n = 0, r = 0;
  if (!worldOf(comm, "ncclTeamRail", &n, &r)) return kNoTeam;
  return ncclTeamOuterFactor({n, r, 1}, 1);  // the LSA team has one rank
}

int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  enter();
  int n = 0, r = 0;
  if (!worldOf(comm, "ncclTeamRankToWorld", &n, &r)) return -1;
  return r + (rank - team.rank) * team.stride;
}

int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) {
  enter();
  int n = 0, r = 0;
  if (!worldOf(comm, "ncclTeamRankToLsa", &n, &r)) return -1;
  return (rank - team.rank) * team.stride;  // this rank is LSA rank 0
}

int ncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  return maxElts * ((maxEltSize + 7) / 8);  // 8 bytes a slot
}

ncclResult_t ncclLLA2ACreateRequirement(int, int, ncclLLA2AHandle_t*,
                                        ncclDevResourceRequirements_t*) {
  enter();
  return noDeviceComm("ncclLLA2ACreateRequirement (resources for ncclDevCommCreate)");
}

ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t, int, ncclLsaBarrierHandle_t*,
                                             ncclDevResourceRequirements_t*) {
  enter();
  return noDeviceComm("ncclLsaBarrierCreateRequirement (resources for ncclDevCommCreate)");
}

ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t, ncclTeam_t, int, ncclGinBarrierHandle_t*,
                                             ncclDevResourceRequirements_t*) {
  enter();
  return noDeviceComm("ncclGinBarrierCreateRequirement (resources for ncclDevCommCreate)");
}
