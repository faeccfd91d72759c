// Validation of communicator settings (see config.h).
#include "core/config.h"

#include <algorithm>

#include "base/error.h"
#include "base/logging.h"
#include "base/strings.h"
#include "transports/shm/window.h"
#include "transports/transport.h"

namespace squeeze {

CommConfig CommConfig::fromParams(const Params& p) {
  CommConfig c;
  if (p.timeoutMs < 1 || p.timeoutMs > 7 * 24 * 3600 * 1000LL)
    raise(ErrorCode::kInvalidArgument, "SQZ_TIMEOUT_MS=", p.timeoutMs,
          " is out of range; use 1 to 604800000 ms.");
  c.timeoutMs = static_cast<int>(p.timeoutMs);
  if (p.spinUs < 0 || p.spinUs > 1000000)
    raise(ErrorCode::kInvalidArgument, "SQZ_SPIN_US=", p.spinUs,
          " is out of range; use 0 (sleep at once) to 1000000 us.");
  c.spinUs = static_cast<int>(p.spinUs);
  const auto& known = availableTransports();
  for (const std::string& name : split(p.transport, ',')) {
    if (name.empty()) continue;
    // cuda_ipc names GPU ranks of one host. A device call's stream copies its buffers through
    // pinned host memory and its host side moves them (device/call_queue.h): between ranks of
    // one host that is shm's work, so cuda_ipc stands for shm (the transport moves device
    // memory with CUDA calls, which a progress thread must not make while a caller's stream
    // is held).
    if (name == "cuda_ipc") {
      if (std::find(c.transports.begin(), c.transports.end(), "shm") == c.transports.end() &&
          std::find(known.begin(), known.end(), "shm") != known.end())
        c.transports.push_back("shm");
      continue;
    }
    if (name == "shm" &&
        std::find(c.transports.begin(), c.transports.end(), "shm") != c.transports.end())
      continue;
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      raise(ErrorCode::kInvalidArgument, "SQZ_TRANSPORT names '", name,
            "', which is not a transport of this build; choose from: ", list, ".");
    }
    c.transports.push_back(name);
  }
  if (c.transports.empty())
    raise(ErrorCode::kInvalidArgument, "SQZ_TRANSPORT='", p.transport,
          "' names no transport; use e.g. 'shm,tcp' or 'tcp'.");
  if (p.tcpNsocks < 1 || p.tcpNsocks > 16)
    raise(ErrorCode::kInvalidArgument, "SQZ_TCP_NSOCKS=", p.tcpNsocks,
          " is out of range; use 1 to 16.");
  c.tcpNsocks = static_cast<int>(p.tcpNsocks);
  // TCP_CA_NAME_MAX is 16 with the terminating zero; kernel names are [a-z0-9_].
  const std::string& cc = p.tcpCongestion;
  if (cc.empty() || cc.size() > 15 ||
      cc.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
    raise(ErrorCode::kInvalidArgument, "SQZ_TCP_CONGESTION='", p.tcpCongestion,
          "' is not a congestion control name; use e.g. 'cubic', 'bbr' or 'system' (the kernel's "
          "default; see /proc/sys/net/ipv4/tcp_available_congestion_control).");
  c.tcpCongestion = p.tcpCongestion;
  if (p.tcpSndbuf != 0 && (p.tcpSndbuf < 4096 || p.tcpSndbuf > (1ull << 30)))
    raise(ErrorCode::kInvalidArgument, "SQZ_TCP_SNDBUF=", p.tcpSndbuf,
          " is out of range; use 0 (the kernel sizes it) or 4K to 1G.");
  c.tcpSndbuf = p.tcpSndbuf;
  if (p.chunkBytes < 4096 || p.chunkBytes > (1ull << 30))
    raise(ErrorCode::kInvalidArgument, "SQZ_CHUNK_BYTES=", p.chunkBytes,
          " is out of range; use 4K to 1G.");
  c.chunkBytes = p.chunkBytes;
  if (p.encodeThreads < 1 || p.encodeThreads > 64)
    raise(ErrorCode::kInvalidArgument, "SQZ_ENCODE_THREADS=", p.encodeThreads,
          " is out of range; use 1 (encode on the calling thread alone) to 64.");
  c.encodeThreads = static_cast<int>(p.encodeThreads);
  c.codecMinBytes = p.codecMinBytes;
  if (p.codecAutoDense != 0 && p.codecAutoDense != 1)
    raise(ErrorCode::kInvalidArgument, "SQZ_CODEC_AUTO_DENSE=", p.codecAutoDense,
          " must be 1 (run a call dense when compressing does not pay) or 0 (always compress).");
  c.codecAutoDense = p.codecAutoDense == 1;
  if (!(p.codecDelayUs >= 0 && p.codecDelayUs <= 60e6))
    raise(ErrorCode::kInvalidArgument, "SQZ_CODEC_DELAY_US=", p.codecDelayUs,
          " is out of range; use 0 (none) to 60000000.");
  c.codecDelayUs = p.codecDelayUs;
  if (p.shmBufferBytes < 65536 || p.shmBufferBytes > kMaxShmBufferBytes)
    raise(ErrorCode::kInvalidArgument, "SQZ_SHM_BUFFER_BYTES=", p.shmBufferBytes,
          " is out of range; use 64K to 1G.");
  c.shmBufferBytes = p.shmBufferBytes;
  if (p.cudaIpcBufferBytes < 65536 || p.cudaIpcBufferBytes > kMaxShmBufferBytes)
    raise(ErrorCode::kInvalidArgument, "SQZ_CUDA_IPC_BUFFER_BYTES=", p.cudaIpcBufferBytes,
          " is out of range; use 64K to 1G.");
  c.cudaIpcBufferBytes = p.cudaIpcBufferBytes;
  if (p.deviceStagingBytes < 65536 || p.deviceStagingBytes > (4ull << 30))
    raise(ErrorCode::kInvalidArgument, "SQZ_DEVICE_STAGING_BYTES=", p.deviceStagingBytes,
          " is out of range; use 64K to 4G.");
  c.deviceStagingBytes = p.deviceStagingBytes;
  if (p.deviceDirectBytes != 0 &&
      (p.deviceDirectBytes < 65536 || p.deviceDirectBytes > kMaxShmBufferBytes))
    raise(ErrorCode::kInvalidArgument, "SQZ_DEVICE_DIRECT_BYTES=", p.deviceDirectBytes,
          " is out of range; use 0 (off) or 64K to 1G.");
  c.deviceDirectBytes = p.deviceDirectBytes;
  if (p.shmSingleCopyBytes != 0 &&
      (p.shmSingleCopyBytes < 4096 || p.shmSingleCopyBytes > (1ull << 40)))
    raise(ErrorCode::kInvalidArgument, "SQZ_SHM_SINGLE_COPY_BYTES=", p.shmSingleCopyBytes,
          " is out of range; use 0 (never) or 4K to 1T.");
  c.shmSingleCopyBytes = p.shmSingleCopyBytes;
  if (p.shmDirectBytes != 0 &&
      (p.shmDirectBytes < kMinWindowBytes || p.shmDirectBytes > kMaxWindowBytes))
    raise(ErrorCode::kInvalidArgument, "SQZ_SHM_DIRECT_BYTES=", p.shmDirectBytes,
          " is out of range; use 0 (no direct all-reduce) or 4K to 1G.");
  c.shmDirectBytes = p.shmDirectBytes;
  c.ibHca = p.ibHca;
  if (p.ibGidIndex < 0 || p.ibGidIndex > 255)
    raise(ErrorCode::kInvalidArgument, "SQZ_IB_GID_INDEX=", p.ibGidIndex,
          " is out of range; use 0 to 255 (see `show_gids` for the port's table).");
  c.ibGidIndex = static_cast<int>(p.ibGidIndex);
  if (p.tunerCalibrate != 0 && p.tunerCalibrate != 1)
    raise(ErrorCode::kInvalidArgument, "SQZ_TUNER_CALIBRATE=", p.tunerCalibrate,
          " must be 1 (measure the transports at init) or 0 (use the built-in constants).");
  c.tunerCalibrate = p.tunerCalibrate == 1;
  c.tunerFile = p.tunerFile;
  c.socketIfname = p.socketIfname;
  c.algoSpec = p.algo;
  if (p.checkMode != "headers" && p.checkMode != "full")
    raise(ErrorCode::kInvalidArgument, "SQZ_CHECK_MODE='", p.checkMode,
          "' is not a check mode; use 'headers' (the default) or 'full'.");
  c.fullCheck = p.checkMode == "full";
  // The logger reads these itself (and keeps its defaults for a bad value); refused here, where
  // every other setting is, so a typo is never silently ignored.
  LogLevel level;
  if (!parseLogLevel(p.debug.c_str(), &level))
    raise(ErrorCode::kInvalidArgument, "SQZ_DEBUG='", p.debug, "' is not a log level; use NONE, "
          "WARN (the default), INFO, DEBUG or TRACE.");
  uint32_t mask;
  std::string unknown;
  if (!parseLogMask(p.debugSubsys.c_str(), &mask, &unknown))
    raise(ErrorCode::kInvalidArgument, "SQZ_DEBUG_SUBSYS='", p.debugSubsys, "' names '", unknown,
          "', which is not a subsystem; use a comma list of INIT, TRANSPORT, ALGO, COMPRESS, "
          "DEVICE, TUNING, ENV or ALL (the default), with a leading ^ to exclude them.");
  // The tuner's constants: a value far outside these ranges makes every cost infinite or zero, and
  // the first call could choose no algorithm.
  const auto checkTuner = [](const char* key, double v, double lo, double hi, const char* unit) {
    if (!(v >= lo && v <= hi))
      raise(ErrorCode::kInvalidArgument, key, "=", v, " is out of range; use ", lo, " to ", hi,
            " ", unit, ", or unset it for the default.");
  };
  checkTuner("SQZ_TCP_LATENCY_US", p.tcpLatencyUs, 1e-3, 1e7, "us");
  checkTuner("SQZ_SHM_LATENCY_US", p.shmLatencyUs, 1e-3, 1e7, "us");
  checkTuner("SQZ_TCP_GBPS", p.tcpGbps, 1e-6, 1e6, "GB/s");
  checkTuner("SQZ_SHM_GBPS", p.shmGbps, 1e-6, 1e6, "GB/s");
  checkTuner("SQZ_REDUCE_GBPS", p.reduceGbps, 1e-6, 1e6, "GB/s");
  const double gamma = 1 / (p.reduceGbps * 1e9);
  c.tcpModel = calibratedModel("tcp", p.tcpLatencyUs * 1e-6, 1 / (p.tcpGbps * 1e9), gamma);
  c.shmModel = calibratedModel("shm", p.shmLatencyUs * 1e-6, 1 / (p.shmGbps * 1e9), gamma);
  c.netModel = calibratedModel("net", p.tcpLatencyUs * 1e-6, 1 / (p.tcpGbps * 1e9), gamma);
  return c;
}

}  // namespace squeeze
