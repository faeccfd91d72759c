// TransportSettings: what the transports read of a communicator's configuration. CommConfig
// (src/core/config.h) derives from it, so a transport takes the communicator's configuration
// without transports/ including src/core/.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace squeeze {

// The largest SQZ_SHM_BUFFER_BYTES: also the most a peer's shm segment header may claim, checked
// before any size arithmetic on it.
constexpr size_t kMaxShmBufferBytes = size_t{1} << 30;

struct TransportSettings {
  int timeoutMs = 300000;
  std::vector<std::string> transports;  // in preference order
  int tcpNsocks = 2;
  std::string tcpCongestion = "cubic";  // SQZ_TCP_CONGESTION ("system": the kernel's default)
  size_t tcpSndbuf = 0;                 // SQZ_TCP_SNDBUF (0: the kernel's autotuning)
  size_t shmBufferBytes = 4 << 20;
  // The GPU this communicator's device calls run on (-1: none; host memory only). Set at init
  // from sqzConfig_t.device or the caller's current device when a GPU is usable.
  int device = -1;
  size_t cudaIpcBufferBytes = 8 << 20;  // SQZ_CUDA_IPC_BUFFER_BYTES
  size_t deviceStagingBytes = 16 << 20;  // SQZ_DEVICE_STAGING_BYTES (device/call_queue.h)
  size_t deviceDirectBytes = 8 << 20;    // SQZ_DEVICE_DIRECT_BYTES (device/stream_collectives.h)
  size_t shmSingleCopyBytes = 0;        // SQZ_SHM_SINGLE_COPY_BYTES (0: never)
  size_t shmDirectBytes = 1 << 20;      // SQZ_SHM_DIRECT_BYTES: window capacity (0: no window)
  std::string ibHca;                    // SQZ_IB_HCA ("" or device[:port])
  int ibGidIndex = 0;                   // SQZ_IB_GID_INDEX
};

}  // namespace squeeze
