// The stand-in's batched kernels (the cuda-standin build; device/standin/standin.h): each gpu*
// entry point of device/batch.h runs its jobs' cpu* twins on the stream (kernel_support.h), one
// enqueue per kBatchJobs jobs, as the .cu files launch them.
#include <cuda_runtime_api.h>

#include <cstring>

#include "device/batch.h"
#include "device/cast.h"
#include "device/handle_kernels.h"
#include "device/quantize.h"
#include "device/sparse.h"
#include "device/standin/kernel_support.h"

namespace squeeze::device {

using namespace standin_kernels;

// ---- batch.h: one enqueue per kBatchJobs jobs, as the .cu launches them ------------------------

namespace {

// Runs launch(its jobs) for each launch of `jobs` (those with n > 0) as the .cu files split them
// (launchJobs): kBatchJobs to a launch.
template <class Job, class Launch>
void forEachLaunch(const Job* jobs, size_t count, Launch&& launch) {
  const std::vector<Job> live = liveJobs(jobs, count);
  for (size_t first = 0; first < live.size(); first += kBatchJobs)
    launch(std::vector<Job>(live.begin() + first,
                            live.begin() + std::min(live.size(), first + kBatchJobs)));
}

}  // namespace

void gpuQuantEncodeBatch(const QuantSetting& s, const QuantEncodeJob* jobs, size_t count,
                         bool feedback, double* deviceNorms, GpuStream stream) {
  SQZ_ENFORCE(!feedback || deviceNorms, "a batched encode with feedback needs device norms");
  SQZ_ENFORCE(s.block > 0, "quantizer encode: block of 0 values");
  forEachLaunch(jobs, count, [&](std::vector<QuantEncodeJob> batch) {
    std::vector<Arg> args;
    for (const QuantEncodeJob& j : batch) {
      args.push_back({"x", j.x, j.n});
      args.push_back({"scales", j.scales, j.n});
      args.push_back({"codes", j.codes, j.n});
      if (feedback) args.push_back({"residual", j.residual, j.n});
    }
    if (!feedback) {
      enqueue(stream, "gpuQuantEncodeBatch", args, [=] {
        for (const QuantEncodeJob& j : batch) cpuQuantEncodeJob(s, j, nullptr);
      });
      return;
    }
    enqueueAddingSums(stream, "gpuQuantEncodeBatch", args, deviceNorms,
                      [=](double* in, double* sent) {
                        for (const QuantEncodeJob& j : batch) {
                          Norms norms;
                          Feedback fb{j.residual, &norms};
                          cpuQuantEncodeJob(s, j, &fb);
                          *in += norms.inputSq;
                          *sent += norms.sentSq;
                        }
                      });
  });
}

void gpuQuantDecodeBatch(const QuantSetting& s, const QuantDecodeJob* jobs, size_t count, bool add,
                         GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<QuantDecodeJob> batch) {
    SQZ_ENFORCE(s.block > 0, "quantizer decode: block of 0 values");
    std::vector<Arg> args;
    for (const QuantDecodeJob& j : batch) {
      args.push_back({"scales", j.scales, j.n});
      args.push_back({"codes", j.codes, j.n});
      args.push_back({"out", j.out, j.n});
      if (add) args.push_back({"local", j.local, j.n});
    }
    enqueue(stream, "gpuQuantDecodeBatch", args, [=] {
      for (const QuantDecodeJob& j : batch) cpuQuantDecodeJob(s, j, add);
    });
  });
}

void gpuNarrowBatch(Narrow kind, const CastJob* jobs, size_t count, GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<CastJob> batch) {
    std::vector<Arg> args;
    for (const CastJob& j : batch) {
      args.push_back({"in", static_cast<const float*>(j.in), j.n});
      args.push_back({"out", static_cast<uint16_t*>(j.out), j.n});
    }
    enqueue(stream, "gpuNarrowBatch", args, [=] {
      for (const CastJob& j : batch)
        cpuNarrow(kind, static_cast<const float*>(j.in), static_cast<uint16_t*>(j.out), j.n);
    });
  });
}

void gpuWidenBatch(Narrow kind, const CastJob* jobs, size_t count, bool add, GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<CastJob> batch) {
    std::vector<Arg> args;
    for (const CastJob& j : batch) {
      args.push_back({"in", static_cast<const uint16_t*>(j.in), j.n});
      args.push_back({"out", static_cast<float*>(j.out), j.n});
      if (add) args.push_back({"local", j.local, j.n});
    }
    enqueue(stream, "gpuWidenBatch", args, [=] {
      for (const CastJob& j : batch) {
        const auto* in = static_cast<const uint16_t*>(j.in);
        auto* out = static_cast<float*>(j.out);
        if (add)
          cpuWidenAdd(kind, out, j.local, in, j.n);
        else
          cpuWiden(kind, in, out, j.n);
      }
    });
  });
}

