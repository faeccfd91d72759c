/*
 * squeeze_mpi.h: a Squeeze communicator from an MPI communicator, for programs that already run
 * under mpirun. Header-only, C and C++: this file is all of Squeeze's MPI code, and libsqueeze
 * itself never links MPI, so a program that includes it links its own MPI (mpicc, or
 * dependency('mpi')) and squeeze. The unique id travels by MPI_Bcast; after that the
 * communicator is independent of MPI (its own sockets or shared memory) and may outlive it.
 */
#ifndef SQUEEZE_SQUEEZE_MPI_H_
#define SQUEEZE_SQUEEZE_MPI_H_

#include <mpi.h>

#include "squeeze.h"

/**
 * Creates a Squeeze communicator with the ranks of mpiComm (Squeeze rank = MPI rank, nranks =
 * MPI size), with a configuration. Collective over mpiComm: every rank calls it, as any MPI
 * collective, and it calls MPI itself (an MPI_Allreduce and an MPI_Bcast on mpiComm), so MPI must
 * be initialized and not finalized. Rank 0 makes the unique id (sqzGetUniqueId) and broadcasts
 * it; then every rank joins with sqzCommInitRankConfig.
 *
 * Failures before the join are agreed first, so no rank is left waiting for the others: when
 * rank 0's sqzGetUniqueId fails (sqzGetLastError(NULL) there says why), or any rank passes a NULL
 * comm, every rank returns that error (the largest code when several fail) and nothing is
 * created. Failures inside the join behave as in sqzCommInitRankConfig.
 *
 * @param mpiComm an intracommunicator (MPI_COMM_WORLD, or one from MPI_Comm_split...).
 * @param comm receives the communicator, or NULL on failure.
 * @param config may be NULL (every setting from the environment or the defaults).
 * @return sqzSuccess; sqzSystemError when an MPI call fails (possible only with an error handler
 *         that returns, such as MPI_ERRORS_RETURN; MPI's default aborts); sqzInvalidArgument
 *         for a NULL comm on any rank; otherwise as sqzGetUniqueId and sqzCommInitRankConfig.
 *         Thread safety as for MPI collectives on mpiComm.
 */
static inline sqzResult_t sqzCommInitFromMpiConfig(MPI_Comm mpiComm, sqzComm_t* comm,
                                                   const sqzConfig_t* config) {
  int rank = 0, nranks = 0;
  int local = sqzSuccess, agreed = sqzSuccess;
  sqzUniqueId id;
  if (comm != NULL) *comm = NULL;
  if (MPI_Comm_rank(mpiComm, &rank) != MPI_SUCCESS ||
      MPI_Comm_size(mpiComm, &nranks) != MPI_SUCCESS)
    return sqzSystemError;
  if (comm == NULL)
    local = sqzInvalidArgument;
  else if (rank == 0)
    local = sqzGetUniqueId(&id);
  /* Rank 0's result (and any rank's bad argument) reaches every rank before anyone waits on the
   * id, so a failure returns everywhere instead of leaving the other ranks in MPI_Bcast. */
  if (MPI_Allreduce(&local, &agreed, 1, MPI_INT, MPI_MAX, mpiComm) != MPI_SUCCESS)
    return sqzSystemError;
  if (agreed != sqzSuccess) return local != sqzSuccess ? (sqzResult_t)local : (sqzResult_t)agreed;
  if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, mpiComm) != MPI_SUCCESS) return sqzSystemError;
  return sqzCommInitRankConfig(comm, nranks, id, rank, config);
}

/**
 * sqzCommInitFromMpiConfig with every setting from the environment or the defaults.
 * Collective over mpiComm; see sqzCommInitFromMpiConfig.
 * @param mpiComm an intracommunicator.
 * @param comm receives the communicator, or NULL on failure.
 * @return as sqzCommInitFromMpiConfig.
 */
static inline sqzResult_t sqzCommInitFromMpi(MPI_Comm mpiComm, sqzComm_t* comm) {
  return sqzCommInitFromMpiConfig(mpiComm, comm, NULL);
}

#endif /* SQUEEZE_SQUEEZE_MPI_H_ */
