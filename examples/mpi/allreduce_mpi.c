/* allreduce_mpi.c: Squeeze inside an MPI program. sqzCommInitFromMpi (squeeze_mpi.h) makes a
 * Squeeze communicator with MPI_COMM_WORLD's ranks; the program then checks Squeeze against
 * MPI_Allreduce of the same data:
 *   1. a dense float32 sum (sqzAllReduce), bit for bit;
 *   2. a compressed sum (sqzAllReduceCompressed, --codec, default top-k keeping 1%) of the same
 *      gradient over several steps, with error feedback, against the exact sums (see
 *      compressedChecks for the bounds and why they hold), and its wire bytes against dense.
 * Rank 0 prints one line per check and "allreduce_mpi: OK" when all pass; every rank exits 1 when
 * one fails. A failed Squeeze call aborts the job (MPI_Abort) rather than leave ranks waiting,
 * except sqzCommInitFromMpi, whose failures every rank learns of: then every rank exits 1.
 *   mpirun -np 4 ./sqz-example-allreduce-mpi [--count N] [--codec SPEC] [--steps S]
 * Build outside the tree: mpicc -std=c11 allreduce_mpi.c $(pkg-config --cflags --libs squeeze) -lm
 */
#include <math.h>
#include <mpi.h>
#include <squeeze/squeeze.h>
#include <squeeze/squeeze_mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gRank, gRanks, gChecks, gFailed;
static sqzComm_t gComm;

/* A failed Squeeze call: name it and why, then end the whole job, since the other ranks may be
 * waiting in a collective this rank will never join. */
