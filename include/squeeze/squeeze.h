/*
 * squeeze.h: the public C API of Squeeze, a collective communication library with NCCL's call
 * shapes (porting is a rename: nccl -> sqz) and gradient compression inside the collectives.
 *
 * Thread safety, unless a function says otherwise: a communicator is used by one thread at a
 * time; different communicators may be used concurrently from different threads. Collectives on
 * one communicator must be called in the same order on every rank.
 */
#ifndef SQUEEZE_SQUEEZE_H_
#define SQUEEZE_SQUEEZE_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define SQZ_API
#else
#define SQZ_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define SQZ_MAJOR 0
#define SQZ_MINOR 1
#define SQZ_PATCH 0
/** Version as one integer: major * 10000 + minor * 100 + patch. */
#define SQZ_VERSION_CODE (SQZ_MAJOR * 10000 + SQZ_MINOR * 100 + SQZ_PATCH)

/** Opaque communicator handle. */
typedef struct sqzComm* sqzComm_t;

/** Size in bytes of a unique id; the layout inside is private. */
#define SQZ_UNIQUE_ID_BYTES 128

/**
 * Rendezvous token made by sqzGetUniqueId on one rank and passed to all others (MPI_Bcast, a
 * file, an environment variable). It holds the root's address and a random 128-bit job secret:
 * treat it as a credential.
 */
typedef struct {
  char internal[SQZ_UNIQUE_ID_BYTES];
} sqzUniqueId;

/** Result codes. Values 0-7 match NCCL's. */
typedef enum {
  sqzSuccess = 0,          /**< The call completed. */
  sqzCudaError = 1,        /**< A CUDA call failed. */
  sqzSystemError = 2,      /**< A system call failed (socket, shared memory, out of memory). */
  sqzInternalError = 3,    /**< A bug in Squeeze: please report it with SQZ_DEBUG=INFO output. */
  sqzInvalidArgument = 4,  /**< An argument was wrong (null pointer, unknown datatype...). */
  sqzInvalidUsage = 5,     /**< The call was wrong in context (ranks disagree, comm aborted...). */
  sqzRemoteError = 6,      /**< A peer failed or closed its connection. */
  sqzInProgress = 7,       /**< The operation has not finished yet. */
  sqzTimeout = 8,          /**< A wait exceeded the timeout (SQZ_TIMEOUT_MS). */
  sqzNumResults = 9,
  sqzResultForce32 = 0x7fffffff
} sqzResult_t;

/** Element types. Values match NCCL's. */
typedef enum {
  sqzInt8 = 0,
  sqzChar = 0,
  sqzUint8 = 1,
  sqzInt32 = 2,
  sqzInt = 2,
  sqzUint32 = 3,
  sqzInt64 = 4,
  sqzUint64 = 5,
  sqzFloat16 = 6,
  sqzHalf = 6,
  sqzFloat32 = 7,
  sqzFloat = 7,
  sqzFloat64 = 8,
  sqzDouble = 8,
  sqzBfloat16 = 9,
  sqzNumTypes = 10,
  /* With these two, every int is a valid value of the type (C's enum range rules), so a wrong
   * value passed in is a run-time error from Squeeze, not undefined behaviour. */
  sqzDataTypeMinInt32 = -0x7fffffff - 1,
  sqzDataTypeForce32 = 0x7fffffff
} sqzDataType_t;

/**
 * Reduction operators. Values match NCCL's. sqzAvg is the sum divided by the rank count, computed
 * once by the rank that finishes each element (integer types divide with truncation).
 */
typedef enum {
  sqzSum = 0,
  sqzProd = 1,
  sqzMax = 2,
  sqzMin = 3,
  sqzAvg = 4,
  sqzNumOps = 5,
  sqzRedOpMinInt32 = -0x7fffffff - 1, /* every int is a valid value; see sqzDataType_t */
  sqzRedOpForce32 = 0x7fffffff
} sqzRedOp_t;

/** Marks an integer field of sqzConfig_t as "not set: use the environment or the default". */
#define SQZ_CONFIG_UNDEF_INT (-2147483647 - 1)

