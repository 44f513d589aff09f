// The compensator pass of a layer stored as Wq + U V (format/low_rank.hpp): y += (x U) V, after the
// quantized product. x U is taken once per activation row (m x rank), then its product with V is
// added to the output.
//
// Factors stored as codes (8 or 3 bits, a scale per rank component) are themselves quantized
// matrices of the per-column symmetric formats qjit already runs, so each one is an inner layer:
// x U and (x U) V run on the same generated kernels, activation path, tuner and database as any
// layer (keys "q8col_sym ... K=4096 N=16" and "... K=16 N=4096"). V's scales belong to its rows,
// which a per-column kernel cannot apply, so they multiply x U instead and V's inner layer has
// unit scales. fp16 factors run on a plain loop.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "format/low_rank.hpp"
#include "qjit/qjit.h"

struct qjit_context;
struct qjit_linear;

namespace qjit {

class LowRankPass {
public:
    // Validates the factors against a K x N layer and makes the inner layers on `context`, on the
    // activation path `activations`.
    LowRankPass(qjit_context* context, LowRankFactors factors, int64_t k, int64_t n, qjit_activations activations);
    ~LowRankPass();

    // y (m x N) += (x U) V, x the layer's activations in their original row order (m x K).
    void add(const float* x, int64_t m, float* y) const;

    int rank() const { return rank_; }
    int bits() const { return bits_; }
    // The factors as stored (the layer file's and the oracle's input).
    LowRankFactors factors() const;
    // Bytes a forward streams for the compensator.
    int64_t streamed_bytes() const;
    // Flushes the compensator's data from every cache (cold benchmarks).
    void evict() const;
    // The inner layers of factors stored as codes (bits 8 or 3).
    const qjit_linear& u_layer() const { return *u_; }
    const qjit_linear& v_layer() const { return *v_; }  // unit scales: V's own multiply x U
    const std::vector<float>& v_scales() const { return v_scales_; }
    // "low_rank=r16q8 low_rank_u=<inner kernel> low_rank_v=<inner kernel>" for describe strings.
    std::string describe() const;

private:
    int rank_ = 0;
    int bits_ = 0;
    int64_t k_ = 0, n_ = 0;
    std::unique_ptr<qjit_linear> u_, v_;      // bits 8 or 3: the inner layers of U and V
    std::vector<float> v_scales_;             // bits 8 or 3: V's scale per rank component
    std::vector<float> u_values_, v_values_;  // bits 16: the fp16 values in fp32, K x rank and rank x N
    qjit_context* context_ = nullptr;
};

}  // namespace qjit
