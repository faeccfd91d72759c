/*
 * An NCCL program that knows nothing of Squeeze: written against CUDA's nccl.h and linked with
 * -lnccl, run by tests/nccl_shim/nccl_shim_test.sh with libsqueeze-nccl.so.2 in libnccl.so.2's
 * place. Each rank takes its rank from the launcher (RANK/WORLD_SIZE from sqzrun or torchrun,
 * OMPI_COMM_WORLD_* from mpirun) and the ncclUniqueId from a file rank 0 writes.
 *
 *   nccl_program collectives ID_FILE   every collective, datatype and operator, checked bit for
 *                                      bit against values computed here; groups, split,
 *                                      PreMulSum, error returns
 *   nccl_program gradients ID_FILE     30 all-reduces of the same 2 MiB float gradient buffer
 *                                      (and a small float and a 1 MiB int32 one, which must
 *                                      stay exact); prints the float errors
 *                                      against the exact sums (the test script judges them)
 *   nccl_program recovery ID_FILE      the last rank leaves after 3 all-reduces; the others
 *                                      follow NCCL's recovery pattern (ncclCommGetAsyncError,
 *                                      ncclCommRevoke, ncclCommShrink with NCCL_SHRINK_ABORT)
 *                                      and make 10 exact all-reduces; host buffers
 *   nccl_program initall NDEV          one process, ncclCommInitAll, collectives and a
 *                                      send/receive ring on all of its communicators from one
 *                                      thread in groups
 *
 * Buffers are device memory when built with NCCL_PROGRAM_CUDA and a GPU is visible (one per
 * rank, LOCAL_RANK modulo the GPU count), else host memory. Exit status 0: every check passed.
 */
#include <nccl.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank = 0, g_nranks = 1, g_device = -1; /* g_device >= 0: device buffers */
static cudaStream_t g_stream = NULL;

#define FAIL(...)                                           \
  do {                                                      \
    fprintf(stderr, "nccl_program rank %d: ", g_rank);      \
    fprintf(stderr, __VA_ARGS__);                           \
    fprintf(stderr, "\n");                                  \
    exit(1);                                                \
  } while (0)

#define NCCLCHECK(call)                                                                        \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    if (r_ != ncclSuccess)                                                                     \
      FAIL("%s failed: %s (%d): %s", #call, ncclGetErrorString(r_), (int)r_,                   \
           ncclGetLastError(NULL));                                                            \
  } while (0)

/* A call that must fail with `want`, explaining why in ncclGetLastError (naming `word`). */
#define EXPECT_FAIL(call, want, word)                                                          \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    const char* m_ = ncclGetLastError(NULL);                                                   \
    if (r_ != (want) || !m_ || !strstr(m_, (word)))                                            \
      FAIL("%s returned %d (want %d) with message '%s' (want one naming '%s')", #call, (int)r_, \
           (int)(want), m_ ? m_ : "(null)", (word));                                           \
  } while (0)

/* ---- buffers: device memory when a GPU is used, else host memory ----------------------- */

static void* buf_alloc(size_t bytes) {
  void* p = NULL;
#ifdef NCCL_PROGRAM_CUDA
  if (g_device >= 0) {
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) FAIL("cudaMalloc(%zu)", bytes);
    return p;
  }
#endif
  p = malloc(bytes ? bytes : 1);
  if (!p) FAIL("malloc(%zu)", bytes);
  return p;
}
static void buf_free(void* p) {
#ifdef NCCL_PROGRAM_CUDA
  if (g_device >= 0) {
    cudaFree(p);
    return;
  }
#endif
  free(p);
}
static void buf_put(void* dst, const void* host, size_t bytes) {
#ifdef NCCL_PROGRAM_CUDA
  if (g_device >= 0) {
    if (cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) FAIL("upload");
    return;
  }
#endif
  memcpy(dst, host, bytes);
}
static void buf_get(void* host, const void* src, size_t bytes) {
#ifdef NCCL_PROGRAM_CUDA
  if (g_device >= 0) {
    if (cudaStreamSynchronize(g_stream) != cudaSuccess) FAIL("cudaStreamSynchronize");
    if (cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) FAIL("download");
    return;
  }
#endif
  memcpy(host, src, bytes);
}

