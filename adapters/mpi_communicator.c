/* qjit_communicator over MPI (qjit/qjit_tp_mpi.h). */
#include "qjit/qjit_tp_mpi.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* What a communicator's `user` points to. */
typedef struct mpi_state {
    MPI_Comm comm; /* a duplicate of the caller's, with MPI_ERRORS_RETURN */
    char error[MPI_MAX_ERROR_STRING];
} mpi_state;

/* MPI counts are int: a collective on more elements is made of calls of at most this many. */
static const int64_t max_chunk = INT_MAX;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int all_reduce_sum_f32(void* user, float* buffer, int64_t count) {
    const mpi_state* state = (const mpi_state*)user;
    int64_t done;
    if (count < 0) return MPI_ERR_COUNT;
    for (done = 0; done < count; done += max_chunk) {
        const int chunk = (int)min64(count - done, max_chunk);
        const int error = MPI_Allreduce(MPI_IN_PLACE, buffer + done, chunk, MPI_FLOAT, MPI_SUM, state->comm);
        if (error != MPI_SUCCESS) return error;
    }
    return MPI_SUCCESS;
}

/* Elements [offset, offset + chunk) of every rank's send, each to its place in receive, where rank
 * r's `count` elements start at r * count: one block of `chunk` floats per rank, `count` floats
 * apart, described by a datatype whose extent is that stride. */
static int all_gather_chunk(MPI_Comm comm, const float* send, float* receive, int64_t count, int64_t offset,
                            int chunk) {
    MPI_Datatype block, strided_block;
    int error = MPI_Type_contiguous(chunk, MPI_FLOAT, &block);
    if (error != MPI_SUCCESS) return error;
    error = MPI_Type_create_resized(block, 0, (MPI_Aint)(count * (int64_t)sizeof(float)), &strided_block);
    MPI_Type_free(&block);
    if (error != MPI_SUCCESS) return error;
    error = MPI_Type_commit(&strided_block);
    if (error == MPI_SUCCESS)
        error = MPI_Allgather(send + offset, chunk, MPI_FLOAT, receive + offset, 1, strided_block, comm);
    MPI_Type_free(&strided_block);
    return error;
}

static int all_gather_f32(void* user, const float* send, float* receive, int64_t count) {
    const mpi_state* state = (const mpi_state*)user;
    int64_t done;
    if (count < 0) return MPI_ERR_COUNT;
    if (count <= max_chunk) /* the common case: one call, no datatype to make */
        return MPI_Allgather(send, (int)count, MPI_FLOAT, receive, (int)count, MPI_FLOAT, state->comm);
    for (done = 0; done < count; done += max_chunk) {
        const int error = all_gather_chunk(state->comm, send, receive, count, done, (int)min64(count - done, max_chunk));
        if (error != MPI_SUCCESS) return error;
    }
    return MPI_SUCCESS;
}

static const char* error_string(void* user, int code) {
    mpi_state* state = (mpi_state*)user;
    int length = 0;
    if (MPI_Error_string(code, state->error, &length) != MPI_SUCCESS) return "unknown MPI error code";
    return state->error;
}

qjit_status qjit_mpi_communicator_create(MPI_Comm comm, qjit_communicator* out) {
    int initialized = 0, finalized = 0, rank = 0, world_size = 0;
    mpi_state* state;
    if (out == NULL || comm == MPI_COMM_NULL) return QJIT_ERROR_INVALID_ARGUMENT;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) return QJIT_ERROR_INVALID_ARGUMENT;

    state = (mpi_state*)calloc(1, sizeof(mpi_state));
    if (state == NULL) return QJIT_ERROR_OUT_OF_MEMORY;
    if (MPI_Comm_dup(comm, &state->comm) != MPI_SUCCESS) {
        free(state);
        return QJIT_ERROR_COMMUNICATION;
    }
    if (MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
        MPI_Comm_rank(state->comm, &rank) != MPI_SUCCESS || MPI_Comm_size(state->comm, &world_size) != MPI_SUCCESS) {
        MPI_Comm_free(&state->comm);
        free(state);
        return QJIT_ERROR_COMMUNICATION;
    }

    memset(out, 0, sizeof(*out));
    out->rank = rank;
    out->world_size = world_size;
    out->user = state;
    out->all_reduce_sum_f32 = all_reduce_sum_f32;
    out->all_gather_f32 = all_gather_f32;
    out->error_string = error_string;
    return QJIT_OK;
}

qjit_status qjit_mpi_communicator_destroy(qjit_communicator* comm) {
    mpi_state* state;
    int finalized = 0;
    qjit_status status = QJIT_OK;
    if (comm == NULL || comm->user == NULL) return QJIT_OK;
    state = (mpi_state*)comm->user;
    MPI_Finalized(&finalized);
    if (!finalized && MPI_Comm_free(&state->comm) != MPI_SUCCESS) status = QJIT_ERROR_COMMUNICATION;
    free(state);
    memset(comm, 0, sizeof(*comm));
    return status;
}
