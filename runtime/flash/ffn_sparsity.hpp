// Training-free activation sparsity for SwiGLU FFNs, after CATS (Lee et al., 2024): a neuron's
// up and down vectors are needed for a token only when its gate activation |silu(x . gate_i)| is
// large enough, so an FFN that keeps the gate projection resident computes it for every neuron,
// and reads and multiplies up and down only for the neurons above a per-layer threshold. The
// threshold is calibrated on recorded FFN inputs so that a target share of (token, neuron) pairs
// falls below it; the NLL this costs is measured, never assumed (docs/flash.md).
//
// The score may weigh each neuron by what its up and down vectors make of the gate activation
// (SparsityScore::GateWeighted): |silu(g_i)| * rms(x . up_i) * |down_i|, the size of the neuron's
// contribution to y up to the sign and size of this token's x . up_i.
#pragma once

#include <cstdint>
#include <vector>

#include "base/activations.hpp"
#include "io/neuron_file.hpp"
#include "runtime/cpu/thread_pool.hpp"

namespace qjit {

enum class SparsityScore : uint8_t {
    Gate,          // |silu(x . gate_i)|: CATS
    GateWeighted,  // |silu(x . gate_i)| * rms over the calibration of (x . up_i) * |down_i|
};

struct LayerSparsity {
    float threshold = 0;
    std::vector<float> neuron_scales;  // [d_ff]: 1 for Gate; the weights of GateWeighted
    double zeroed_fraction = 0;        // of the calibration's (row, neuron) pairs
};

// Calibrates one layer: gate, up and down_t are [d_model][d_ff] (down transposed), x [n][d_model]
// the layer's FFN inputs on calibration tokens; target in [0, 1): the share of (row, neuron) pairs
// to zero. Throws an invalid-argument Error for null pointers, bad shapes, a target outside [0, 1)
// or non-finite inputs.
LayerSparsity calibrate_layer_sparsity(const float* gate, const float* up, const float* down_t, int64_t d_model,
                                       int64_t d_ff, const float* x, int64_t n, double target, SparsityScore score,
                                       ThreadPool& pool);

// The same for a layer as a neuron file stores it: the weights calibrated are the file's own
// (dequantized), so the thresholds hold for what the FFN computes.
LayerSparsity calibrate_layer_sparsity(const NeuronFileHeader& header, const FfnLayerWeights& weights, const float* x,
                                       int64_t n, double target, SparsityScore score, ThreadPool& pool);

// Appends a calibrated layer to a file's sparsity section (layers in order).
void append_layer(FfnSparsity& sparsity, const LayerSparsity& layer);

// The neuron's gate activation for one token when it takes part, else 0.
inline float sparse_gate_activation(float gate_product, float neuron_scale, float threshold) {
    const float a = silu(gate_product);
    return std::fabs(a) * neuron_scale > threshold ? a : 0.0f;
}

}  // namespace qjit