/* ---- elements: values are small integers, exact in every datatype ----------------------- */

static const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,
                                        ncclInt64,   ncclUint64,  ncclFloat16, ncclFloat32,
                                        ncclFloat64, ncclBfloat16};
static const char* kTypeNames[] = {"int8",    "uint8", "int32",   "uint32", "int64",
                                   "uint64",  "half",  "float32", "float64", "bfloat16"};
#define NTYPES (int)(sizeof kTypes / sizeof kTypes[0])

static size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}
static int is_signed(ncclDataType_t t) { return t != ncclUint8 && t != ncclUint32 && t != ncclUint64; }

/* Exact conversions for the small integers used here (no rounding is ever needed). */
static uint16_t to_half(float f) {
  if (f == 0) return 0;
  uint32_t b;
  memcpy(&b, &f, 4);
  uint32_t sign = (b >> 16) & 0x8000u, exp = ((b >> 23) & 0xff) - 127 + 15, man = (b >> 13) & 0x3ff;
  return (uint16_t)(sign | (exp << 10) | man);
}
static float from_half(uint16_t h) {
  if ((h & 0x7fff) == 0) return 0;
  uint32_t b = ((uint32_t)(h & 0x8000) << 16) | ((((h >> 10) & 0x1f) - 15 + 127) << 23) |
               ((uint32_t)(h & 0x3ff) << 13);
  float f;
  memcpy(&f, &b, 4);
  return f;
}
static uint16_t to_bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return (uint16_t)(b >> 16);
}

static void store(ncclDataType_t t, void* p, size_t i, double v) {
  switch (t) {
    case ncclInt8: ((int8_t*)p)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t*)p)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t*)p)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t*)p)[i] = (uint32_t)v; break;
    case ncclInt64: ((int64_t*)p)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t*)p)[i] = (uint64_t)v; break;
    case ncclFloat16: ((uint16_t*)p)[i] = to_half((float)v); break;
    case ncclFloat32: ((float*)p)[i] = (float)v; break;
    case ncclFloat64: ((double*)p)[i] = v; break;
    case ncclBfloat16: ((uint16_t*)p)[i] = to_bf16((float)v); break;
    default: FAIL("store: datatype %d", (int)t);
  }
}

/* Compares bytes; names the first differing element. */
static void expect_equal(const char* what, const void* got, const void* want, size_t count,
                         ncclDataType_t t) {
  const size_t es = type_size(t);
  for (size_t i = 0; i < count; ++i)
    if (memcmp((const char*)got + i * es, (const char*)want + i * es, es) != 0)
      FAIL("%s: element %zu of %zu differs", what, i, count);
}

/* The value rank r contributes at element i, for operator op. */
static double input(int op, ncclDataType_t t, int r, size_t i) {
  switch (op) {
    case ncclProd: return (double)((i + r) % 2 + 1);                 /* products <= 16 */
    case ncclMax: case ncclMin:
      return (double)((i * 7 + r * 3) % 11) - (is_signed(t) ? 5 : 0);
    case ncclAvg: return (double)g_nranks * ((i + 2 * r) % 3 + 1);   /* the average is exact */
    default: return (double)((i + 3 * r) % 5 + 1);                   /* sums <= 20 */
  }
}

static double reference(int op, ncclDataType_t t, size_t i) {
  double acc = input(op, t, 0, i);
  for (int r = 1; r < g_nranks; ++r) {
    const double v = input(op, t, r, i);
    if (op == ncclProd) acc *= v;
    else if (op == ncclMax) acc = v > acc ? v : acc;
    else if (op == ncclMin) acc = v < acc ? v : acc;
    else acc += v;
  }
  return op == ncclAvg ? acc / g_nranks : acc;
}

/* ---- rank, id ------------------------------------------------------------------------------ */

static int env_int(const char* a, const char* b, int fallback) {
  const char* v = getenv(a);
  if (!v) v = getenv(b);
  return v ? atoi(v) : fallback;
}

