// The Sharded FFN strategy (tensor parallelism, include/qjit/qjit_tp.h): a rank's shards of one FFN
// run as the Dense strategy's halves with the caller's collectives between and after them: the
// hidden values, all-gathered and permuted into W_down's row order where the shards need it (the
// naive algorithm), the down product, and the all-reduce that sums every rank's partial y.
#pragma once

#include <cstdint>
#include <span>

#include "qjit/qjit_tp.h"
#include "runtime/ffn/ffn_parts.hpp"

namespace qjit {

struct ShardedFfn {
    FfnParts shard;  // this rank's: gate and up K x c, down c x N (c = H / world_size)
    int rank = 0;
    int world_size = 1;
    bool all_gather = false;  // gather every rank's hidden values and take this rank's rows of W_down
    std::span<const int32_t> down_rows;  // P2: W_down's original rows in storage order, all H of them
};

// y = the whole FFN of x on every rank; timing (may be NULL) as qjit_tp_mlp_forward reports it. The
// communicator is checked by the caller. Throws QJIT_ERROR_COMMUNICATION, with y filled with NaN,
// when a collective fails.
void sharded_ffn_forward(const ShardedFfn& ffn, const qjit_communicator& comm, const float* x, int64_t m, float* y,
                         qjit_tp_timing* timing);

}  // namespace qjit
