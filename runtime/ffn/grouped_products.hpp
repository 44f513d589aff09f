// Several layers of one K, each on its own rows of a shared input, as grouped calls
// (BackendLayer::run_grouped): the x86 JIT's layers as one call, whose products run in one
// dispatch (runtime/cpu/jit_grouped.cpp), the others one after another. The MoE call
// (runtime/moe_forward.cpp) and the Experts FFN (runtime/ffn/experts_ffn.cpp) run their experts'
// products through it. The lists only grow, so steady-state calls do not allocate.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/layer_backend.hpp"

struct qjit_linear;

namespace qjit {

class GroupedProducts {
public:
    void clear();
    // `layer`'s count x N outputs of rows[0..count) of the input, into out; `index` names it in
    // messages (experts[index]). Layers with no rows are not added.
    void add(int index, const qjit_linear& layer, const int32_t* rows, int64_t count, float* out);
    // Runs every layer added on x (rows x k).
    void run(const float* x, int64_t k) const;

private:
    std::vector<GroupedRows> jit_group_, other_group_;
};

}  // namespace qjit