static void exchange_id(const char* path, ncclUniqueId* id) {
  if (g_rank == 0) {
    NCCLCHECK(ncclGetUniqueId(id));
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0) FAIL("cannot write %s", tmp);
    if (rename(tmp, path) != 0) FAIL("cannot rename %s", tmp);
    return;
  }
  for (int waited_ms = 0; waited_ms < 60000; waited_ms += 10) {
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t n = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (n == 1) return;
    }
    usleep(10000);
  }
  FAIL("rank 0 wrote no unique id to %s within 60 s", path);
}

static void pick_device(void) {
#ifdef NCCL_PROGRAM_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0 && !getenv("NCCL_PROGRAM_HOST")) {
    g_device = env_int("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", g_rank) % n;
    if (cudaSetDevice(g_device) != cudaSuccess) FAIL("cudaSetDevice(%d)", g_device);
    if (cudaStreamCreate(&g_stream) != cudaSuccess) FAIL("cudaStreamCreate");
  }
#endif
}

/* ---- collectives ----------------------------------------------------------------------------- */

static void check_allreduce(ncclComm_t comm, int op, int ti, size_t count) {
  const ncclDataType_t t = kTypes[ti];
  const size_t bytes = count * type_size(t);
  char* host = malloc(bytes);
  char* want = malloc(bytes);
  for (size_t i = 0; i < count; ++i) {
    store(t, host, i, input(op, t, g_rank, i));
    store(t, want, i, reference(op, t, i));
  }
  void* send = buf_alloc(bytes);
  void* recv = buf_alloc(bytes);
  buf_put(send, host, bytes);
  NCCLCHECK(ncclAllReduce(send, recv, count, t, (ncclRedOp_t)op, comm, g_stream));
  buf_get(host, recv, bytes);
  char what[96];
  snprintf(what, sizeof what, "ncclAllReduce %s op %d count %zu", kTypeNames[ti], op, count);
  expect_equal(what, host, want, count, t);
  buf_free(send);
  buf_free(recv);
  free(host);
  free(want);
}

static void check_broadcast_reduce(ncclComm_t comm) {
  const size_t count = 3001;
  const int root = g_nranks - 1;
  float* host = malloc(count * sizeof(float));
  float* want = malloc(count * sizeof(float));
  float* buf = buf_alloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) host[i] = (float)(g_rank * 10000 + i), want[i] = (float)(root * 10000 + i);
  buf_put(buf, host, count * sizeof(float));
  NCCLCHECK(ncclBroadcast(buf, buf, count, ncclFloat, root, comm, g_stream));
  buf_get(host, buf, count * sizeof(float));
  expect_equal("ncclBroadcast", host, want, count, ncclFloat32);
  for (size_t i = 0; i < count; ++i) host[i] = (float)(g_rank + i), want[i] = (float)i;
  buf_put(buf, host, count * sizeof(float));
  NCCLCHECK(ncclBcast(buf, count, ncclFloat, 0, comm, g_stream));
  buf_get(host, buf, count * sizeof(float));
  expect_equal("ncclBcast", host, want, count, ncclFloat32);

  const int reduceRoot = 1 % g_nranks;
  float* out = buf_alloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) {
    host[i] = (float)input(ncclSum, ncclFloat32, g_rank, i);
    want[i] = (float)reference(ncclSum, ncclFloat32, i);
  }
  buf_put(buf, host, count * sizeof(float));
  NCCLCHECK(ncclReduce(buf, out, count, ncclFloat, ncclSum, reduceRoot, comm, g_stream));
  if (g_rank == reduceRoot) {
    buf_get(host, out, count * sizeof(float));
    expect_equal("ncclReduce", host, want, count, ncclFloat32);
  }
  buf_free(out);
  buf_free(buf);
  free(host);
  free(want);
}