/**
 * Per-communicator configuration. Always start from SQZ_CONFIG_INITIALIZER; unset fields fall
 * back to the SQZ_* environment variables, then to the built-in defaults.
 */
typedef struct {
  size_t size;            /**< sizeof(sqzConfig_t), set by the initializer. */
  unsigned int magic;     /**< Set by the initializer; guards against uninitialized structs. */
  unsigned int version;   /**< SQZ_VERSION_CODE the caller was compiled with. */
  int timeoutMs;          /**< Bound on every blocking wait, ms (SQZ_TIMEOUT_MS). */
  const char* transports; /**< Ordered transport list, e.g. "shm,tcp" or "tcp" (SQZ_TRANSPORT). */
  int tcpNsocks;          /**< Sockets per tcp peer connection (SQZ_TCP_NSOCKS). */
  int chunkBytes;         /**< Pipeline chunk size in bytes (SQZ_CHUNK_BYTES). */
  const char* socketIfname; /**< Interface for peer sockets (SQZ_SOCKET_IFNAME). */
  int device; /**< CUDA device of the communicator's device calls; unset: the caller's current
                   device at init (CUDA builds with a usable GPU; otherwise host memory only). */
} sqzConfig_t;

#define SQZ_CONFIG_MAGIC 0x53515a43u
#define SQZ_CONFIG_INITIALIZER                                                           \
  {                                                                                      \
    sizeof(sqzConfig_t), SQZ_CONFIG_MAGIC, SQZ_VERSION_CODE, SQZ_CONFIG_UNDEF_INT, NULL, \
        SQZ_CONFIG_UNDEF_INT, SQZ_CONFIG_UNDEF_INT, NULL, SQZ_CONFIG_UNDEF_INT           \
  }

/**
 * Returns the library version as SQZ_VERSION_CODE would compute it.
 * @param version receives the version; must not be NULL.
 * @return sqzSuccess, or sqzInvalidArgument for a NULL pointer. Thread-safe.
 */
SQZ_API sqzResult_t sqzGetVersion(int* version);

/**
 * Creates a rendezvous id and starts the rendezvous root in this process (a background thread
 * that serves one communicator's bootstrap, then exits). Call on one rank, send the id to all.
 * The root listens on SQZ_SOCKET_IFNAME (else the first non-loopback interface, else loopback).
 * @param uniqueId receives the id; must not be NULL.
 * @return sqzSuccess, sqzInvalidArgument or sqzSystemError (no usable interface). Thread-safe.
 */
SQZ_API sqzResult_t sqzGetUniqueId(sqzUniqueId* uniqueId);

/**
 * Creates a communicator of nranks ranks; collective over all of them (each calls it once, with
 * the same id and nranks, and a distinct rank). Blocks until every rank has joined or the
 * timeout (SQZ_TIMEOUT_MS) passes.
 * @param comm receives the communicator.
 * @param nranks number of ranks, >= 1.
 * @param commId the id from sqzGetUniqueId.
 * @param rank this caller's rank, 0 <= rank < nranks.
 * @return sqzSuccess; sqzInvalidArgument for bad arguments; sqzInvalidUsage when ranks disagree
 *         (nranks, duplicate rank, id from another job); sqzTimeout; sqzSystemError.
 */
SQZ_API sqzResult_t sqzCommInitRank(sqzComm_t* comm, int nranks, sqzUniqueId commId, int rank);

/**
 * sqzCommInitRank with a configuration (may be NULL, which means all defaults).
 * @param config a struct started from SQZ_CONFIG_INITIALIZER.
 */
SQZ_API sqzResult_t sqzCommInitRankConfig(sqzComm_t* comm, int nranks, sqzUniqueId commId,
                                          int rank, const sqzConfig_t* config);

/**
 * Creates a communicator from a launcher's environment: SQZ_UNIQUE_ID (set by sqzrun), else
 * SQZ_RANK/SQZ_WORLD_SIZE/SQZ_ROOT; torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT;
 * Open MPI's OMPI_COMM_WORLD_RANK/SIZE, PMI's PMI_RANK/PMI_SIZE, Slurm's SLURM_PROCID/NTASKS
 * (the latter three with SQZ_ROOT or MASTER_ADDR/MASTER_PORT giving the rendezvous address).
 * Without SQZ_UNIQUE_ID, rank 0 hosts the rendezvous at that address.
 * @param comm receives the communicator.
 * @param config may be NULL.
 * @return as sqzCommInitRank; sqzInvalidUsage when the environment names no rank or size.
 */
