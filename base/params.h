// The one typed registry of SQZ_* parameters. Every tunable and every launcher variable is a
// row of SQZ_PARAMS below: its field, type, key, default and help. sqz-info prints this table and
// the README documents it; a duplicate key fails to compile (static_assert in params.cc).
// Values are read from the environment when a communicator is created (so each communicator
// sees one consistent snapshot) and by the logger once per process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace squeeze {

enum class ParamType { kInt, kBytes, kDouble, kString };

// X(field, type, key, default-as-string, help)
#define SQZ_PARAMS(X)                                                                          \
  X(debug, kString, "SQZ_DEBUG", "WARN", "Log level: NONE, WARN, INFO, DEBUG or TRACE.")        \
  X(debugSubsys, kString, "SQZ_DEBUG_SUBSYS", "ALL",                                           \
    "Comma list of INIT,TRANSPORT,ALGO,COMPRESS,DEVICE,TUNING,ENV,ALL; ^ negates. Filters "  \
    "INFO and below: warnings always show.")            \
  X(debugFile, kString, "SQZ_DEBUG_FILE", "",                                                  \
    "Log to this file instead of stderr; %h is the host, %p the pid.")                         \
  X(timeoutMs, kInt, "SQZ_TIMEOUT_MS", "300000",                                               \
    "Bound on every blocking wait (rendezvous, connect, send, receive), in ms.")               \
  X(spinUs, kInt, "SQZ_SPIN_US", "100",                                                        \
    "How long a call keeps polling its connections, yielding the CPU between polls, after it "  \
    "last made progress before it sleeps on them, in us. Spares a sleep and a wake-up per "      \
    "message (small and mid-size calls); 0 sleeps at once.")                                     \
  X(transport, kString, "SQZ_TRANSPORT", "cuda_ipc,shm,tcp",                                   \
    "Ordered transports to try per peer (cuda_ipc: GPU ranks on one host, CUDA builds only; "    \
    "shm: same host only; tcp: any; ucx: any, over UCX_TLS/UCX_NET_DEVICES; ib: peers with an "  \
    "active RDMA port). 'tcp' forces tcp.")                                                     \
  X(socketIfname, kString, "SQZ_SOCKET_IFNAME", "",                                            \
    "Interface for sockets: name prefix ('lo', 'eth'), ^ excludes, = exact. "                  \
    "Empty: first non-loopback interface that is up, else loopback.")                          \
  X(tcpNsocks, kInt, "SQZ_TCP_NSOCKS", "2", "TCP sockets per peer connection (1-16).")         \
  X(tcpCongestion, kString, "SQZ_TCP_CONGESTION", "cubic",                                    \
    "TCP congestion control of the tcp transport's data sockets. cubic keeps a saturated link " \
    "full where BBR's periodic queue draining idles it (2-4% on a 1 Gbit/s link); 'system' "   \
    "keeps the kernel's default.")                                                             \
  X(tcpSndbuf, kBytes, "SQZ_TCP_SNDBUF", "0",                                                \
    "tcp: each data socket's send buffer (SO_SNDBUF, which the kernel doubles), bounding the " \
    "bytes a socket has in flight. Towards a switch port with a shallow buffer, keep "         \
    "SQZ_TCP_NSOCKS x this under it (5 ms at 1 Gbit/s, 625 KB: 150K), so TCP never overflows " \
    "it: every drop stalls a ring until its retransmission lands. 0: the kernel's autotuning.") \
  X(chunkBytes, kBytes, "SQZ_CHUNK_BYTES", "512K",                                             \
    "Pipeline chunk: algorithms split each segment into pieces of at most this size.")        \
  X(encodeThreads, kInt, "SQZ_ENCODE_THREADS", "1",                                            \
    "Compressed calls on host memory: threads (the caller's and this many - 1 more, 1-64) "    \
    "that encode the pieces of one step that are ready together in parallel. The same bits at " \
    "any count; pays only where a rank has idle cores (see perf/RESULTS.md).")                 \
  X(shmBufferBytes, kBytes, "SQZ_SHM_BUFFER_BYTES", "4M",                                      \
    "Shared-memory ring buffer per direction per peer pair.")                                  \
  X(shmSingleCopyBytes, kBytes, "SQZ_SHM_SINGLE_COPY_BYTES", "0",                             \
    "Shared memory: messages of at least this size are copied once, by the receiver reading "  \
    "the sender's buffer (process_vm_readv), instead of twice through the ring. 0: never.")     \
  X(shmDirectBytes, kBytes, "SQZ_SHM_DIRECT_BYTES", "1M",                                     \
    "Shared memory: where every rank shares one host over shm, a dense all-reduce on host "     \
    "memory runs the direct algorithm, reading the peers' windows of this many bytes per "      \
    "rank (about 2.5x this in /dev/shm per rank). 0: no window, the other algorithms run.")    \
  X(ibHca, kString, "SQZ_IB_HCA", "",                                                          \
    "InfiniBand: device[:port] for the ib transport (e.g. mlx5_0:1). Empty: the first device " \
    "with an active port.")                                                                    \
  X(ibGidIndex, kInt, "SQZ_IB_GID_INDEX", "0",                                                 \
    "InfiniBand: GID table index (RoCE needs one; InfiniBand with a LID ignores it).")         \
  X(tunerCalibrate, kInt, "SQZ_TUNER_CALIBRATE", "1",                                          \
    "Tuner: 1 measures when a communicator is created (not when SQZ_ALGO is set). On one "     \
    "host: a ping-pong over the slowest transport and the CPU reduction (a few ms), scaling "  \
    "the constants (SQZ_*_LATENCY_US, SQZ_*_GBPS) by how this machine compares with the one "  \
    "its rows were fit on. Across hosts: every ring link's latency and rate, the slowest "     \
    "replacing SQZ_TCP_LATENCY_US and SQZ_TCP_GBPS, and each all-reduce algorithm at 4 KiB "   \
    "(about 0.25 s at 1 Gbit/s). "                                                             \
    "sqz-info --tuning under a launcher shows it. 0 uses the constants as set. Alike on "      \
    "every rank.")                                                                             \
  X(tunerFile, kString, "SQZ_TUNER_FILE", "",                                                  \
    "Tuner: a file written by scripts/calibrate-tuner.sh (format: algorithms/cost_model.h); "  \
    "its rows replace the built-in ones for the transports it names. The same on every rank.") \
  X(cudaIpcBufferBytes, kBytes, "SQZ_CUDA_IPC_BUFFER_BYTES", "8M",                              \
    "CUDA IPC transport: device staging ring per direction per GPU peer pair (communicators do " \
    "not use the transport today: see SQZ_DEVICE_STAGING_BYTES).")                             \
  X(deviceStagingBytes, kBytes, "SQZ_DEVICE_STAGING_BYTES", "16M",                             \
    "Device calls: pinned host memory per communicator through which the caller's stream "      \
    "copies a call's buffers, in two halves; a call moves in pieces of at most one half, three " \
    "stream operations each (64K-4G).")                                                         \
  X(deviceDirectBytes, kBytes, "SQZ_DEVICE_DIRECT_BYTES", "8M",                               \
    "Device calls: where every rank shares one host (a shared-memory window, "                 \
    "SQZ_SHM_DIRECT_BYTES > 0) and there are 2-8 ranks, the dense collectives on device "      \
    "buffers run on the caller's stream alone (copies, waits on words, a check and the "       \
    "reduction kernels), reading the peers' windows of two sets of this many bytes of device " \
    "memory per rank (CUDA IPC); larger calls move in rounds of this size. 0: off, every "     \
    "device call goes through SQZ_DEVICE_STAGING_BYTES and the host (64K-1G).")                \
  X(algo, kString, "SQZ_ALGO", "",                                                             \
    "Force algorithms: 'ring', or per collective and size, 'allreduce:0-64K=rhd,64K-inf=ring'." \
    " Empty: the tuner's cost model decides.")                                                 \
  X(checkMode, kString, "SQZ_CHECK_MODE", "headers",                                           \
    "Call agreement: 'headers' checks every message's header (free; broadcast and reduce also " \
    "agree on their root first, always); 'full' also exchanges each other call's description " \
    "around a ring first (one latency).")                                                        \
  X(codecMinBytes, kBytes, "SQZ_CODEC_MIN_BYTES", "16K",                                      \
    "Compressed all-reduce: tensors smaller than this travel dense (codec key min_bytes).")   \
  X(codecAutoDense, kInt, "SQZ_CODEC_AUTO_DENSE", "1",                                        \
    "Compressed all-reduce: 1 runs a call dense when compressing costs more time than it "    \
    "saves (measured per codec; codec key auto_dense), 0 always compresses.")                 \
  X(codecDelayUs, kInt, "SQZ_CODEC_DELAY_US", "0",                                         \
    "Testing: adds this many microseconds of encode time to every compressed call, to make a " \
    "codec artificially slow (the pay-off guard's test). 0: none.")                           \
  X(tcpLatencyUs, kDouble, "SQZ_TCP_LATENCY_US", "40", "Tuner: tcp latency per message (us).")  \
  X(tcpGbps, kDouble, "SQZ_TCP_GBPS", "1.2",                                                  \
    "Tuner: tcp bandwidth per rank (GB/s); across hosts calibration measures the links "       \
    "instead (SQZ_TUNER_CALIBRATE).")                                                          \
  X(shmLatencyUs, kDouble, "SQZ_SHM_LATENCY_US", "8", "Tuner: shm latency per message (us).")   \
  X(shmGbps, kDouble, "SQZ_SHM_GBPS", "2.5", "Tuner: shm bandwidth per rank (GB/s).")            \
  X(reduceGbps, kDouble, "SQZ_REDUCE_GBPS", "4", "Tuner: combine throughput per rank (GB/s).")   \
  X(ncclCodec, kString, "SQZ_NCCL_CODEC", "",                                                 \
    "libsqueeze-nccl.so.2 only: float32 ncclAllReduce sum/avg through a codec per buffer, by "  \
    "size, e.g. '0-1M=dense,1M-inf=topk:ratio=0.01'. Empty: every call dense.")                 \
  X(uniqueId, kString, "SQZ_UNIQUE_ID", "",                                                    \
    "Launcher: hex sqzUniqueId for sqzCommInitFromEnv (set by sqzrun).")                       \
  X(rank, kString, "SQZ_RANK", "", "Launcher: this process's rank for sqzCommInitFromEnv.")    \
  X(worldSize, kString, "SQZ_WORLD_SIZE", "", "Launcher: rank count for sqzCommInitFromEnv.")  \
  X(localRank, kString, "SQZ_LOCAL_RANK", "", "Launcher: rank among this host's ranks.")       \
  X(localSize, kString, "SQZ_LOCAL_SIZE", "", "Launcher: number of ranks on this host.")        \
  X(root, kString, "SQZ_ROOT", "",                                                             \
    "Launcher: host:port of the rendezvous, hosted by rank 0 (else MASTER_ADDR:MASTER_PORT).") \
  X(secret, kString, "SQZ_SECRET", "",                                                         \
    "Launcher: 32 hex digits, the job secret SQZ_ROOT rendezvous requires (none: unauthenticated).")

struct Params {
#define SQZ_PARAM_FIELD_kInt int64_t
#define SQZ_PARAM_FIELD_kBytes uint64_t
#define SQZ_PARAM_FIELD_kDouble double
#define SQZ_PARAM_FIELD_kString std::string
#define SQZ_PARAM_DECLARE(field, type, key, def, help) SQZ_PARAM_FIELD_##type field;
  SQZ_PARAMS(SQZ_PARAM_DECLARE)
#undef SQZ_PARAM_DECLARE
};

struct ParamInfo {
  const char* key;
  ParamType type;
  const char* defaultValue;
  const char* help;
};

// Every parameter, in table order.
const std::vector<ParamInfo>& paramTable();

// Reads the environment now. Throws Error(kInvalidArgument) naming the variable, the value and
// what was expected when a value does not parse.
Params loadParams();

// The value a variable has in the environment now, or its default; for sqz-info.
std::string paramValueString(const ParamInfo& info);

}  // namespace squeeze