static void check_gather_scatter_alltoall(ncclComm_t comm) {
  const size_t count = 1234, total = count * g_nranks;
  int32_t* host = malloc(total * sizeof(int32_t));
  int32_t* want = malloc(total * sizeof(int32_t));
  int32_t* send = buf_alloc(total * sizeof(int32_t));
  int32_t* recv = buf_alloc(total * sizeof(int32_t));

  for (size_t i = 0; i < count; ++i) host[i] = g_rank * 100000 + (int32_t)i;
  for (size_t i = 0; i < total; ++i) want[i] = (int32_t)(i / count) * 100000 + (int32_t)(i % count);
  buf_put(send, host, count * sizeof(int32_t));
  NCCLCHECK(ncclAllGather(send, recv, count, ncclInt32, comm, g_stream));
  buf_get(host, recv, total * sizeof(int32_t));
  expect_equal("ncclAllGather", host, want, total, ncclInt32);

  for (size_t i = 0; i < total; ++i) host[i] = (int32_t)((i + 3 * g_rank) % 5 + 1);
  for (size_t i = 0; i < count; ++i) {
    want[i] = 0;
    for (int r = 0; r < g_nranks; ++r) want[i] += (int32_t)((g_rank * count + i + 3 * r) % 5 + 1);
  }
  buf_put(send, host, total * sizeof(int32_t));
  NCCLCHECK(ncclReduceScatter(send, recv, count, ncclInt32, ncclSum, comm, g_stream));
  buf_get(host, recv, count * sizeof(int32_t));
  expect_equal("ncclReduceScatter", host, want, count, ncclInt32);

  /* Block p of rank r's send goes to rank p: r*1000000 + p*10000 + i. */
  for (size_t i = 0; i < total; ++i)
    host[i] = g_rank * 1000000 + (int32_t)(i / count) * 10000 + (int32_t)(i % count);
  for (size_t i = 0; i < total; ++i)
    want[i] = (int32_t)(i / count) * 1000000 + g_rank * 10000 + (int32_t)(i % count);
  buf_put(send, host, total * sizeof(int32_t));
  NCCLCHECK(ncclAlltoAll(send, recv, count, ncclInt32, comm, g_stream));
  buf_get(host, recv, total * sizeof(int32_t));
  expect_equal("ncclAlltoAll", host, want, total, ncclInt32);

  buf_free(send);
  buf_free(recv);
  free(host);
  free(want);
}

static void check_send_recv(ncclComm_t comm) {
  const size_t count = 5000;
  const int next = (g_rank + 1) % g_nranks, prev = (g_rank + g_nranks - 1) % g_nranks;
  double* host = malloc(count * sizeof(double));
  double* want = malloc(count * sizeof(double));
  double* send = buf_alloc(count * sizeof(double));
  double* recv = buf_alloc(count * sizeof(double));
  for (size_t i = 0; i < count; ++i) host[i] = g_rank + 0.5 * i, want[i] = prev + 0.5 * i;
  buf_put(send, host, count * sizeof(double));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(send, count, ncclDouble, next, comm, g_stream));
  NCCLCHECK(ncclRecv(recv, count, ncclDouble, prev, comm, g_stream));
  NCCLCHECK(ncclGroupEnd());
  buf_get(host, recv, count * sizeof(double));
  expect_equal("ncclSend/ncclRecv ring", host, want, count, ncclFloat64);
  buf_free(send);
  buf_free(recv);
  free(host);
  free(want);
}

static void check_split(ncclComm_t comm) {
  ncclComm_t child = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  NCCLCHECK(ncclCommSplit(comm, g_rank % 2, -g_rank, &child, &config));
  int n = 0, me = -1, expectN = (g_nranks + 1 - g_rank % 2) / 2;
  NCCLCHECK(ncclCommCount(child, &n));
  NCCLCHECK(ncclCommUserRank(child, &me));
  /* key -rank: the highest parent rank of a color is rank 0 of its child. */
  if (n != expectN || me != (g_nranks - 1 - g_rank) / 2)
    FAIL("ncclCommSplit: child rank %d of %d, want %d of %d", me, n, (g_nranks - 1 - g_rank) / 2,
         expectN);
  int32_t host = g_rank, *buf = buf_alloc(sizeof(int32_t)), want = 0;
  for (int r = g_rank % 2; r < g_nranks; r += 2) want += r;
  buf_put(buf, &host, sizeof host);
  NCCLCHECK(ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, child, g_stream));
  buf_get(&host, buf, sizeof host);
  if (host != want) FAIL("all-reduce on the split communicator: %d, want %d", host, want);
  buf_free(buf);
  NCCLCHECK(ncclCommDestroy(child));
}