SQZ_API sqzResult_t sqzCommInitFromEnv(sqzComm_t* comm, const sqzConfig_t* config);

/**
 * Waits until every call enqueued on the communicator (device calls) has completed; host calls
 * are complete when they return. Not collective. Returns the communicator's asynchronous error,
 * if any (as sqzCommGetAsyncError would report it); sqzCommDestroy should follow.
 */
SQZ_API sqzResult_t sqzCommFinalize(sqzComm_t comm);

/**
 * Frees a communicator after its operations have completed. Not collective. NULL is accepted.
 */
SQZ_API sqzResult_t sqzCommDestroy(sqzComm_t comm);

/**
 * Marks the communicator aborted, closes its connections (peers see the closure) and frees it.
 * May be called from another thread while a call is in flight: that call returns
 * sqzRemoteError (or the error that caused the abort) promptly.
 */
SQZ_API sqzResult_t sqzCommAbort(sqzComm_t comm);

/**
 * Reports an error that happened asynchronously (a failed collective, a lost peer); when there
 * is one, sqzGetLastError(comm) then says what it was.
 * @param asyncError receives sqzSuccess or the error. Thread-safe.
 */
SQZ_API sqzResult_t sqzCommGetAsyncError(sqzComm_t comm, sqzResult_t* asyncError);

/** Number of ranks in the communicator. */
SQZ_API sqzResult_t sqzCommCount(const sqzComm_t comm, int* count);

/** This caller's rank in the communicator. */
SQZ_API sqzResult_t sqzCommUserRank(const sqzComm_t comm, int* rank);

/**
 * The CUDA device of the communicator's device calls, or -1 when it has none (host memory only:
 * a build without CUDA, or no usable GPU at init).
 */
SQZ_API sqzResult_t sqzCommCuDevice(const sqzComm_t comm, int* device);

/** A short fixed description of a result code. Thread-safe; never NULL. */
SQZ_API const char* sqzGetErrorString(sqzResult_t result);

/**
 * The last error message on this communicator (or, for comm == NULL, on this thread): a
 * sentence naming the rank, the peer and the operation. Empty if there was none. The pointer is
 * valid until the next call on the same communicator (or thread).
 */
SQZ_API const char* sqzGetLastError(sqzComm_t comm);

/*
 * Host or device memory, in every data call (collectives, send/recv, compressed all-reduce):
 * - host buffers (stream must be NULL): the call returns when the result is in the buffers;
 * - device buffers (CUDA builds; device or managed memory of the communicator's device): the
 *   call is enqueued on `stream` (a cudaStream_t of that device; NULL: the legacy default
 *   stream) and returns at once, as in NCCL; the result is ready when the stream reaches it.
 *   An enqueued call that fails reports through sqzCommGetAsyncError and fails every later call.
 *   Inside sqzGroupStart/End, the group's sends and receives are enqueued as one unit.
 * Mixing host and device buffers in one call, a buffer of another device, a stream of another
 * device, a host buffer with a stream, or a device buffer smaller than the call needs is
 * sqzInvalidArgument, and nothing is enqueued.
 *
 * Buffers: a call's sendbuff and recvbuff either do not overlap at all, or overlap exactly in
 * the call's in-place layout (given with each call; sqzAlltoAll has none). Any other overlap
 * (say recvbuff == sendbuff + 1) is sqzInvalidArgument on every rank that passes it, on host and
 * device memory alike, and nothing is sent or written. Where a buffer matters only on the root,
 * a non-root that passes both buffers is checked all the same.
 */

