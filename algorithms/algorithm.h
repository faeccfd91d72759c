// The algorithm registry: each entry turns a collective call into a Schedule for one rank. An
// algorithm knows ranks, element ranges and steps; it never touches a connection or knows what
// bytes a codec puts on the wire.
#pragma once

#include <string>
#include <vector>

#include "core/schedule.h"
#include "core/types.h"

namespace squeeze {

enum class AlgoId : uint8_t { kRing = 0 };

struct ScheduleParams {
  int rank;
  int nranks;
  size_t chunkElems;  // pipeline piece size, in elements (>= 1)
};

struct AlgorithmEntry {
  AlgoId id;
  const char* name;
  const char* description;
  bool (*supports)(const CollRequest& req, int nranks);
  Schedule (*build)(const CollRequest& req, const ScheduleParams& params);
};

const std::vector<AlgorithmEntry>& algorithms();
// The entry to use for `req`: the first in the table that supports it.
const AlgorithmEntry& selectAlgorithm(const CollRequest& req, int nranks);

Schedule buildRingAllReduce(const CollRequest& req, const ScheduleParams& params);

}  // namespace squeeze
