// A rank's share of a tensor-parallel MLP (include/qjit/qjit_tp.h, docs/tensor-parallel.md): its
// shard layers, cut from the whole MLP's quantized matrices, and its forward over the caller's
// communicator.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "format/quantized_matrix.hpp"
#include "qjit/qjit_tp.h"
#include "runtime/linear_layer.hpp"

namespace qjit {
struct TpMlpDeviceScratch;
}

struct qjit_tp_mlp {
    qjit_context* context = nullptr;
    qjit_mlp_kind kind = QJIT_MLP_SWIGLU;
    qjit_tp_algorithm algorithm = QJIT_TP_AWARE;
    int rank = 0;
    int world_size = 1;
    int64_t k1 = 0, n1 = 0, n2 = 0;
    std::vector<int32_t> down_rows;  // P2: W_down's original rows in storage order, all N1 of them
    std::unique_ptr<qjit_linear> up, gate, down;  // this rank's shards; no gate for GELU
    std::mutex device_mutex;                      // one device forward at a time (runtime/tp_mlp_cuda.hpp)
    std::shared_ptr<qjit::TpMlpDeviceScratch> device_scratch;  // made by the first device forward

    int64_t shard_n1() const { return n1 / world_size; }
};

namespace qjit {

// A whole MLP's matrices (the gate's is unused for GELU).
struct MlpMatrices {
    qjit_mlp_kind kind = QJIT_MLP_SWIGLU;
    QuantizedMatrix up, gate, down;
};

// Rank `rank`'s shards (checked: kind, algorithm, rank and world size, shapes, group boundaries).
std::unique_ptr<qjit_tp_mlp> make_tp_mlp(qjit_context* context, const MlpMatrices& mlp, int rank, int world_size,
                                         qjit_tp_algorithm algorithm);

// Checks an MLP's shards against its description (what a loaded file must agree with).
void check_tp_mlp(const qjit_tp_mlp& mlp);

// y = the MLP of x on every rank (qjit_tp_mlp_forward). Throws QJIT_ERROR_COMMUNICATION, with y
// filled with NaN, when a collective fails.
void tp_mlp_forward(const qjit_tp_mlp& mlp, const qjit_communicator& comm, const float* x, int64_t m, float* y,
                    qjit_tp_timing* timing);

qjit_tp_traffic tp_mlp_traffic(const qjit_tp_mlp& mlp, int64_t m);

// Whether the forward all-gathers and permutes the intermediate activations: the naive algorithm,
// unless there is one rank and W_down's rows are in their original order.
bool needs_all_gather(const qjit_tp_mlp& mlp);

}  // namespace qjit