/**
 * Reduces count elements from every rank's sendbuff with op and leaves the result in every
 * rank's recvbuff. In place when sendbuff == recvbuff. Host memory: returns when the result is
 * in recvbuff. Every rank must pass the same count, datatype and op. Results are bitwise
 * identical on every rank.
 * @param stream NULL for host memory; for device memory the cudaStream_t to enqueue on.
 * @return sqzSuccess; sqzInvalidArgument (null buffers with count > 0, unknown datatype or op,
 *         a count that is negative when read as signed); sqzInvalidUsage (ranks disagree);
 *         sqzRemoteError; sqzTimeout.
 */
SQZ_API sqzResult_t sqzAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 sqzDataType_t datatype, sqzRedOp_t op, sqzComm_t comm,
                                 void* stream);

/**
 * Copies root's sendbuff (count elements) into every rank's recvbuff. sendbuff matters only on
 * root (in place when sendbuff == recvbuff there); every rank passes the same count, datatype
 * and root.
 */
SQZ_API sqzResult_t sqzBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                 sqzDataType_t datatype, int root, sqzComm_t comm, void* stream);

/**
 * Reduces count elements from every rank's sendbuff with op into root's recvbuff. recvbuff
 * matters only on root (others may pass NULL).
 */
SQZ_API sqzResult_t sqzReduce(const void* sendbuff, void* recvbuff, size_t count,
                              sqzDataType_t datatype, sqzRedOp_t op, int root, sqzComm_t comm,
                              void* stream);

/**
 * Gathers sendcount elements from every rank; rank r's land at recvbuff + r*sendcount on every
 * rank. In place when sendbuff == recvbuff + rank*sendcount.
 */
SQZ_API sqzResult_t sqzAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 sqzDataType_t datatype, sqzComm_t comm, void* stream);

/**
 * Reduces nranks*recvcount elements from every rank with op; rank r receives block r
 * (recvcount elements). In place when recvbuff == sendbuff + rank*recvcount.
 */
SQZ_API sqzResult_t sqzReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     sqzDataType_t datatype, sqzRedOp_t op, sqzComm_t comm,
                                     void* stream);

/**
 * Sends block p (count elements) of sendbuff to rank p, and receives rank p's block r into
 * recvbuff + p*count. Not in place (sendbuff and recvbuff must not overlap).
 */
SQZ_API sqzResult_t sqzAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                sqzDataType_t datatype, sqzComm_t comm, void* stream);

/**
 * Sends count elements to rank peer, to be matched by the peer's sqzRecv. Between
 * sqzGroupStart and sqzGroupEnd the call is queued and returns at once; outside a group it
 * blocks until sent. Messages between two ranks match in call order; sizes must agree.
 */
SQZ_API sqzResult_t sqzSend(const void* sendbuff, size_t count, sqzDataType_t datatype, int peer,
                            sqzComm_t comm, void* stream);

/** Receives count elements from rank peer; see sqzSend. */
SQZ_API sqzResult_t sqzRecv(void* recvbuff, size_t count, sqzDataType_t datatype, int peer,
                            sqzComm_t comm, void* stream);

/**
 * Starts a group: sqzSend/sqzRecv calls until the matching sqzGroupEnd are queued per
 * communicator (this thread's), then all posted at once, so they complete in any order across
 * ranks. Groups nest; only the outermost sqzGroupEnd runs them. Collectives called inside a
 * group run at once, as outside.
 */
SQZ_API sqzResult_t sqzGroupStart(void);

/** Ends a group and runs its queued sends and receives; returns the first error. */
SQZ_API sqzResult_t sqzGroupEnd(void);

/** Returns when every rank of comm has called sqzBarrier. */
SQZ_API sqzResult_t sqzBarrier(sqzComm_t comm);

/** Color that takes part in sqzCommSplit without joining a new communicator. */
#define SQZ_SPLIT_NOCOLOR (-1)

/**
 * Collective over comm: ranks passing the same color (>= 0) get a new communicator, ranked by
 * (key, rank in comm); SQZ_SPLIT_NOCOLOR gets *newcomm = NULL. The new communicator has its own
 * connections and may be used alongside comm. config NULL: comm's configuration.
 */
SQZ_API sqzResult_t sqzCommSplit(sqzComm_t comm, int color, int key, sqzComm_t* newcomm,
                                 const sqzConfig_t* config);