static void check_premulsum(ncclComm_t comm) {
  const size_t count = 999;
  for (int half = 0; half <= 1; ++half) {
    const ncclDataType_t t = half ? ncclFloat16 : ncclFloat32;
    const size_t es = type_size(t);
    char* host = malloc(count * es);
    char* want = malloc(count * es);
    /* scalar (r+1)/2 times 2v: sum of (r+1) v, exact */
    for (size_t i = 0; i < count; ++i) {
      double w = 0;
      for (int r = 0; r < g_nranks; ++r) w += (r + 1) * input(ncclSum, t, r, i);
      store(t, host, i, 2 * input(ncclSum, t, g_rank, i));
      store(t, want, i, w);
    }
    float scalar32 = 0.5f * (g_rank + 1);
    uint16_t scalar16 = to_half(scalar32);
    ncclRedOp_t op;
    NCCLCHECK(ncclRedOpCreatePreMulSum(&op, half ? (void*)&scalar16 : (void*)&scalar32, t,
                                       ncclScalarHostImmediate, comm));
    void* buf = buf_alloc(count * es);
    buf_put(buf, host, count * es);
    if (g_device >= 0) {
      EXPECT_FAIL(ncclAllReduce(buf, buf, count, t, op, comm, g_stream), ncclInvalidUsage,
                  "PreMulSum");
    } else {
      NCCLCHECK(ncclAllReduce(buf, buf, count, t, op, comm, g_stream));
      buf_get(host, buf, count * es);
      expect_equal(half ? "PreMulSum half" : "PreMulSum float32", host, want, count, t);
    }
    NCCLCHECK(ncclRedOpDestroy(op, comm));
    EXPECT_FAIL(ncclRedOpDestroy(op, comm), ncclInvalidArgument, "ncclRedOpCreatePreMulSum");
    buf_free(buf);
    free(host);
    free(want);
  }
  (void)from_half;
}

/* Calls refused before anything is sent: the communicator goes on working. */
static void check_errors(ncclComm_t comm) {
  float* buf = buf_alloc(16 * sizeof(float));
  EXPECT_FAIL(ncclAllReduce(buf, buf, 16, ncclFloat8e4m3, ncclSum, comm, g_stream),
              ncclInvalidArgument, "ncclFloat8e4m3");
  EXPECT_FAIL(ncclAllReduce(buf, buf, 16, (ncclDataType_t)37, ncclSum, comm, g_stream),
              ncclInvalidArgument, "37");
  EXPECT_FAIL(ncclAllReduce(buf, buf, 16, ncclFloat, (ncclRedOp_t)77, comm, g_stream),
              ncclInvalidArgument, "77");
  EXPECT_FAIL(ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, NULL, g_stream),
              ncclInvalidArgument, "comm");
  EXPECT_FAIL(ncclGather(buf, buf, 1, ncclFloat, 0, comm, g_stream), ncclInvalidUsage,
              "ncclGather");
  EXPECT_FAIL(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupStart");
  /* Registration is accepted (without effect): a handle, released once. */
  void* handle = NULL;
  NCCLCHECK(ncclCommRegister(comm, buf, 16 * sizeof(float), &handle));
  if (handle == NULL) FAIL("ncclCommRegister gave a NULL handle");
  NCCLCHECK(ncclCommDeregister(comm, handle));
  EXPECT_FAIL(ncclCommDeregister(comm, handle), ncclInvalidArgument, "ncclCommDeregister");
  buf_free(buf);
}

