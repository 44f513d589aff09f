// The Sparse FFN strategy: one layer of a flash FFN (runtime/flash/flash_ffn.hpp), its neurons read
// from a neuron file, run over the neurons its layer picks (calibrated thresholds, its predictor,
// else all of them).
#pragma once

#include <cstdint>

namespace qjit {

class FlashFfn;

struct FlashLayerFfn {
    FlashFfn* flash = nullptr;  // borrowed
    int64_t layer = 0;

    int64_t inputs() const;  // d_model, as many as outputs
    // y (m x d_model) = the layer's FFN of x (m x d_model).
    void forward(const float* x, int64_t m, float* y) const;
};

}  // namespace qjit
