// The C API's codecs: sqzCodecCreate (a spec string) and sqzCodecCreateConfig (a
// sqzCodecConfig_t) make a codec for one tensor on one communicator, sqzAllReduceCompressed runs
// an all-reduce through it, and the stats, state save/load and destroy calls read and free it.
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "api/api_checks.h"
#include "compress/handle.h"

using namespace squeeze;
using namespace squeeze::api;

constexpr uint32_t kCodecMagic = 0x43444f43;  // "CODC"

struct sqzCodec {
  uint32_t magic = kCodecMagic;
  sqzComm* comm = nullptr;
  std::unique_ptr<CodecHandle> impl;
};

namespace {

// The codecs alive now (from create until destroy), for moveCodecs.
std::mutex liveCodecsMu;  // protects liveCodecs and their comm fields' moves
std::set<sqzCodec*> liveCodecs;

sqzCodec* checkCodec(sqzCodec_t codec, const char* fn) {
  if (!codec)
    raise(ErrorCode::kInvalidArgument, fn, ": codec is NULL; create one with sqzCodecCreate.");
  if (codec->magic != kCodecMagic || !codec->impl)
    raise(ErrorCode::kInvalidArgument, fn, ": codec is not a live codec (destroyed, or not from "
          "sqzCodecCreate).");
  return codec;
}

// Waits for the codec's enqueued device calls (its state is theirs until they have run).
void settle(sqzCodec* c) {
  if (!commIsLive(c->comm)) return;  // destroyed: it drained its calls then
  Communicator& impl = *c->comm->impl;
  {
    std::lock_guard<std::mutex> lock(impl.streamContextMutex());
    c->impl->settleStreams(impl);  // the calls on the callers' streams
  }
  impl.drainDevice();
}

sqzResult_t createCodec(sqzCodec_t* out, const CodecSpec& spec, size_t count,
                        sqzDataType_t datatype, sqzComm_t comm, const char* fn) {
  return apiGuard(comm, [&] {
    if (!out) raise(ErrorCode::kInvalidArgument, fn, ": codec (the output pointer) is NULL.");
    *out = nullptr;
    checkComm(comm, fn);
    checkCount(count, fn);
    checkType(datatype, fn);
    auto codec = std::make_unique<sqzCodec>();
    codec->comm = comm;
    codec->impl = createCodecHandle(spec, count, static_cast<DataType>(datatype));
    SQZ_INFO(kCompress, "rank ", comm->impl->rank(), ": codec ", spec.str(), " for ", count,
             " elements of ", dataTypeName(static_cast<DataType>(datatype)));
    std::lock_guard<std::mutex> lock(liveCodecsMu);
    liveCodecs.insert(codec.get());
    *out = codec.release();
  });
}

}  // namespace

namespace squeeze::api {

void moveCodecs(const sqzComm* from, sqzComm* to) {
  std::lock_guard<std::mutex> lock(liveCodecsMu);
  for (sqzCodec* c : liveCodecs)
    if (c->comm == from) c->comm = to;
}

}  // namespace squeeze::api

sqzResult_t sqzCodecCreate(sqzCodec_t* codec, const char* spec, size_t count,
                           sqzDataType_t datatype, sqzComm_t comm) {
  CodecSpec parsed;
  sqzResult_t r = apiGuard(comm, [&] {
    if (!spec) raise(ErrorCode::kInvalidArgument, "sqzCodecCreate: spec is NULL; pass e.g. "
                     "\"topk:ratio=0.001\".");
    parsed = CodecSpec::parse(spec);
  });
  if (r != sqzSuccess) {
    if (codec) *codec = nullptr;
    return r;
  }
  return createCodec(codec, parsed, count, datatype, comm, "sqzCodecCreate");
}