static void run_collectives(const char* idFile) {
  ncclUniqueId id;
  exchange_id(idFile, &id);
  ncclComm_t comm;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  NCCLCHECK(ncclCommInitRankConfig(&comm, g_nranks, id, g_rank, &config));

  int version = 0, n = 0, me = -1, dev = -2;
  NCCLCHECK(ncclGetVersion(&version));
  NCCLCHECK(ncclCommCount(comm, &n));
  NCCLCHECK(ncclCommUserRank(comm, &me));
  NCCLCHECK(ncclCommCuDevice(comm, &dev));
  if (version != NCCL_VERSION_CODE || n != g_nranks || me != g_rank || dev != g_device)
    FAIL("queries: version %d (want %d), count %d, rank %d, device %d (want %d)", version,
         NCCL_VERSION_CODE, n, me, dev, g_device);

  int calls = 0;
  for (int op = ncclSum; op <= ncclAvg; ++op)
    for (int ti = 0; ti < NTYPES; ++ti, ++calls) check_allreduce(comm, op, ti, 1001);
  check_allreduce(comm, ncclSum, 7, (1 << 20) + 3); /* float32, pipelined across chunks */
  check_broadcast_reduce(comm);
  check_gather_scatter_alltoall(comm);
  check_send_recv(comm);
  check_split(comm);
  check_premulsum(comm);
  check_errors(comm);
  check_allreduce(comm, ncclMax, 2, 17); /* still working after the refused calls */

  ncclResult_t async = ncclInternalError;
  NCCLCHECK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) FAIL("ncclCommGetAsyncError: %d", (int)async);
  NCCLCHECK(ncclCommFinalize(comm));
  EXPECT_FAIL(ncclAllReduce(&async, &async, 0, ncclInt32, ncclSum, comm, NULL), ncclInvalidUsage,
              "finalized");
  NCCLCHECK(ncclCommDestroy(comm));
  if (g_rank == 0)
    printf("nccl_program collectives: %d ranks, %s buffers, %d all-reduces (10 datatypes x 5 "
           "operators) and every other collective bit-exact: OK\n",
           g_nranks, g_device >= 0 ? "device" : "host", calls + 2);
}

/* ---- gradients ------------------------------------------------------------------------------ */

/* Rank r's gradient at step t: a fixed pattern (the same every step, as a gradient's persistent
 * direction) plus step noise; small integers, so the exact sums are exact in float. */
static float gradient(int r, int t, size_t i) {
  return (float)((long)((i * 7919) % 17) - 8 + (long)((i * 31 + r * 101 + t * 53) % 5) - 2);
}

static void run_gradients(const char* idFile) {
  ncclUniqueId id;
  exchange_id(idFile, &id);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, g_nranks, id, g_rank));
  /* 2 MiB of float32 gradients; 1000 floats (under SQZ_NCCL_CODEC's 1M in the test); 1 MiB of
   * int32 (no codec takes integers). */
  const size_t n = 512 * 1024, small = 1000, nInts = 256 * 1024 + 1;
  const int steps = 30;
  float* host = malloc(n * sizeof(float));
  float* out = malloc(n * sizeof(float));
  double* exact = malloc(n * sizeof(double));
  double* sumOut = calloc(n, sizeof(double));
  double* sumExact = calloc(n, sizeof(double));
  int32_t* ints = malloc(n * sizeof(int32_t));
  float* grad = buf_alloc(n * sizeof(float));
  float* smallBuf = buf_alloc(small * sizeof(float));
  int32_t* intBuf = buf_alloc(n * sizeof(int32_t));
  double firstErr = -1;
  for (int t = 0; t < steps; ++t) {
    double errSq = 0, exactSq = 0;
    for (size_t i = 0; i < n; ++i) {
      host[i] = gradient(g_rank, t, i);
      exact[i] = 0;
      for (int r = 0; r < g_nranks; ++r) exact[i] += gradient(r, t, i);
    }
    buf_put(grad, host, n * sizeof(float));
    NCCLCHECK(ncclAllReduce(grad, grad, n, ncclFloat, ncclSum, comm, g_stream));
    buf_get(out, grad, n * sizeof(float));
    for (size_t i = 0; i < n; ++i) {
      errSq += (out[i] - exact[i]) * (out[i] - exact[i]);
      exactSq += exact[i] * exact[i];
      sumOut[i] += out[i];
      sumExact[i] += exact[i];
    }
    if (t == 0) firstErr = sqrt(errSq / exactSq);

    /* The small float buffer and the int32 one: exact whatever the codec settings. */
    buf_put(smallBuf, host, small * sizeof(float));
    NCCLCHECK(ncclAllReduce(smallBuf, smallBuf, small, ncclFloat, ncclSum, comm, g_stream));
    buf_get(out, smallBuf, small * sizeof(float));
    for (size_t i = 0; i < small; ++i)
      if (out[i] != (float)exact[i]) FAIL("small float buffer, step %d, element %zu", t, i);
    for (size_t i = 0; i < nInts; ++i) ints[i] = (int32_t)host[i];
    buf_put(intBuf, ints, nInts * sizeof(int32_t));
    NCCLCHECK(ncclAllReduce(intBuf, intBuf, nInts, ncclInt32, ncclSum, comm, g_stream));
    buf_get(ints, intBuf, nInts * sizeof(int32_t));
    for (size_t i = 0; i < nInts; ++i)
      if (ints[i] != (int32_t)exact[i]) FAIL("int32 buffer, step %d, element %zu", t, i);
  }
  double errSq = 0, exactSq = 0;
  for (size_t i = 0; i < n; ++i) {
    errSq += (sumOut[i] - sumExact[i]) * (sumOut[i] - sumExact[i]);
    exactSq += sumExact[i] * sumExact[i];
  }
  if (g_rank == 0) {
    printf("nccl_program gradients: %d ranks, %s buffers\n", g_nranks,
           g_device >= 0 ? "device" : "host");
    printf("nccl_program gradients: first_rel_err=%.6g\n", firstErr);
    printf("nccl_program gradients: cumulative_rel_err=%.6g over %d steps\n",
           sqrt(errSq / exactSq), steps);
  }
  buf_free(grad);
  buf_free(smallBuf);
  buf_free(intBuf);
  free(host);
  free(out);
  free(exact);
  free(sumOut);
  free(sumExact);
  free(ints);
  NCCLCHECK(ncclCommDestroy(comm));
}

