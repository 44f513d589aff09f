// A tensor-parallel MLP's forward on its context's CUDA device (qjit_tp_mlp_forward_cuda): the
// shard layers' CUDA sides, the activation as a support kernel between them, and the caller's
// device all-reduce of the partial outputs, all enqueued on the caller's stream.
#pragma once

#include <cstdint>

#include "qjit/qjit_tp.h"

struct qjit_tp_mlp;

namespace qjit {

// y (m x N2, device) = the MLP of x (m x K1, device), both of dtype F16 or BF16. Throws
// QJIT_ERROR_UNSUPPORTED where the shards need the naive all-gather, QJIT_ERROR_NO_DEVICE where
// they have no CUDA side, QJIT_ERROR_COMMUNICATION (y set to NaN) when the all-reduce fails.
void tp_mlp_forward_cuda(qjit_tp_mlp& mlp, const qjit_device_communicator& comm, const void* x, int64_t m,
                         qjit_dtype dtype, void* y, void* stream);

}  // namespace qjit
