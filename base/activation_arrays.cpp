#include "base/activation_arrays.hpp"

#include <algorithm>

#include "base/activations.hpp"
#include "base/simd_clones.hpp"

namespace qjit {

// The last few values go through a padded vector, so that each is computed as the full vectors
// compute theirs.
QJIT_SIMD_CLONES void swiglu_in_place(float* up, const float* gate, int64_t count) {
    int64_t i = 0;
    for (; i + 16 <= count; i += 16) store16(up + i, silu(load16(gate + i)) * load16(up + i));
    if (i == count) return;
    float g[16] = {}, u[16] = {};
    std::copy(gate + i, gate + count, g);
    std::copy(up + i, up + count, u);
    store16(u, silu(load16(g)) * load16(u));
    std::copy(u, u + (count - i), up + i);
}

void gelu_in_place(float* up, int64_t count) {
    for (int64_t i = 0; i < count; ++i) up[i] = gelu(up[i]);
}

void relu_in_place(float* up, int64_t count) {
    for (int64_t i = 0; i < count; ++i) up[i] = std::max(0.0f, up[i]);
}

}  // namespace qjit
