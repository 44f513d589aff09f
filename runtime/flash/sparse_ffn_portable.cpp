// The reference path of the sparse FFN: each weight dequantized on its own from the cache's
// vector bytes by format/neuron_record.cpp, products and sums in double. Shares nothing with the
// fast path but the layout.
#include <vector>

#include "base/half.hpp"
#include "format/neuron_record.hpp"
#include "runtime/flash/sparse_ffn_internal.hpp"

namespace qjit {

namespace {

using Data = NeuronCache::Data;

// The d_model weights of a slot's part.
void slot_vector(const Data& d, NeuronPart part, int64_t slot, float* out) {
    if (!d.quantized) {
        const uint16_t* row = d.f16_row(part, slot);
        for (int64_t k = 0; k < d.d_model; ++k) out[k] = half_to_float(row[k]);
    } else {
        dequantize_vector(d.header.vector, d.vector(part, slot), out);
    }
}

double dot(const float* x, const float* w, int64_t n) {
    double sum = 0.0;
    for (int64_t k = 0; k < n; ++k) sum += double(x[k]) * double(w[k]);
    return sum;
}

}  // namespace

void sparse_ffn_portable(const Data& d, std::span<const int32_t> slots, const float* x, int64_t m, float* y,
                         const float* gate_activations) {
    const int64_t n = d.d_model;
    const bool gated = d.has(NeuronPart::Gate);
    std::vector<double> acc(y, y + m * n);
    const size_t values = size_t(n);
    std::vector<float> gate(values), up(values), down(values);
    for (size_t i = 0; i < slots.size(); ++i) {
        const int32_t s = slots[i];
        if (gated) slot_vector(d, NeuronPart::Gate, s, gate.data());
        slot_vector(d, NeuronPart::Up, s, up.data());
        slot_vector(d, NeuronPart::Down, s, down.data());
        const double bias = d.bias.empty() ? 0.0 : double(d.bias[size_t(s)]);
        for (int64_t r = 0; r < m; ++r) {
            const double u = dot(x + r * n, up.data(), n);
            const double a = gate_activations != nullptr
                                 ? double(gate_activations[i * size_t(m) + size_t(r)]) * u
                                 : ffn_activation(d.header.activation, gated ? dot(x + r * n, gate.data(), n) : 0.0, u, bias);
            for (int64_t k = 0; k < n; ++k) acc[size_t(r * n + k)] += a * double(down[size_t(k)]);
        }
    }
    for (int64_t i = 0; i < m * n; ++i) y[i] = float(acc[size_t(i)]);
}

void sparse_products_portable(const Data& d, NeuronPart part, std::span<const int32_t> slots, const float* x,
                              int64_t m, float* out) {
    std::vector<float> vector(static_cast<size_t>(d.d_model));
    for (size_t i = 0; i < slots.size(); ++i) {
        slot_vector(d, part, slots[i], vector.data());
        for (int64_t r = 0; r < m; ++r) out[i * size_t(m) + size_t(r)] = float(dot(x + r * d.d_model, vector.data(), d.d_model));
    }
}

}  // namespace qjit