sqzResult_t sqzCodecCreateConfig(sqzCodec_t* codec, const sqzCodecConfig_t* config, size_t count,
                                 sqzDataType_t datatype, sqzComm_t comm) {
  CodecSpec spec;
  sqzResult_t r = apiGuard(comm, [&] {
    if (!config) raise(ErrorCode::kInvalidArgument, "sqzCodecCreateConfig: config is NULL.");
    if (config->magic != SQZ_CODEC_CONFIG_MAGIC)
      raise(ErrorCode::kInvalidArgument, "sqzCodecConfig_t was not initialized; start from "
            "'sqzCodecConfig_t config = SQZ_CODEC_CONFIG_INITIALIZER;'.");
    if (config->size < offsetof(sqzCodecConfig_t, seed) + sizeof(config->seed))
      raise(ErrorCode::kInvalidArgument, "sqzCodecConfig_t.size is ", config->size,
            ", smaller than this library's; rebuild against this squeeze.h.");
    if (!config->method)
      raise(ErrorCode::kInvalidArgument, "sqzCodecConfig_t.method is NULL; set it, e.g. \"topk\".");
    spec.method = config->method;
    auto set = [](std::optional<double>& slot, double v) {
      if (v != SQZ_CODEC_UNDEF) slot = v;
    };
    set(spec.ratio, config->ratio);
    set(spec.levels, config->levels);
    set(spec.block, config->block);
    set(spec.threshold, config->threshold);
    set(spec.sample, config->sample);
    set(spec.momentum, config->momentum);
    set(spec.clip, config->clip);
    set(spec.warmup, config->warmup);
    set(spec.rank, config->rank);
    set(spec.cols, config->cols);
    set(spec.ef, config->errorFeedback);
    set(spec.minBytes, config->minBytes);
    set(spec.seed, config->seed);
    if (config->size >= offsetof(sqzCodecConfig_t, autoDense) + sizeof(config->autoDense)) {
      if (config->base) spec.base = config->base;
      set(spec.cfMin, config->cfMin);
      set(spec.cfMax, config->cfMax);
      set(spec.step, config->step);
      set(spec.window, config->window);
      set(spec.eps, config->eps);
      set(spec.omega, config->omega);
      set(spec.cfLow, config->cfLow);
      set(spec.cfHigh, config->cfHigh);
      set(spec.interval, config->interval);
      set(spec.eta, config->eta);
      set(spec.autoDense, config->autoDense);
    }
  });
  if (r != sqzSuccess) {
    if (codec) *codec = nullptr;
    return r;
  }
  return createCodec(codec, spec, count, datatype, comm, "sqzCodecCreateConfig");
}

sqzResult_t sqzAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                   sqzDataType_t datatype, sqzRedOp_t op, sqzCodec_t codec,
                                   sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    const char* fn = "sqzAllReduceCompressed";
    checkCommon(comm, count, count, datatype, fn);
    checkOp(op, fn);
    checkBuffers(sendbuff, recvbuff, count, fn);
    const size_t total = count * dataTypeSize(static_cast<DataType>(datatype));
    checkOverlap({"sendbuff", sendbuff, total}, {"recvbuff", recvbuff, total}, 0,
                 "sendbuff == recvbuff", fn);
    const bool device =
        onDevice(comm, {{"sendbuff", sendbuff, total}, {"recvbuff", recvbuff, total}}, stream, fn);
    sqzCodec* c = checkCodec(codec, fn);
    CodecHandle& h = *c->impl;
    if (c->comm != comm)
      raise(ErrorCode::kInvalidArgument, fn, ": the codec was created for another communicator; "
            "create one codec per tensor and communicator.");
    if (count != h.count() || static_cast<DataType>(datatype) != h.dtype())
      raise(ErrorCode::kInvalidArgument, fn, ": the codec is for ", h.count(), " elements of ",
            dataTypeName(h.dtype()), ", the call passes ", count, " of ",
            dataTypeName(static_cast<DataType>(datatype)), ". A codec belongs to one tensor.");
    if (h.spec().method != "dense" && op != sqzSum && op != sqzAvg)
      raise(ErrorCode::kInvalidArgument, fn, ": codec ", h.spec().method, " reduces with sqzSum "
            "or sqzAvg only, not ", redOpName(static_cast<RedOp>(op)), ".");
    const char* s = static_cast<const char*>(sendbuff);
    const char* d = static_cast<const char*>(recvbuff);
    const size_t bytes = count * dataTypeSize(h.dtype());
    if (s != d && s < d + bytes && d < s + bytes)
      raise(ErrorCode::kInvalidArgument, fn, ": sendbuff and recvbuff overlap without being "
            "equal; pass the same pointer for in place, or separate buffers.");
    if (count == 0) return;
    Communicator& impl = *comm->impl;
    if (!device) {
      settle(c);  // after the device calls enqueued before it
      h.allReduce(impl, sendbuff, recvbuff, static_cast<RedOp>(op));
      return;
    }
    // On the caller's stream alone where the call qualifies (CodecHandle::enqueueOnStream);
    // else the handle's passes and its collectives run on the progress thread on host copies of
    // the buffers, in stream order. The codec must stay alive until then (as the buffers must
    // until the stream has passed the call).
    impl.throwIfFailed();
    {
      std::lock_guard<std::mutex> lock(impl.streamContextMutex());
      if (h.enqueueOnStream(impl, sendbuff, recvbuff, static_cast<RedOp>(op), stream)) {
        impl.ranOnStream();
        return;
      }
    }
    impl.enqueueTask(stream, {{sendbuff, bytes, true, false}, {recvbuff, bytes, false, true}},
                     [&h, &impl, sendbuff, recvbuff, op](const device::HostCopies& copies) {
                       h.allReduce(impl, copies.at(sendbuff), copies.at(recvbuff),
                                   static_cast<RedOp>(op));
                     },
                     strCat("compressed all-reduce (", h.spec().method, ") of ", count, " ",
                            dataTypeName(h.dtype())));
  });
}

