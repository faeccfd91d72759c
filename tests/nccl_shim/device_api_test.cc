// The NCCL 2.28 device API's host functions over the shim (src/nccl_shim/device_api.cc), called
// as a program linked against libnccl.so.2 calls them: two ranks as threads. Teams by NCCL's
// definitions (world: every rank; LSA: this rank alone, Squeeze having no symmetric memory;
// rail: the world), the LL all-to-all's slot arithmetic, and a device communicator refused with
// ncclInvalidUsage and a reason, as is a dead communicator.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <stdlib.h>

// clang-format off
#include <cstddef>  // before nccl_device.h, which uses size_t without including it
#include <nccl_device.h>
// clang-format on

#include <string>
#include <thread>
#include <vector>

namespace {

// The file the loader took ncclTeamWorld from, links resolved: the shim, unless the build tree's
// libnccl.so.2 link to it was missing and the toolkit's NCCL came instead.
std::string loadedFrom() {
  Dl_info info{};
  ncclTeam_t (*teamWorld)(ncclComm_t) = &ncclTeamWorld;  // the host function, not the overload
  if (!dladdr(reinterpret_cast<void*>(teamWorld), &info) || !info.dli_fname) return "?";
  char* real = realpath(info.dli_fname, nullptr);
  const std::string path = real ? real : info.dli_fname;
  free(real);
  return path;
}

bool sameTeam(ncclTeam_t a, ncclTeam_t b) {
  return a.nRanks == b.nRanks && a.rank == b.rank && a.stride == b.stride;
}

TEST(NcclShimDeviceApi, TeamsAndRefusalsOnTwoRanks) {
  ASSERT_NE(loadedFrom().find("libsqueeze-nccl.so"), std::string::npos)
      << "the test runs over " << loadedFrom() << ", not the shim";
  constexpr int kRanks = 2;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<std::string> failures(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      std::string& f = failures[r];
      ncclComm_t comm = nullptr;
      if (ncclCommInitRank(&comm, kRanks, id, r) != ncclSuccess) {
        f = std::string("init: ") + ncclGetLastError(nullptr);
        return;
      }
      const ncclTeam_t world = ncclTeamWorld(comm), lsa = ncclTeamLsa(comm);
      if (!sameTeam(world, {kRanks, r, 1})) f += " world team;";
      if (!sameTeam(lsa, {1, 0, 1})) f += " LSA team;";
      if (!sameTeam(ncclTeamRail(comm), world)) f += " rail team;";
      for (int peer = 0; peer < kRanks; ++peer)
        if (ncclTeamRankToWorld(comm, world, peer) != peer) f += " world rank of a world peer;";
      if (ncclTeamRankToWorld(comm, lsa, 0) != r) f += " world rank of the LSA rank;";
      if (ncclTeamRankToLsa(comm, lsa, 0) != 0) f += " LSA rank of the LSA rank;";
      ncclDevComm_t devComm{};
      ncclDevCommRequirements_t reqs{};
      if (ncclDevCommCreate(comm, &reqs, &devComm) != ncclInvalidUsage ||
          std::string(ncclGetLastError(comm)).find("device communicators") == std::string::npos)
        f += std::string(" ncclDevCommCreate: ") + ncclGetLastError(comm) + ";";
      if (ncclDevCommDestroy(comm, &devComm) != ncclInvalidUsage) f += " ncclDevCommDestroy;";
      ncclLsaBarrierHandle_t barrier{};
      ncclDevResourceRequirements_t res{};
      if (ncclLsaBarrierCreateRequirement(lsa, 1, &barrier, &res) != ncclInvalidUsage)
        f += " ncclLsaBarrierCreateRequirement;";
      if (ncclCommDestroy(comm) != ncclSuccess) f += " destroy;";
    });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

TEST(NcclShimDeviceApi, SlotArithmeticAndDeadCommunicators) {
  ASSERT_NE(loadedFrom().find("libsqueeze-nccl.so"), std::string::npos)
      << "the test runs over " << loadedFrom() << ", not the shim";
  EXPECT_EQ(ncclLLA2ACalcSlots(32, 16), 64);  // 8 bytes a slot
  EXPECT_EQ(ncclLLA2ACalcSlots(5, 1), 5);
  const ncclTeam_t none = ncclTeamWorld(nullptr);
  EXPECT_EQ(none.nRanks, 0);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("ncclTeamWorld: comm is NULL"),
            std::string::npos)
      << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclTeamRankToWorld(nullptr, none, 0), -1);
}

}  // namespace
