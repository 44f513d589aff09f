/*
 * qjit's NCCL adapter: a qjit_device_communicator (qjit/qjit_tp.h) over an NCCL communicator, for
 * qjit_tp_mlp_forward_cuda, in its own library (libqjit_nccl; link it and NCCL, libqjit itself links
 * no NCCL). Built where CMake finds NCCL beside the CUDA toolkit.
 *
 *     ncclComm_t nccl;                                         ncclCommInitRank(...) on each rank
 *     qjit_device_communicator comm;
 *     qjit_nccl_communicator_create(nccl, &comm);
 *     qjit_tp_mlp_forward_cuda(mlp, &comm, x, m, QJIT_DTYPE_BF16, y, stream);
 *
 * The communicator borrows the NCCL communicator: keep it alive while the qjit one is used, and
 * destroy it yourself. The all-reduce is ncclAllReduce in place with ncclSum, on ncclFloat16,
 * ncclBfloat16 or ncclFloat32 for QJIT_DTYPE_F16, _BF16 and _F32, enqueued on the forward's stream;
 * its error codes are ncclResult_t values, named by ncclGetErrorString.
 */
#ifndef QJIT_QJIT_TP_NCCL_H
#define QJIT_QJIT_TP_NCCL_H

#include <nccl.h>

#include "qjit/qjit_tp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *out: rank and world size from comm (ncclCommUserRank, ncclCommCount), the all-reduce over
 * it. QJIT_ERROR_INVALID_ARGUMENT for a NULL out or comm; QJIT_ERROR_COMMUNICATION when NCCL cannot
 * say the rank or size. *out is untouched on failure. */
QJIT_API qjit_status qjit_nccl_communicator_create(ncclComm_t comm, qjit_device_communicator* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* QJIT_QJIT_TP_NCCL_H */
