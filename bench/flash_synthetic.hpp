// A synthetic OPT-shaped FFN set for bench_flash: ReLU FFNs (up, bias, down) whose activations are
// sparse and correlated in time the way OPT's are, with weights a low-rank predictor can follow.
//
//   inputs    per layer, x_t = rho x_{t-1} + sqrt(1 - rho^2) e_t, e_t ~ N(0, I): each x_t is N(0, I),
//             and consecutive tokens share most of their direction (rho 0.9 by default); across
//             layers, as a residual stream, x_{l,t} = c x_{l-1,t} + sqrt(1 - c^2) u_{l,t} with u_l a
//             stream of the same kind (c, layer_rho, 0.9 by default), so each layer's stream is
//             still one of the kind above
//   up        u_i = L r_i + sigma n_i (L: d_model x 16, r_i, n_i Gaussian): mostly low rank, as
//             trained projections are, plus a full-rank rest a low-rank predictor cannot see
//   bias      b_i = -z(1 - p_i) |u_i|, so x . u_i + b_i > 0 with probability p_i exactly;
//             p_i log-normal around the mean activity (3 %), so some neurons are hot
//   down      Gaussian, scaled by 1 / sqrt(d_ff)
// The layers share one layer's weights (generated once, written once per layer: the records and
// their checksums differ by layer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/neuron_file.hpp"

namespace qjit_bench {

struct SyntheticFfnSpec {
    int64_t layers = 32, d_model = 4096, d_ff = 16384;
    double activity = 0.03;  // mean fraction of neurons active per token
    double rho = 0.9;        // correlation of consecutive inputs
    double layer_rho = 0.9;  // correlation of a token's inputs to consecutive layers
    double sigma = 0.25;     // the full-rank share of the up projection
    uint64_t seed = 1;
};

struct SyntheticFfn {
    SyntheticFfnSpec spec;
    std::vector<float> up;    // [d_model][d_ff]
    std::vector<float> bias;  // [d_ff]
    std::vector<float> down;  // [d_ff][d_model]
};

SyntheticFfn make_synthetic_ffn(const SyntheticFfnSpec& spec);

// Every layer's inputs for `tokens` tokens, [layer][tokens][d_model]; `stream` picks an independent
// sequence (calibration and measurement use different ones). Layer 0's are the same whatever the
// number of layers.
std::vector<std::vector<float>> synthetic_inputs(const SyntheticFfnSpec& spec, int64_t layers, int64_t tokens,
                                                 uint64_t stream);

// Writes the set as a neuron file of `header` (its layers and shapes set from the spec) unless
// `path` already holds one with that header; returns whether it wrote.
bool write_synthetic_file(const std::string& path, const SyntheticFfn& ffn, qjit::NeuronFileHeader header);

}  // namespace qjit_bench