static void must(sqzResult_t result, const char* call) {
  if (result == sqzSuccess) return;
  fprintf(stderr, "allreduce_mpi: rank %d: %s failed: %s: %s\n", gRank, call,
          sqzGetErrorString(result), sqzGetLastError(gComm));
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void* allocOrAbort(size_t bytes) {
  void* p = calloc(bytes ? bytes : 1, 1);
  if (p == NULL) {
    fprintf(stderr, "allreduce_mpi: rank %d: out of memory (%zu bytes)\n", gRank, bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return p;
}

/* One check: every rank passes its verdict and all agree on the outcome (the minimum), so a
 * failure on any rank fails the check everywhere and no rank waits for another; rank 0 prints. */
static void check(int ok, const char* fmt, ...) {
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  ++gChecks;
  if (!all) ++gFailed;
  if (gRank != 0) return;
  va_list args;
  va_start(args, fmt);
  printf("allreduce_mpi: %s ", all ? "ok:" : "FAILED check:");
  vprintf(fmt, args);
  va_end(args);
  putchar('\n');
  fflush(stdout);
}

/* A line rank 0 prints that checks nothing. */
static void note(const char* fmt, ...) {
  if (gRank != 0) return;
  va_list args;
  va_start(args, fmt);
  printf("allreduce_mpi: ");
  vprintf(fmt, args);
  va_end(args);
  putchar('\n');
  fflush(stdout);
}

/* Element i of rank r's data for stream s: an integer multiple of 2^-10 in [-4, 4). Every partial
 * sum of up to 4096 such values is a multiple of 2^-10 below 2^14 in magnitude, which float32's
 * 24-bit significand holds exactly: the sum is exact whatever the order of the additions, so
 * Squeeze's algorithms and MPI's must produce the same bits. */
static float gridValue(uint32_t stream, int rank, size_t i) {
  uint32_t h = (uint32_t)i * 2654435761u ^ ((uint32_t)rank * 40503u + stream * 7919u);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (float)((int32_t)(h % 8192u) - 4096) / 1024.0f;
}

/* FNV-1a over the bytes: equal on every rank exactly when the results are (with overwhelming
 * probability), at the cost of two integers through MPI instead of the whole buffer. */
static uint64_t hashBytes(const void* data, size_t bytes) {
  const unsigned char* p = (const unsigned char*)data;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static int sameOnEveryRank(uint64_t h) {
  uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

static double sumOverRanks(double v) {
  double sum = 0;
  MPI_Allreduce(&v, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum;
}

static const char* lastAlgorithm(void) {
  const char* name = "?";
  must(sqzCommGetLastAlgorithm(gComm, &name), "sqzCommGetLastAlgorithm");
  return name;
}

/* Check 1: the dense all-reduce against MPI_Allreduce, bit for bit. */
static void denseCheck(size_t count) {
  float* send = (float*)allocOrAbort(count * sizeof(float));
  float* got = (float*)allocOrAbort(count * sizeof(float));
  float* want = (float*)allocOrAbort(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) send[i] = gridValue(1, gRank, i);
  must(sqzAllReduce(send, got, count, sqzFloat32, sqzSum, gComm, NULL), "sqzAllReduce");
  const char* algo = lastAlgorithm();
  MPI_Allreduce(send, want, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += memcmp(&got[i], &want[i], sizeof(float)) != 0;
  wrong = sumOverRanks(wrong);
  check(wrong == 0,
        "dense sqzAllReduce (%s) of %zu floats equals MPI_Allreduce bit for bit on "
        "every rank (%.0f elements differ)",
        algo, count, wrong);
  free(send);
  free(got);
  free(want);
}

/* The value of key in a codec spec ("topk:ratio=0.05,sample=1"), or fallback without it. */
static double specValue(const char* spec, const char* key, double fallback) {
  const char* colon = strchr(spec, ':');
  size_t keyLen = strlen(key);
  for (const char* p = colon ? colon + 1 : NULL; p != NULL && *p;) {
    if (strncmp(p, key, keyLen) == 0 && p[keyLen] == '=') return strtod(p + keyLen + 1, NULL);
    p = strchr(p, ',');
    if (p) ++p;
  }
  return fallback;
}

/* Check 2: the compressed all-reduce of one gradient g_r per rank, the same at every step t.
 * With error feedback each call compresses x = g + e and every encode on a rank, of its own values
 * or of a partial sum passing through, adds what it dropped, x - D(C(x)), to that rank's residual
 * e (docs/compression.md). The sum is linear, so from e = 0 before step 1, after T steps
 *     sum_t result_t + sum_r e_r(T) = T * sum_r g_r
 * to float rounding, and the error of the summed results is exactly the summed residuals:
 *     |sum_t result_t - T G| / |T G| = |sum_r e_r(T)| / (T |G|) <= sum_r |e_r(T)| / (T |G|),
 * G = sum_r g_r = MPI_Allreduce's exact sum, |e_r(T)| = sqzCodecGetStats' residualNorm on rank r.
 * The program checks that bound after step 1 and after T steps.
 * Top-k's own contraction, |x - C(x)|^2 <= (1 - k/n) |x|^2 for each chunk of n values it keeps k
 * of (k >= ratio * n), holds for every encode, so each rank's gain |C(x)|^2 / |x|^2 over
 * everything it encoded in step 1 is at least the ratio. The step-1 error is not bounded by
 * sum_r sqrt(1 - k/n) |g_r|: partial sums are re-selected to k values at every hop, and what each
 * hop drops adds up (3 ranks, chunk of 3, k = 1: g = (1, .9, 0), (0, .9, 0), (0, .9, 0) lose 2.7,
 * more than sqrt(2/3) * 3.15 = 2.57), so that is not claimed. */
static void compressedChecks(size_t count, const char* spec, int steps) {
  float* g = (float*)allocOrAbort(count * sizeof(float));
  float* out = (float*)allocOrAbort(count * sizeof(float));
  float* exactF = (float*)allocOrAbort(count * sizeof(float));
  double* sumOut = (double*)allocOrAbort(count * sizeof(double));
  for (size_t i = 0; i < count; ++i) g[i] = gridValue(2, gRank, i);
  MPI_Allreduce(g, exactF, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* exact: gridValue */
  double maxExact = 0, normG = 0;
  for (size_t i = 0; i < count; ++i) {
    normG += (double)exactF[i] * exactF[i];
    if (fabs(exactF[i]) > maxExact) maxExact = fabs(exactF[i]);
  }
  normG = sqrt(normG);

  char method[32] = {0};
  size_t methodLen = strcspn(spec, ":");
  memcpy(method, spec, methodLen < sizeof method - 1 ? methodLen : sizeof method - 1);
  /* DGC keeps its momentum velocity as the residual: the identity is about plain inputs. */
  const int telescopes = strcmp(method, "dgc") != 0;
  /* ef=0: nothing is fed back, so no residual accounts for what was dropped. */
  const int feedback = specValue(spec, "ef", 1) != 0;
  const int topk = strcmp(method, "topk") == 0;
  /* sample=1 (DGC's sampled threshold) may send fewer than k values: no contraction bound. */
  const int exactTopk = topk && specValue(spec, "sample", 0) == 0;
  const double ratio = specValue(spec, "ratio", 0.01);

  sqzCodec_t codec = NULL;
  must(sqzCodecCreate(&codec, spec, count, sqzFloat32, gComm), "sqzCodecCreate");
  int identicalSteps = 0;
  const char* algo = "?";
  for (int t = 1; t <= steps; ++t) {
    must(sqzAllReduceCompressed(g, out, count, sqzFloat32, sqzSum, codec, gComm, NULL),
         "sqzAllReduceCompressed");
    algo = lastAlgorithm();
    identicalSteps += sameOnEveryRank(hashBytes(out, count * sizeof(float)));
    for (size_t i = 0; i < count; ++i) sumOut[i] += out[i];
    if (t != 1 && t != steps) continue;

    sqzCodecStats_t st;
    must(sqzCodecGetStats(codec, &st), "sqzCodecGetStats");
    if (!telescopes) {
      note("skip: step %d: the residual bound (%s keeps momentum in its residual)", t, method);
    } else if (!feedback) {
      note("skip: step %d: the residual bound (ef=0: no error-feedback residual)", t);
    } else {
      /* The identity's rounding. With gridValue's data the sparsifiers (top-k, random-k,
       * threshold) only move values on the 2^-10 grid, so it is exact; codecs that rescale (int8,
       * qsgd, onebit, powersgd) round x = g + e, each partial sum and each residual update, every
       * value within a small multiple of t * maxExact, so each element drifts like
       * t * (hops) * 2^-24 * t * maxExact (about 1e-5 at 8 steps of 3 ranks). The bound allows
       * 1e-4 * ranks * t * maxExact per element, what tests/collective/compress_test.cc allows
       * per call: sqrt(count) times that in L2. */
      const double tolerance = 1e-4 * gRanks * t * (maxExact > 1e-3 ? maxExact : 1e-3);
      double err = 0;
      for (size_t i = 0; i < count; ++i) {
        const double d = sumOut[i] - (double)t * exactF[i];
        err += d * d;
      }
      const double relErr = sqrt(err) / (t * normG);
      const double bound =
          (sumOverRanks(st.residualNorm) + sqrt((double)count) * tolerance) / (t * normG);
      check(relErr <= bound,
            "step %d: relative L2 error of the summed results %.4f <= "
            "sum over ranks of |residual| / |%d x exact sum| = %.4f",
            t, relErr, t, bound);
    }
    if (t == 1 && topk && !exactTopk)
      note("skip: step 1: the top-k contraction (sample=1 may send fewer than k values)");
    if (t == 1 && exactTopk) {
      double gain = st.gain, minGain = 0;
      MPI_Allreduce(&gain, &minGain, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
      /* 1e-3: the gain's norms are summed in float lanes (compress/feedback.cc). */
      check(minGain >= ratio * (1 - 1e-3),
            "step 1: top-k contraction |x - C(x)| <= sqrt(1 - k/n) |x| on every rank: smallest "
            "gain |C(x)|^2/|x|^2 %.4f >= ratio %.4g",
            minGain, ratio);
    }
  }
  check(identicalSteps == steps,
        "compressed results (%s, %s) bitwise identical on every rank at %d of %d steps", spec, algo,
        identicalSteps, steps);

  sqzCodecStats_t st;
  must(sqzCodecGetStats(codec, &st), "sqzCodecGetStats");
  const double wire = sumOverRanks((double)st.wireBytes);
  const double dense = sumOverRanks((double)st.denseBytes);
  note("wire bytes: %.0f sent by all ranks over %d steps, against %.0f dense (ratio %.2f)", wire,
       steps, dense, wire > 0 ? dense / wire : 0.0);
  must(sqzCodecDestroy(codec), "sqzCodecDestroy");
  free(g);
  free(out);
  free(exactF);
  free(sumOut);
}

static int usage(const char* why) {
  if (gRank == 0)
    fprintf(stderr,
            "allreduce_mpi: %s\nusage: allreduce_mpi [--count N (1..%d, default "
            "1048576)] [--codec SPEC (default topk:ratio=0.01)] [--steps S (1..1000, default 8)]"
            "\n",
            why, 1 << 28);
  MPI_Finalize();
  return 2;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gRanks);
  long long count = 1 << 20;
  long steps = 8;
  const char* spec = "topk:ratio=0.01";
  for (int i = 1; i < argc; ++i) {
    char* end = NULL;
    if (i + 1 >= argc) return usage("every option takes a value");
    if (strcmp(argv[i], "--count") == 0) {
      count = strtoll(argv[++i], &end, 10);
      if (*end != '\0' || count < 1 || count > (1 << 28)) return usage("bad --count");
    } else if (strcmp(argv[i], "--steps") == 0) {
      steps = strtol(argv[++i], &end, 10);
      if (*end != '\0' || steps < 1 || steps > 1000) return usage("bad --steps");
    } else if (strcmp(argv[i], "--codec") == 0) {
      spec = argv[++i];
    } else {
      return usage("unknown option");
    }
  }
  if (gRanks > 4096) return usage("at most 4096 ranks (the exact sums of the check data)");

  /* Every rank learns whether every rank got its communicator. sqzCommInitFromMpi returns the
   * same error everywhere when rank 0 cannot make the id (or a rank passes NULL); a failure in
   * the join itself returns within SQZ_TIMEOUT_MS. So no rank is left waiting, and the job can
   * end cleanly (exit status 1 on every rank) instead of through MPI_Abort. */
  const sqzResult_t init = sqzCommInitFromMpi(MPI_COMM_WORLD, &gComm);
  int failed = init != sqzSuccess, anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (anyFailed) {
    const char* why = sqzGetLastError(NULL);
    if (failed)
      fprintf(stderr, "allreduce_mpi: rank %d: sqzCommInitFromMpi(MPI_COMM_WORLD) failed: %s: %s\n",
              gRank, sqzGetErrorString(init),
              why[0] ? why : "(the message is on the rank that failed)");
    else
      fprintf(stderr,
              "allreduce_mpi: rank %d: sqzCommInitFromMpi(MPI_COMM_WORLD) failed on "
              "another rank\n",
              gRank);
    sqzCommDestroy(gComm);
    MPI_Finalize();
    return 1;
  }
  int rank = -1, ranks = -1;
  must(sqzCommUserRank(gComm, &rank), "sqzCommUserRank");
  must(sqzCommCount(gComm, &ranks), "sqzCommCount");
  check(rank == gRank && ranks == gRanks,
        "sqzCommInitFromMpi: %d ranks, Squeeze's ranks and size are MPI_COMM_WORLD's", gRanks);
  note("%lld floats, codec %s, %ld steps", count, spec, steps);

  denseCheck((size_t)count);
  compressedChecks((size_t)count, spec, (int)steps);

  must(sqzCommDestroy(gComm), "sqzCommDestroy");
  gComm = NULL;
  if (gFailed)
    note("FAILED: %d of %d checks", gFailed, gChecks);
  else
    note("OK");
  MPI_Finalize();
  return gFailed ? 1 : 0;
}