void gpuCastFeedbackBatch(Narrow kind, const CastFeedbackJob* jobs, size_t count,
                          double* deviceSums, GpuStream stream) {
  size_t allLanes = 0;
  for (size_t j = 0; j < count; ++j) allLanes += (jobs[j].n + kNormBlock - 1) / kNormBlock;
  if (allLanes == 0) return;
  // handle_kernels.cu's lanes of every chunk, in its scratch.
  if (deviceSums)
    scratchOf<HandleScratch>().partials.reserve(allLanes * kNormLanes * 2 * sizeof(float), stream);
  forEachLaunch(jobs, count, [&](std::vector<CastFeedbackJob> batch) {
    std::vector<Arg> args;
    for (const CastFeedbackJob& j : batch) {
      args.push_back({"x", j.x, j.n});
      args.push_back({"payload", j.payload, j.n});
      args.push_back({"residual", j.residual, j.n});
    }
    if (deviceSums) args.push_back({"deviceSums", deviceSums, 2});
    // castFeedbackKernel, then normTreeKernel adding each chunk's two sums in turn.
    enqueue(stream, "gpuCastFeedbackBatch", args, [=] {
      for (const CastFeedbackJob& j : batch) {
        cpuNarrow(kind, j.x, j.payload, j.n);
        std::vector<float> back(j.n);
        cpuWiden(kind, j.payload, back.data(), j.n);
        double in = 0, sent = 0;
        cpuFeedbackPass(j.x, back.data(), j.n, j.residual, deviceSums ? &in : nullptr,
                        deviceSums ? &sent : nullptr);
        if (deviceSums) {
          deviceSums[0] += in;
          deviceSums[1] += sent;
        }
      }
    });
    if (deviceSums) launchRest(stream, {"normTreeKernel"});
  });
}

void gpuSelectTopkBatch(const SelectJob* jobs, size_t count, GpuStream stream) {
  for (size_t j = 0; j < count; ++j)
    SQZ_ENFORCE(jobs[j].n <= kOneBlockSelectMax && jobs[j].k <= jobs[j].n,
                "a batched top-k selection of ", jobs[j].k, " of ", jobs[j].n, " values");
  forEachLaunch(jobs, count, [&](std::vector<SelectJob> batch) {
    std::vector<Arg> args;
    for (const SelectJob& j : batch) {
      args.push_back({"x", j.x, j.n});
      args.push_back({"idx", j.idx, j.k});
    }
    // selectBlockKernel, one block per chunk: sparse.cu's one-block route.
    enqueue(stream, "gpuSelectTopkBatch", args, [=] {
      for (const SelectJob& j : batch)
        if (j.k > 0)
          cpuPadSelection(j.x, j.n, j.idx, cpuSelectTopk(j.x, j.n, j.k, false, j.idx), j.k);
    });
  });
}

void gpuGatherBatch(const GatherJob* jobs, size_t count, GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<GatherJob> batch) {
    std::vector<Arg> args;
    for (const GatherJob& j : batch) {
      args.push_back({"x", j.x, j.n});
      args.push_back({"idx", j.idx, j.n});
      args.push_back({"out", j.out, j.n});
    }
    enqueue(stream, "gpuGatherBatch", args, [=] {
      for (const GatherJob& j : batch) cpuGather(j.x, j.idx, j.n, j.out);
    });
  });
}

namespace {

// dst = its entries (densify: over zeros; scatter-add: added), skipping indices at or past n and
// zero entries, as scatterKernel does.
void scatterOne(const ScatterJob& j, bool add) {
  if (!add && indicesBelow(j.idx, j.k, j.n)) return cpuDensify(j.idx, j.vals, j.k, j.dst, j.n);
  if (add && indicesBelow(j.idx, j.k, j.n))
    return cpuScatterAdd(j.dst, j.dst, j.n, j.idx, j.vals, j.k);
  if (!add) std::fill(j.dst, j.dst + j.n, 0.0f);
  for (size_t e = 0; e < j.k; ++e)
    if (j.idx[e] < j.n && j.vals[e] != 0.0f) {
      if (add)
        j.dst[j.idx[e]] += j.vals[e];
      else
        j.dst[j.idx[e]] = j.vals[e];
    }
}

std::vector<Arg> scatterArgs(const std::vector<ScatterJob>& batch) {
  std::vector<Arg> args;
  for (const ScatterJob& j : batch) {
    args.push_back({"idx", j.idx, j.k});
    args.push_back({"vals", j.vals, j.k});
    args.push_back({"dst", j.dst, j.n});
  }
  return args;
}

}  // namespace