sqzResult_t sqzCodecGetStats(sqzCodec_t codec, sqzCodecStats_t* stats) {
  return apiGuard(nullptr, [&] {
    sqzCodec* c = checkCodec(codec, "sqzCodecGetStats");
    settle(c);
    const CodecStats s = c->impl->stats();
    if (!stats) raise(ErrorCode::kInvalidArgument, "sqzCodecGetStats: stats is NULL.");
    stats->calls = s.calls;
    stats->wireBytes = s.wireBytes;
    stats->denseBytes = s.denseBytes;
    stats->ratio = s.wireBytes ? double(s.denseBytes) / double(s.wireBytes) : 1.0;
    stats->gain = s.gain;
    stats->residualNorm = s.residualNorm;
    stats->encodeSeconds = s.encodeSeconds;
    stats->combineSeconds = s.combineSeconds;
    stats->decodeSeconds = s.decodeSeconds;
    stats->lastRatio = s.lastRatio;
    stats->cf = s.cf;
    stats->phase = static_cast<int>(s.phase);
    stats->cfMin = s.cfMin;
    stats->denseCalls = s.denseCalls;
    stats->guardDenseCalls = s.guardDenseCalls;
    stats->linkDensePerByte = s.linkDensePerByte;
    stats->linkCompressedPerByte = s.linkCompressedPerByte;
    stats->codecPerByte = s.codecPerByte;
  });
}

sqzResult_t sqzCodecSaveState(sqzCodec_t codec, void* buf, size_t* bytes) {
  return apiGuard(nullptr, [&] {
    sqzCodec* c = checkCodec(codec, "sqzCodecSaveState");
    settle(c);
    if (!bytes) raise(ErrorCode::kInvalidArgument, "sqzCodecSaveState: bytes is NULL.");
    std::vector<char> state = c->impl->saveState();
    if (!buf) {
      *bytes = state.size();
      return;
    }
    if (*bytes < state.size())
      raise(ErrorCode::kInvalidArgument, "sqzCodecSaveState: the buffer holds ", *bytes,
            " bytes; the state needs ", state.size(), ". Ask for the size with buf NULL first.");
    std::memcpy(buf, state.data(), state.size());
    *bytes = state.size();
  });
}

sqzResult_t sqzCodecLoadState(sqzCodec_t codec, const void* buf, size_t bytes) {
  return apiGuard(nullptr, [&] {
    sqzCodec* c = checkCodec(codec, "sqzCodecLoadState");
    settle(c);
    if (!buf) raise(ErrorCode::kInvalidArgument, "sqzCodecLoadState: buf is NULL.");
    c->impl->loadState(buf, bytes);
  });
}

sqzResult_t sqzCodecDestroy(sqzCodec_t codec) {
  return apiGuard(nullptr, [&] {
    if (!codec) return;
    settle(checkCodec(codec, "sqzCodecDestroy"));  // its enqueued calls still use it
    if (logEnabled(LogLevel::kInfo, LogSubsys::kCompress)) {  // stats() is a pass over the state
      const CodecStats st = codec->impl->stats();
      if (st.calls == 0)  // e.g. the NCCL shim's check of an SQZ_NCCL_CODEC spec at init
        SQZ_INFO(kCompress, "codec ", codec->impl->spec().str(), " freed unused (no all-reduce "
                 "went through it)");
      else
        SQZ_INFO(kCompress, "codec ", codec->impl->spec().str(), " destroyed after ", st.calls,
                 " calls; sent ", st.wireBytes, " payload bytes for ", st.denseBytes, " dense");
    }
    {
      std::lock_guard<std::mutex> lock(liveCodecsMu);
      liveCodecs.erase(codec);
    }
    codec->magic = 0;
    delete codec;
  });
}