/* ---- recovery: NCCL's documented pattern after a lost rank -------------------------------- */

/* Element i of rank r's input to call c: small integers, so every sum is exact in float. */
static float recovery_input(int r, int c, size_t i) { return (float)((i + 7u * (unsigned)c) % 89 + r); }

/* An exact float all-reduce of call c's inputs over comm (n ranks, this one `me`); returns its
 * result without checking it when the call fails. */
static ncclResult_t recovery_call(ncclComm_t comm, int me, int n, int c, float* send, float* recv,
                                  size_t count) {
  for (size_t i = 0; i < count; ++i) send[i] = recovery_input(me, c, i);
  ncclResult_t r = ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL);
  if (r != ncclSuccess) return r;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += recovery_input(q, c, i);
    if (recv[i] != want) FAIL("recovery call %d: element %zu is %g, want %g", c, i, recv[i], want);
  }
  return ncclSuccess;
}

/* The last rank leaves after 3 calls without a word (its sockets close as a killed process's
 * do; it exits 0 so that sqzrun lets the others go on). The others find out from a failed call
 * and ncclCommGetAsyncError, then ncclCommRevoke and ncclCommShrink with NCCL_SHRINK_ABORT, and
 * make 10 exact calls on the shrunk communicator. Host buffers. */
static void run_recovery(const char* idFile) {
  ncclUniqueId id;
  exchange_id(idFile, &id);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, g_nranks, id, g_rank));
  const size_t count = 1 << 16;
  float* send = malloc(count * sizeof(float));
  float* recv = malloc(count * sizeof(float));
  const int lost = g_nranks - 1;
  int call = 0;
  for (;; ++call) {
    if (g_rank == lost && call == 3) _exit(0);
    if (call > 1000) FAIL("recovery: no call failed after rank %d left", lost);
    ncclResult_t r = recovery_call(comm, g_rank, g_nranks, call, send, recv, count);
    if (r == ncclSuccess) continue;
    ncclResult_t async = ncclSuccess;
    NCCLCHECK(ncclCommGetAsyncError(comm, &async));
    if (async == ncclSuccess) FAIL("recovery: call %d failed (%d) with no asynchronous error", call, (int)r);
    printf("nccl_program recovery: rank %d: call %d failed: %s\n", g_rank, call,
           ncclGetLastError(comm));
    break;
  }
  NCCLCHECK(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
  int exclude[1] = {lost};
  ncclComm_t shrunk = NULL;
  NCCLCHECK(ncclCommShrink(comm, exclude, 1, &shrunk, NULL, NCCL_SHRINK_ABORT));
  NCCLCHECK(ncclCommDestroy(comm));
  int n = 0, me = -1;
  NCCLCHECK(ncclCommCount(shrunk, &n));
  NCCLCHECK(ncclCommUserRank(shrunk, &me));
  if (n != g_nranks - 1 || me != g_rank) FAIL("recovery: shrunk to %d ranks, rank %d", n, me);
  for (int c = 0; c < 10; ++c) NCCLCHECK(recovery_call(shrunk, me, n, 100 + c, send, recv, count));
  NCCLCHECK(ncclCommDestroy(shrunk));
  free(send);
  free(recv);
  if (g_rank == 0)
    printf("nccl_program recovery: %d of %d ranks revoked, shrank and made 10 exact calls: OK\n",
           n, g_nranks);
}

