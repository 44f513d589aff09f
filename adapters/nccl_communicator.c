/* qjit_device_communicator over NCCL (qjit/qjit_tp_nccl.h). */
#include "qjit/qjit_tp_nccl.h"

#include <string.h>

/* NCCL's element type for a qjit dtype; 0 for one it has no sum of. */
static int nccl_type(qjit_dtype dtype, ncclDataType_t* type) {
    switch (dtype) {
        case QJIT_DTYPE_F16: *type = ncclFloat16; return 1;
        case QJIT_DTYPE_BF16: *type = ncclBfloat16; return 1;
        case QJIT_DTYPE_F32: *type = ncclFloat32; return 1;
        default: return 0;
    }
}

static int all_reduce_sum(void* user, void* buffer, int64_t count, qjit_dtype dtype, void* stream) {
    ncclDataType_t type;
    if (count < 0 || !nccl_type(dtype, &type)) return ncclInvalidArgument;
    return (int)ncclAllReduce(buffer, buffer, (size_t)count, type, ncclSum, (ncclComm_t)user, (cudaStream_t)stream);
}

static const char* error_string(void* user, int code) {
    (void)user;
    return ncclGetErrorString((ncclResult_t)code);
}

qjit_status qjit_nccl_communicator_create(ncclComm_t comm, qjit_device_communicator* out) {
    int rank = 0, world_size = 0;
    if (out == NULL || comm == NULL) return QJIT_ERROR_INVALID_ARGUMENT;
    if (ncclCommUserRank(comm, &rank) != ncclSuccess || ncclCommCount(comm, &world_size) != ncclSuccess)
        return QJIT_ERROR_COMMUNICATION;
    memset(out, 0, sizeof(*out));
    out->rank = rank;
    out->world_size = world_size;
    out->user = comm;
    out->all_reduce_sum = all_reduce_sum;
    out->error_string = error_string;
    return QJIT_OK;
}
