// The algorithm registry: each entry turns a collective call into a Schedule for one rank. An
// algorithm knows ranks, element ranges and steps; it never touches a connection or knows what
// bytes a codec puts on the wire. Each entry also carries its alpha-beta cost, which the tuner
// (tuner.h) compares.
#pragma once

#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "base/schedule.h"
#include "base/types.h"

namespace squeeze {

// kDirect is last: it has no efficiency row (cost_model.h), the others are indexed by their id.
enum class AlgoId : uint8_t { kNaive, kPs, kRing, kRhd, kTree, kDirect };

struct ScheduleParams {
  int rank;
  int nranks;
  size_t chunkElems;  // pipeline piece size, in elements (>= 1)
};

struct AlgorithmEntry {
  AlgoId id;
  CollKind coll;
  const char* name;
  const char* description;
  bool (*supports)(const CollRequest& req, int nranks);
  // Null for direct, which the communicator runs over its window (src/core/direct_allreduce.h).
  Schedule (*build)(const CollRequest& req, const ScheduleParams& params);
  // Predicted seconds for `bytes` per rank over `nranks` ranks.
  double (*cost)(const CostModel& m, double bytes, int nranks);
};

// Every algorithm, in table order.
const std::vector<AlgorithmEntry>& algorithms();
const AlgorithmEntry* findAlgorithm(CollKind coll, const std::string& name);

Schedule buildRingBroadcast(const CollRequest& req, const ScheduleParams& params);
Schedule buildNaiveBroadcast(const CollRequest& req, const ScheduleParams& params);
Schedule buildRingReduce(const CollRequest& req, const ScheduleParams& params);
Schedule buildNaiveReduce(const CollRequest& req, const ScheduleParams& params);
Schedule buildRingAllGather(const CollRequest& req, const ScheduleParams& params);
Schedule buildNaiveAllGather(const CollRequest& req, const ScheduleParams& params);
Schedule buildRingReduceScatter(const CollRequest& req, const ScheduleParams& params);
Schedule buildNaiveReduceScatter(const CollRequest& req, const ScheduleParams& params);
Schedule buildNaiveAlltoAll(const CollRequest& req, const ScheduleParams& params);

// One queued sqzSend or sqzRecv of a group.
struct P2pCall {
  bool isSend;
  int peer;
  void* buffer;
  size_t bytes;
};
// Raises kInvalidUsage where the sends a group queues to its own rank do not pair, in order and
// size, with its receives from it (buildSendRecv checks it; so does a device group's path).
void checkSendsToSelf(const std::vector<P2pCall>& calls, int rank);
// sentTo / recvdFrom: per peer, messages so far (updated), which number the new messages.
// userBuffers[i] is calls[i].buffer.
Schedule buildSendRecv(const std::vector<P2pCall>& calls, int rank, std::vector<uint64_t>& sentTo,
                       std::vector<uint64_t>& recvdFrom);

Schedule buildNaiveAllReduce(const CollRequest& req, const ScheduleParams& params);
Schedule buildPsAllReduce(const CollRequest& req, const ScheduleParams& params);
Schedule buildRingAllReduce(const CollRequest& req, const ScheduleParams& params);
Schedule buildRhdAllReduce(const CollRequest& req, const ScheduleParams& params);
Schedule buildTreeAllReduce(const CollRequest& req, const ScheduleParams& params);

}  // namespace squeeze