/**
 * Recovery after a lost rank (the survivors' side of ULFM's revoke and shrink, and NCCL's
 * ncclCommRevoke / ncclCommShrink / ncclCommGrow), on host and device communicators:
 *
 *   sqzResult_t async;
 *   if (sqzCommGetAsyncError(comm, &async) == sqzSuccess && async != sqzSuccess) ...
 *   // or: a call returned sqzRemoteError or sqzTimeout (sqzGetLastError names the lost rank)
 *   sqzCommRevoke(comm);
 *   sqzCommShrink(comm, lost, nlost, &smaller, NULL);
 *   sqzCommDestroy(comm);
 *
 * sqzCommShrink and sqzCommGrow move comm's codecs to the new communicator: each keeps its own
 * residual (what a lost rank had not yet sent is lost with it, and a call that failed took what
 * its codec's residual held into that call). A process that joins creates its codecs afresh.
 */

/**
 * Revokes comm: every call in flight on it here ends with sqzRemoteError and "rank R revoked the
 * communicator"; device calls release their streams; each peer's calls end with the same cause
 * as they find this rank gone, and pass it on. Later calls are refused; only sqzCommShrink and
 * sqzCommDestroy are left. Not collective; thread-safe (may be called while a call is in flight).
 */
SQZ_API sqzResult_t sqzCommRevoke(sqzComm_t comm);

/**
 * Collective over the ranks of comm not in exclude[0..n): they agree on who stays and form
 * *newcomm, ranked in their order in comm, with no new unique id and no launcher (the lowest
 * remaining rank hosts the agreement; its listening socket has been open since init). Every
 * survivor must pass the same list; a list that differs, a survivor lost during the shrink or one
 * that does not call it within SQZ_TIMEOUT_MS fails every survivor with a clear error, and comm
 * is left as it was. Never two member lists: the leader's is the only one. Excluding
 * yourself or every rank is sqzInvalidArgument. A healthy comm may be shrunk (the excluded ranks
 * just destroy theirs) when no call is in flight; otherwise revoke it first. comm stays until
 * sqzCommDestroy. config NULL: comm's configuration.
 */
SQZ_API sqzResult_t sqzCommShrink(sqzComm_t comm, const int* exclude, int n, sqzComm_t* newcomm,
                                  const sqzConfig_t* config);

/**
 * Collective over comm: forms *newcomm of size(comm) + newRanks ranks, in which every rank of
 * comm keeps its number and newRanks processes join with
 * sqzCommInitRank(&c, size(comm) + newRanks, *id, r), r = size(comm) .. size(comm) + newRanks - 1.
 * id comes from sqzGetUniqueId (typically on rank 0, which hands it to the others, e.g. with
 * sqzBroadcast, and to the joining processes). Ranks that pass different ids or counts all fail
 * with sqzInvalidUsage and nothing changes. comm stays until sqzCommDestroy. config NULL: comm's.
 */
SQZ_API sqzResult_t sqzCommGrow(sqzComm_t comm, int newRanks, const sqzUniqueId* id,
                                sqzComm_t* newcomm, const sqzConfig_t* config);

/**
 * The name of the algorithm the last collective on comm used ("ring", "rhd", ... "p2p"; "stream"
 * for a call on device buffers run on the caller's stream alone: a collective or a group of sends
 * and receives of ranks on one host, a compressed all-reduce there, or a one-rank call; "" before
 * the first). Valid until the next call on comm. For benchmarks and logs.
 */
SQZ_API sqzResult_t sqzCommGetLastAlgorithm(sqzComm_t comm, const char** name);

/* ---------------------------------------------------------------------------------------------
 * Compression: codecs reduced in flight inside the all-reduce.
 * ------------------------------------------------------------------------------------------- */

/** Opaque codec handle: one per tensor (gradient bucket); it keeps state across calls. */
typedef struct sqzCodec* sqzCodec_t;

/** Marks a numeric field of sqzCodecConfig_t as "not set: use the codec's default". */
#define SQZ_CODEC_UNDEF (-1.0)