/* ---- one process, many communicators ------------------------------------------------------ */

static void run_initall(int ndev) {
  ncclComm_t comms[16];
  if (ndev < 1 || ndev > 16) FAIL("initall: NDEV is 1 to 16");
#ifdef NCCL_PROGRAM_CUDA
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) {
    /* A device the process does not see: refused at once, before any rank waits for it. */
    const int bad[2] = {0, gpus};
    if (ncclCommInitAll(comms, 2, bad) != ncclInvalidArgument)
      FAIL("initall: devlist {0, %d} with %d GPU(s) was not refused as invalid", gpus, gpus);
  }
#endif
  /* Without devlist, more communicators than GPUs share them (rank i on GPU i mod count). */
  NCCLCHECK(ncclCommInitAll(comms, ndev, NULL));
  const size_t count = 4096;
  int32_t* bufs[16];
  for (int d = 0; d < ndev; ++d) {
    bufs[d] = malloc(2 * count * sizeof(int32_t));
    for (size_t i = 0; i < count; ++i) bufs[d][i] = d * 3 + (int32_t)i;
  }
  /* One thread, every communicator: only a group lets each call wait for the others. */
  NCCLCHECK(ncclGroupStart());
  for (int d = 0; d < ndev; ++d)
    NCCLCHECK(ncclAllReduce(bufs[d], bufs[d], count, ncclInt32, ncclSum, comms[d], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int d = 0; d < ndev; ++d)
    for (size_t i = 0; i < count; ++i)
      if (bufs[d][i] != 3 * ndev * (ndev - 1) / 2 + ndev * (int32_t)i)
        FAIL("initall all-reduce: communicator %d element %zu is %d", d, i, bufs[d][i]);
  NCCLCHECK(ncclGroupStart());
  for (int d = 0; d < ndev; ++d) {
    NCCLCHECK(ncclSend(bufs[d], count, ncclInt32, (d + 1) % ndev, comms[d], NULL));
    NCCLCHECK(ncclRecv(bufs[d] + count, count, ncclInt32, (d + ndev - 1) % ndev, comms[d], NULL));
  }
  NCCLCHECK(ncclGroupEnd());
  for (int d = 0; d < ndev; ++d)
    if (memcmp(bufs[d] + count, bufs[(d + ndev - 1) % ndev], count * sizeof(int32_t)) != 0)
      FAIL("initall ring: communicator %d received the wrong block", d);
  for (int d = 0; d < ndev; ++d) {
    int me = -1;
    NCCLCHECK(ncclCommUserRank(comms[d], &me));
    if (me != d) FAIL("initall: communicator %d has rank %d", d, me);
    NCCLCHECK(ncclCommDestroy(comms[d]));
    free(bufs[d]);
  }
  printf("nccl_program initall: %d communicators in one process, grouped from one thread: OK\n",
         ndev);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: nccl_program collectives|gradients|recovery ID_FILE | initall NDEV\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (strcmp(argv[1], "initall") == 0) {
    run_initall(atoi(argv[2]));
    return 0;
  }
  g_rank = env_int("RANK", "OMPI_COMM_WORLD_RANK", 0);
  g_nranks = env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", 1);
  pick_device();
  if (strcmp(argv[1], "collectives") == 0)
    run_collectives(argv[2]);
  else if (strcmp(argv[1], "gradients") == 0)
    run_gradients(argv[2]);
  else if (strcmp(argv[1], "recovery") == 0)
    run_recovery(argv[2]);
  else
    FAIL("unknown mode '%s'", argv[1]);
  return 0;
}
