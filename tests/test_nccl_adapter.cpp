// The NCCL adapter (adapters/nccl_communicator.c) over a stand-in NCCL defined here: which NCCL calls
// each qjit call makes, with which buffers, types, reduction and stream, and how NCCL's errors come
// back. Runs without a GPU or libnccl; tests/test_nccl_device.cpp runs the real one on a device.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "qjit/qjit_tp_nccl.h"

namespace {

// What the stand-in NCCL saw last, and what it answers.
struct StandIn {
    int rank = 3, count = 8;
    ncclResult_t answer = ncclSuccess;
    int all_reduces = 0;
    const void* send = nullptr;
    void* receive = nullptr;
    size_t elements = 0;
    ncclDataType_t type = ncclInt8;
    ncclRedOp_t op = ncclMax;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
} nccl;

}  // namespace

extern "C" {

ncclResult_t ncclCommUserRank(const ncclComm_t, int* rank) {
    *rank = nccl.rank;
    return nccl.answer;
}
ncclResult_t ncclCommCount(const ncclComm_t, int* count) {
    *count = nccl.count;
    return nccl.answer;
}
ncclResult_t ncclAllReduce(const void* send, void* receive, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    ++nccl.all_reduces;
    nccl.send = send, nccl.receive = receive, nccl.elements = count, nccl.type = type, nccl.op = op;
    nccl.comm = comm, nccl.stream = stream;
    return nccl.answer;
}
const char* ncclGetErrorString(ncclResult_t result) {
    return result == ncclUnhandledCudaError ? "unhandled cuda error (stand-in)" : "other (stand-in)";
}

}  // extern "C"

namespace {

ncclComm_t fake_comm() { return reinterpret_cast<ncclComm_t>(uintptr_t(0xc0ffee)); }

TEST(NcclAdapter, TakesRankAndSizeFromTheCommunicator) {
    nccl = StandIn{};
    qjit_device_communicator comm;
    ASSERT_EQ(qjit_nccl_communicator_create(fake_comm(), &comm), QJIT_OK);
    EXPECT_EQ(comm.rank, 3);
    EXPECT_EQ(comm.world_size, 8);
    EXPECT_EQ(comm.user, static_cast<void*>(fake_comm()));
    EXPECT_NE(comm.all_reduce_sum, nullptr);
    EXPECT_NE(comm.error_string, nullptr);
}

TEST(NcclAdapter, RefusesNullsAndReportsNcclFailures) {
    nccl = StandIn{};
    qjit_device_communicator comm;
    std::memset(&comm, 0x5a, sizeof comm);
    const qjit_device_communicator before = comm;
    EXPECT_EQ(qjit_nccl_communicator_create(nullptr, &comm), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_nccl_communicator_create(fake_comm(), nullptr), QJIT_ERROR_INVALID_ARGUMENT);
    nccl.answer = ncclInvalidUsage;
    EXPECT_EQ(qjit_nccl_communicator_create(fake_comm(), &comm), QJIT_ERROR_COMMUNICATION);
    EXPECT_EQ(std::memcmp(&comm, &before, sizeof comm), 0) << "*out is untouched on failure";
}

// In place, a sum, NCCL's type for each dtype, the caller's stream and communicator.
TEST(NcclAdapter, AllReduceIsAnInPlaceSumOnTheStream) {
    nccl = StandIn{};
    qjit_device_communicator comm;
    ASSERT_EQ(qjit_nccl_communicator_create(fake_comm(), &comm), QJIT_OK);
    int buffer = 0;
    void* stream = reinterpret_cast<void*>(uintptr_t(0x5157));
    const std::pair<qjit_dtype, ncclDataType_t> types[] = {
        {QJIT_DTYPE_F16, ncclFloat16}, {QJIT_DTYPE_BF16, ncclBfloat16}, {QJIT_DTYPE_F32, ncclFloat32}};
    for (const auto& [dtype, type] : types) {
        EXPECT_EQ(comm.all_reduce_sum(comm.user, &buffer, 12345, dtype, stream), 0);
        EXPECT_EQ(nccl.send, &buffer);
        EXPECT_EQ(nccl.receive, &buffer);
        EXPECT_EQ(nccl.elements, 12345u);
        EXPECT_EQ(nccl.type, type);
        EXPECT_EQ(nccl.op, ncclSum);
        EXPECT_EQ(nccl.comm, fake_comm());
        EXPECT_EQ(static_cast<void*>(nccl.stream), stream);
    }
    EXPECT_EQ(nccl.all_reduces, 3);
}

TEST(NcclAdapter, ErrorsComeBackAsNcclCodesWithTheirNames) {
    nccl = StandIn{};
    qjit_device_communicator comm;
    ASSERT_EQ(qjit_nccl_communicator_create(fake_comm(), &comm), QJIT_OK);
    int buffer = 0;
    nccl.answer = ncclUnhandledCudaError;
    const int code = comm.all_reduce_sum(comm.user, &buffer, 4, QJIT_DTYPE_F16, nullptr);
    EXPECT_EQ(code, int(ncclUnhandledCudaError));
    EXPECT_EQ(std::string(comm.error_string(comm.user, code)), "unhandled cuda error (stand-in)");
    nccl = StandIn{};
    EXPECT_EQ(comm.all_reduce_sum(comm.user, &buffer, 4, qjit_dtype(99), nullptr), int(ncclInvalidArgument));
    EXPECT_EQ(comm.all_reduce_sum(comm.user, &buffer, -1, QJIT_DTYPE_F16, nullptr), int(ncclInvalidArgument));
    EXPECT_EQ(nccl.all_reduces, 0) << "refused before NCCL is called";
}

}  // namespace