/**
 * A codec as a struct; the same fields as the spec string's keys ("topk:ratio=0.001" sets
 * method "topk" and ratio 0.001). Always start from SQZ_CODEC_CONFIG_INITIALIZER; fields left at
 * SQZ_CODEC_UNDEF take the codec's default. A key that the method does not use is refused.
 */
typedef struct {
  size_t size;           /**< sizeof(sqzCodecConfig_t), set by the initializer. */
  unsigned int magic;    /**< Set by the initializer. */
  unsigned int version;  /**< SQZ_VERSION_CODE the caller was compiled with. */
  const char* method;    /**< A codec method: "dense", "fp16", "int8", "topk", "dgc",
                              "powersgd", "gravac", ...; `sqz-info --codecs` lists every one
                              with its keys. */
  double ratio;          /**< Sparsifiers: fraction of values sent (key ratio). */
  double levels;         /**< qsgd: quantization levels s (key levels). */
  double block;          /**< Quantizers: values per scale block (key block). */
  double threshold;      /**< threshold: send |v| >= threshold (key threshold). */
  double sample;         /**< topk/dgc: the GPU's route, 0 radix select, 1 DGC's sampled threshold
                              first; both send the same entries (key sample). */
  double momentum;       /**< dgc: momentum m of the velocity (key momentum). */
  double clip;           /**< dgc: local gradient clipping norm, 0 off (key clip). */
  double warmup;         /**< dgc: calls of exponential sparsity warm-up, 0 off (key warmup). */
  double rank;           /**< powersgd: rank r (key rank). */
  double cols;           /**< powersgd: columns of the matrix view, 0 near-square (key cols). */
  double errorFeedback;  /**< 1 on, 0 off (key ef); on by default for lossy codecs. */
  double minBytes;       /**< Tensors smaller than this travel dense (key min_bytes). */
  double seed;           /**< randk/qsgd/terngrad/powersgd random streams (key seed). */
  /* Added in 0.1 with the adaptive methods; read only when size covers them. */
  const char* base;      /**< gravac/accordion: the sparsifier they drive, "topk" (default),
                              "randk" or "dgc" (key base). NULL: the default. */
  double cfMin, cfMax;   /**< gravac: the CF exploration space (keys cf_min, cf_max). */
  double step;           /**< gravac: compression step c_s between candidates (key step). */
  double window;         /**< gravac: calls per window w (key window). */
  double eps;            /**< gravac: gain threshold epsilon (key eps). */
  double omega;          /**< gravac: saturation threshold omega (key omega). */
  double cfLow, cfHigh;  /**< accordion: CFs of critical and stable regimes (cf_low, cf_high). */
  double interval;       /**< accordion: calls per interval (key interval). */
  double eta;            /**< accordion: norm-change threshold (key eta). */
  double autoDense;      /**< Lossy codecs: 1 runs a call dense when compressing does not pay
                              (the default, SQZ_CODEC_AUTO_DENSE), 0 always compresses. */
} sqzCodecConfig_t;

#define SQZ_CODEC_CONFIG_MAGIC 0x53515a44u
#define SQZ_CODEC_CONFIG_INITIALIZER                                                         \
  {                                                                                          \
    sizeof(sqzCodecConfig_t), SQZ_CODEC_CONFIG_MAGIC, SQZ_VERSION_CODE, NULL,                \
        SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, \
        SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, \
        SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, NULL, SQZ_CODEC_UNDEF,            \
        SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, \
        SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF, SQZ_CODEC_UNDEF  \
  }

/**
 * Creates a codec for one tensor of count elements of datatype, used with comm. spec is
 * "method" or "method:key=value,key=value" (see sqzCodecConfig_t for the keys), e.g.
 * "topk:ratio=0.001", "dgc:ratio=0.001,momentum=0.9,clip=5,warmup=200", "qsgd:levels=16",
 * "onebit", "powersgd:rank=4", "fp16", "gravac:base=topk,cf_min=10,cf_max=1000",
 * "accordion:base=topk,cf_low=10,cf_high=1000". Lossy codecs take float32 tensors. Not collective, but
 * every rank must create the same codec for the same tensor.
 * @return sqzInvalidArgument with a message naming the bad key or value.
 */