void gpuDensifyBatch(const ScatterJob* jobs, size_t count, GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<ScatterJob> batch) {
    bool entries = false;
    for (const ScatterJob& j : batch) entries = entries || j.k > 0;
    // zeroKernel, then (any entries) scatterKernel.
    enqueue(stream, "gpuDensifyBatch", scatterArgs(batch), [=] {
      for (const ScatterJob& j : batch) scatterOne(j, false);
    });
    if (entries) launchRest(stream, {"scatterKernel"});
  });
}

void gpuScatterAddBatch(const ScatterJob* jobs, size_t count, GpuStream stream) {
  const std::vector<ScatterJob> entries = copyScatterAddLocals(jobs, count, stream);
  forEachLaunch(entries.data(), entries.size(), [&](std::vector<ScatterJob> batch) {
    enqueue(stream, "gpuScatterAddBatch", scatterArgs(batch), [=] {
      for (const ScatterJob& j : batch) scatterOne(j, true);
    });
  });
}

void gpuSparseFeedbackBatch(const SparseFeedbackJob* jobs, size_t count, double* deviceSums,
                            GpuStream stream, SparseScratch* given) {
  std::vector<SparseFeedbackJob> live;
  size_t allBlocks = 0;
  constexpr size_t kTile = 4096, kSumBlocks = 1024;  // sparse.cu's partial sums, one per block
  for (size_t j = 0; j < count; ++j) {
    if (jobs[j].n == 0 || (!jobs[j].residual && !deviceSums)) continue;
    live.push_back(jobs[j]);
    allBlocks += std::clamp<size_t>((jobs[j].n + kTile - 1) / kTile, 1, kSumBlocks);
  }
  if (live.empty()) return;
  if (deviceSums)
    sparseScratch(stream, given).sums.reserve(allBlocks * 2 * sizeof(double), stream);
  forEachLaunch(live.data(), live.size(), [&](std::vector<SparseFeedbackJob> batch) {
    std::vector<Arg> args;
    for (const SparseFeedbackJob& j : batch) {
      args.push_back({"x", j.x, j.n});
      args.push_back({"idx", j.idx, j.k});
      args.push_back({"residual", j.residual, j.n});
    }
    if (deviceSums) args.push_back({"deviceSums", deviceSums, 2});
    // feedbackKernel, then feedbackSumsKernel adding each chunk's sums in turn.
    enqueue(stream, "gpuSparseFeedbackBatch", args, [=] {
      for (const SparseFeedbackJob& j : batch) {
        double in = 0, sent = 0;
        cpuSparseFeedback(j.x, j.n, j.idx, j.k, j.residual, deviceSums ? &in : nullptr,
                          deviceSums ? &sent : nullptr);
        if (deviceSums) {
          deviceSums[0] += in;
          deviceSums[1] += sent;
        }
      }
    });
    if (deviceSums) launchRest(stream, {"feedbackSumKernel"});
  });
}

void gpuFindBadIndexBatch(const IndexCheckJob* jobs, size_t count, GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<IndexCheckJob> batch) {
    std::vector<Arg> args;
    for (const IndexCheckJob& j : batch) {
      args.push_back({"idx", j.idx, j.n});
      args.push_back({"found", j.found, 2});
      args.push_back({"report", j.report, 2});
    }
    // firstBadIndexKernel: found is {~0, ~0} on entry, and left so where there is a report.
    enqueue(stream, "gpuFindBadIndexBatch", args, [=] {
      for (const IndexCheckJob& j : batch) {
        if (j.found[0] != ~0ull || j.found[1] != ~0ull)
          throw Error(ErrorCode::kInternal, "an index check's found pair was not reset");
        const size_t bad = cpuFirstBadIndex(j.idx, j.n, j.count);
        const unsigned long long first = bad != SIZE_MAX ? bad : ~0ull;
        const unsigned long long value = bad != SIZE_MAX ? j.idx[bad] : ~0ull;
        if (j.report) {
          j.report[0] = first;
          j.report[1] = value;
        } else {
          j.found[0] = first;
          j.found[1] = value;
        }
      }
    });
  });
}

void gpuSmallCopyBatch(const SmallCopyJob* jobs, size_t count, GpuStream stream) {
  for (size_t j = 0; j < count; ++j)
    SQZ_ENFORCE(jobs[j].n <= kSmallCopyBytes, "a small copy of ", jobs[j].n, " bytes");
  forEachLaunch(jobs, count, [&](std::vector<SmallCopyJob> batch) {
    std::vector<Arg> args;
    for (const SmallCopyJob& j : batch) {
      args.push_back({"dst", static_cast<unsigned char*>(j.dst), j.n});
      if (j.src) args.push_back({"src", static_cast<const unsigned char*>(j.src), j.n});
    }
    enqueue(stream, "gpuSmallCopyBatch", args, [=] {
      for (const SmallCopyJob& j : batch) std::memcpy(j.dst, j.src ? j.src : j.bytes, j.n);
    });
  });
}

}  // namespace squeeze::device
