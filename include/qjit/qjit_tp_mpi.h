/*
 * qjit's MPI adapter: a qjit_communicator (qjit/qjit_tp.h) over an MPI communicator, in its own
 * library (libqjit_mpi; link it and MPI, libqjit itself links no MPI).
 *
 *     qjit_communicator comm;
 *     qjit_mpi_communicator_create(MPI_COMM_WORLD, &comm);   after MPI_Init
 *     qjit_tp_mlp_forward(mlp, &comm, x, m, y, NULL);
 *     qjit_mpi_communicator_destroy(&comm);                  before MPI_Finalize
 *
 * The communicator works on one duplicate of the given MPI communicator, with MPI_ERRORS_RETURN
 * as its error handler: a failed collective comes back to qjit as an MPI error code (reported as
 * QJIT_ERROR_COMMUNICATION, named by MPI_Error_string) instead of aborting the job, and the
 * caller's communicator keeps its own error handler. The collectives are MPI_Allreduce
 * (MPI_IN_PLACE, MPI_FLOAT, MPI_SUM) and MPI_Allgather on MPI_FLOAT, split into calls of at most
 * INT_MAX elements. Every rank must create its communicator (MPI_Comm_dup is collective), and
 * destroy it, in the same order as its other collectives.
 */
#ifndef QJIT_QJIT_TP_MPI_H
#define QJIT_QJIT_TP_MPI_H

#include <mpi.h>

#include "qjit/qjit_tp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *out: rank and world size from comm, the collectives over a duplicate of comm.
 * QJIT_ERROR_INVALID_ARGUMENT for a NULL out, MPI_COMM_NULL or MPI not initialized;
 * QJIT_ERROR_COMMUNICATION when MPI fails; QJIT_ERROR_OUT_OF_MEMORY. *out is untouched on failure. */
QJIT_API qjit_status qjit_mpi_communicator_create(MPI_Comm comm, qjit_communicator* out);
/* Frees the duplicate communicator (collective, unless MPI is already finalized) and clears *comm.
 * NULL, or a communicator already destroyed, is a no-op. */
QJIT_API qjit_status qjit_mpi_communicator_destroy(qjit_communicator* comm);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* QJIT_QJIT_TP_MPI_H */