SQZ_API sqzResult_t sqzCodecCreate(sqzCodec_t* codec, const char* spec, size_t count,
                                   sqzDataType_t datatype, sqzComm_t comm);

/** As sqzCodecCreate, from a struct instead of a spec string. */
SQZ_API sqzResult_t sqzCodecCreateConfig(sqzCodec_t* codec, const sqzCodecConfig_t* config,
                                         size_t count, sqzDataType_t datatype, sqzComm_t comm);

/**
 * sqzAllReduce through codec: every rank's sendbuff (plus the codec's error-feedback residual)
 * is compressed, reduced in flight, and every rank ends with bitwise the same recvbuff. op is
 * sqzSum or sqzAvg; count and datatype must be the codec's; comm must be the codec's.
 */
SQZ_API sqzResult_t sqzAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                           sqzDataType_t datatype, sqzRedOp_t op,
                                           sqzCodec_t codec, sqzComm_t comm, void* stream);

/** What a codec has done since it was created (or its state loaded). */
typedef struct {
  uint64_t calls;          /**< sqzAllReduceCompressed calls. */
  uint64_t wireBytes;      /**< Payload bytes this rank sent. */
  uint64_t denseBytes;     /**< Bytes the same calls would have sent uncompressed. */
  double ratio;            /**< denseBytes / wireBytes. */
  double gain;             /**< Compression gain of the last call: |C(x)|^2 / |x|^2 over what
                                this rank encoded (GraVAC's delta). */
  double residualNorm;     /**< |error-feedback residual| after the last call (0 when off). */
  double encodeSeconds;    /**< Time in encode (with error feedback). */
  double combineSeconds;   /**< Time in the fused decode-reduce. */
  double decodeSeconds;    /**< Time decoding final payloads. */
  double lastRatio;        /**< ratio of the last call. */
  /* The adaptive methods and the pay-off guard (added in 0.1 with them). */
  double cf;               /**< gravac/accordion: the CF (values per value sent) the last call
                                used, 1 when it ran dense; 0 for other methods. */
  int phase;               /**< SQZ_CODEC_PHASE_*: what an adaptive method is doing. */
  double cfMin;            /**< gravac: the lower CF of the pair it probes (its cf_min now). */
  uint64_t denseCalls;     /**< Calls that ran dense (too small, the policy's or the guard's). */
  uint64_t guardDenseCalls; /**< Of which the pay-off guard (auto_dense) sent dense. */
  double linkDensePerByte;      /**< Guard: a dense call's seconds per tensor byte. */
  double linkCompressedPerByte; /**< Guard: a compressed call's link seconds per tensor byte. */
  double codecPerByte;          /**< Guard: a compressed call's codec seconds per tensor byte. */
} sqzCodecStats_t;

/** sqzCodecStats_t.phase. */
#define SQZ_CODEC_PHASE_STATIC 0    /**< Not an adaptive method. */
#define SQZ_CODEC_PHASE_EXPLORING 1 /**< gravac: evaluating candidate CFs. */
#define SQZ_CODEC_PHASE_SETTLED 2   /**< gravac: every candidate evaluated, one chosen. */
#define SQZ_CODEC_PHASE_CRITICAL 3  /**< accordion: critical regime, low CF. */
#define SQZ_CODEC_PHASE_STABLE 4    /**< accordion: stable regime, high CF. */

SQZ_API sqzResult_t sqzCodecGetStats(sqzCodec_t codec, sqzCodecStats_t* stats);

/**
 * Writes the codec's state (residual, momentum, PowerSGD's Q, call counter) to buf. With
 * buf NULL, sets *bytes to the size needed. Otherwise *bytes is buf's capacity on entry and the
 * size written on return.
 */
SQZ_API sqzResult_t sqzCodecSaveState(sqzCodec_t codec, void* buf, size_t* bytes);

/** Restores state written by sqzCodecSaveState from a codec with the same spec and tensor. */
SQZ_API sqzResult_t sqzCodecLoadState(sqzCodec_t codec, const void* buf, size_t bytes);

/** Frees the codec. NULL is accepted. */
SQZ_API sqzResult_t sqzCodecDestroy(sqzCodec_t codec);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // SQUEEZE_SQUEEZE_H_
