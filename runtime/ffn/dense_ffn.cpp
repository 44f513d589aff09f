#include "runtime/ffn/dense_ffn.hpp"

#include <vector>

#include "base/scratch.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit {

void ffn_hidden(const FfnParts& parts, const float* x, int64_t m, float* hidden, float* gate) {
    if (parts.gate) {
        const qjit_linear* layers[] = {parts.gate, parts.up};
        float* const outputs[] = {gate, hidden};
        linear_forward_shared_input(layers, x, m, outputs);
    } else {
        linear_forward(*parts.up, x, m, hidden);
    }
    activate(parts, hidden, gate, m * parts.hidden());
}

void dense_ffn_forward(const FfnParts& parts, const float* x, int64_t m, float* y) {
    thread_local std::vector<float> hidden, gate;
    const size_t values = size_t(m * parts.hidden());
    ffn_hidden(parts, x, m, grow(hidden, values), parts.gate ? grow(gate, values) : nullptr);
    linear_forward(*parts.down, hidden.data(), m, y);
}

}  // namespace qjit
