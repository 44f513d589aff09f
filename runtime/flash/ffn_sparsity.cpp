#include "runtime/flash/ffn_sparsity.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "format/reference.hpp"
#include "runtime/flash/dense_product.hpp"

namespace qjit {

LayerSparsity calibrate_layer_sparsity(const float* gate, const float* up, const float* down_t, int64_t d_model,
                                       int64_t d_ff, const float* x, int64_t n, double target, SparsityScore score,
                                       ThreadPool& pool) {
    require(gate && up && down_t && x, "ffn sparsity: a calibration input is null");
    require(d_model >= 1 && d_ff >= 1 && n >= 1, "ffn sparsity: shape ", n, " x ", d_model, " -> ", d_ff,
            " (at least one row and neuron)");
    require(target >= 0 && target < 1, "ffn sparsity: target ", target, " outside [0, 1)");
    for (int64_t i = 0; i < n * d_model; ++i)
        require(std::isfinite(x[i]), "ffn sparsity: calibration input ", i, " is not finite");

    const size_t pairs = size_t(n * d_ff);
    std::vector<float> gate_products(pairs);
    dense_product(x, n, gate, d_model, d_ff, gate_products.data(), pool);

    LayerSparsity layer;
    layer.neuron_scales.assign(size_t(d_ff), 1.0f);
    if (score == SparsityScore::GateWeighted) {
        std::vector<float> up_products(pairs);
        dense_product(x, n, up, d_model, d_ff, up_products.data(), pool);
        std::vector<double> up_squares(size_t(d_ff), 0.0), down_squares(size_t(d_ff), 0.0);
        for (int64_t r = 0; r < n; ++r)
            for (int64_t i = 0; i < d_ff; ++i) up_squares[size_t(i)] += double(up_products[size_t(r * d_ff + i)]) * up_products[size_t(r * d_ff + i)];
        for (int64_t k = 0; k < d_model; ++k)
            for (int64_t i = 0; i < d_ff; ++i) down_squares[size_t(i)] += double(down_t[k * d_ff + i]) * down_t[k * d_ff + i];
        // Normalized to a mean of 1, so thresholds read on the scale of the gate activations.
        double sum = 0;
        for (int64_t i = 0; i < d_ff; ++i) {
            const double scale = std::sqrt(up_squares[size_t(i)] / double(n)) * std::sqrt(down_squares[size_t(i)]);
            layer.neuron_scales[size_t(i)] = float(scale);
            sum += scale;
        }
        if (sum > 0)
            for (float& s : layer.neuron_scales) s = float(double(s) * double(d_ff) / sum);
    }

    std::vector<float> scores(pairs);
    for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < d_ff; ++i)
            scores[size_t(r * d_ff + i)] = std::fabs(silu(gate_products[size_t(r * d_ff + i)])) * layer.neuron_scales[size_t(i)];
    // The threshold: the score below which `target` of the pairs lie (the pairs at it are zeroed
    // too, as sparse_gate_activation keeps only scores above it).
    const size_t zeroed = size_t(target * double(pairs));
    if (zeroed > 0) {
        std::nth_element(scores.begin(), scores.begin() + (zeroed - 1), scores.end());
        layer.threshold = scores[zeroed - 1];
    }
    int64_t below = 0;
    for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < d_ff; ++i)
            below += sparse_gate_activation(gate_products[size_t(r * d_ff + i)], layer.neuron_scales[size_t(i)],
                                            layer.threshold) == 0.0f;
    layer.zeroed_fraction = double(below) / double(pairs);
    return layer;
}

LayerSparsity calibrate_layer_sparsity(const NeuronFileHeader& header, const FfnLayerWeights& weights, const float* x,
                                       int64_t n, double target, SparsityScore score, ThreadPool& pool) {
    require(header.activation == FfnActivation::SwiGlu, "ffn sparsity: calibrated sparsity is for SwiGlu FFNs");
    if (header.vector.coding == VectorCoding::F16)
        return calibrate_layer_sparsity(weights.gate_f32.data(), weights.up_f32.data(), weights.down_t_f32.data(),
                                        header.d_model, header.d_ff, x, n, target, score, pool);
    const std::vector<float> gate = dequantize(weights.gate), up = dequantize(weights.up),
                             down_t = dequantize(weights.down_t);
    return calibrate_layer_sparsity(gate.data(), up.data(), down_t.data(), header.d_model, header.d_ff, x, n, target,
                                    score, pool);
}

void append_layer(FfnSparsity& sparsity, const LayerSparsity& layer) {
    sparsity.thresholds.push_back(layer.threshold);
    sparsity.neuron_scales.insert(sparsity.neuron_scales.end(), layer.neuron_scales.begin(), layer.neuron_scales.end());
}

}  // namespace qjit
