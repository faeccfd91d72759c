/* allreduce.c: the README's example. Every rank contributes a small "gradient"; after
 * sqzAllReduce with sqzAvg every rank holds the mean. Run: sqzrun -n 4 ./sqz-example-allreduce
 * Build outside the tree: cc allreduce.c $(pkg-config --cflags --libs squeeze) */
#include <squeeze/squeeze.h>
#include <stdio.h>

#define CHECK(call)                                                             \
  do {                                                                          \
    sqzResult_t rc_ = (call);                                                   \
    if (rc_ != sqzSuccess) {                                                    \
      fprintf(stderr, "%s failed: %s: %s\n", #call, sqzGetErrorString(rc_),     \
              sqzGetLastError(comm));                                           \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

int main(void) {
  sqzComm_t comm = NULL;
  int rank, nranks;
  float grad[4];
  CHECK(sqzCommInitFromEnv(&comm, NULL)); /* reads SQZ_*, torchrun, Open MPI or Slurm env */
  CHECK(sqzCommUserRank(comm, &rank));
  CHECK(sqzCommCount(comm, &nranks));
  for (int i = 0; i < 4; ++i) grad[i] = (float)(rank + i);
  CHECK(sqzAllReduce(grad, grad, 4, sqzFloat, sqzAvg, comm, NULL)); /* in place */
  printf("rank %d of %d: mean gradient = [%g %g %g %g]\n", rank, nranks, grad[0], grad[1],
         grad[2], grad[3]);
  CHECK(sqzCommDestroy(comm));
  return 0;
}
