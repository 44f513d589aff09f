// Which neurons a token activates, predicted before their weights are read: a low-rank product
// approximating the projection that decides activity, and a threshold on its score fitted for a
// recall target on recorded activations.
//
// The factors are a truncated SVD of w: A = U_r S_r, B = V_r^T, so that B's rows are unit vectors
// and one int8 scale per column of each factor loses little. With options.calibration_weighted the
// SVD of diag(rms(x)) w is fitted too (input channels weighted by their calibration RMS, A then
// unscaled) and, per rank, the variant predicting fewer neurons at the target recall is kept. On
// inputs whose channels differ in scale, as real activations' do, the weighted one wins clearly
// (tests: 10 % of d_ff predicted instead of 14 % at equal rank and recall); on even channels the
// two are about the same. It costs a second SVD and scoring pass at fit time only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qjit/qjit.h"
#include "tuner/cpu_isa.hpp"

namespace qjit {

enum class PredictorScore : uint8_t {
    Value,          // score = s            (ReLU: active when x . up + bias > 0)
    SiluMagnitude,  // score = |silu(s)|    (SwiGLU: the gate's contribution to |a|)
};

struct PredictorOptions {
    PredictorScore score = PredictorScore::Value;
    double target_recall = 0.99;     // of the truly active neurons, on the calibration tokens
    // Tried in ascending order, those below min(d_model, d_ff) only; the first whose threshold for
    // target_recall predicts max_predicted_fraction or less is kept, else the largest tried.
    std::vector<int> ranks{16, 32, 64, 128, 256};
    double max_predicted_fraction = 0.25;  // of d_ff per token, on average; in (0, 1]
    // Also fit the factors to diag(rms(x)) w (each input channel weighted by its calibration RMS,
    // then unscaled) and keep, per rank, whichever predicts fewer neurons at the target recall.
    bool calibration_weighted = true;
};

struct PredictorQuality {
    double recall = 0;     // truly active neurons predicted active
    double precision = 0;  // predicted neurons truly active
    double predicted_fraction = 0;  // predicted neurons per token / d_ff
};

class NeuronPredictor {
public:
    NeuronPredictor() = default;
    // w: [d_model][d_ff] the projection deciding activity (up for ReLU, gate for SwiGLU), bias [d_ff]
    // or null; x: n calibration rows [n][d_model]; active: [n][d_ff], nonzero where the neuron was
    // truly active. The threshold is the largest t with score >= t for target_recall of the truly
    // active neurons over all calibration rows. Throws an invalid-argument Error for null pointers,
    // bad shapes or options, non-finite x or an empty calibration. Holds the truly active neurons'
    // scores while fitting (n * d_ff * 4 bytes at most).
    static NeuronPredictor fit(const float* w, const float* bias, int64_t d_model, int64_t d_ff, const float* x,
                               const uint8_t* active, int64_t n, const PredictorOptions& options);

    // The neurons predicted active (score >= threshold) for any of the m >= 1 rows x [m][d_model],
    // ascending, into `active` (cleared; its capacity is reused, and the scratch is per thread, so
    // steady-state calls allocate nothing). Thread-safe on a shared predictor.
    void predict(const float* x, int64_t m, std::vector<int32_t>& active) const;
    // Recall, precision and predicted fraction on n rows with their true activity, as fit measures them.
    PredictorQuality evaluate(const float* x, const uint8_t* active, int64_t n) const;

    // The cap of its scoring loops (a context's ISA; AUTO: none); until set, the CPU's best.
    void use_isa(qjit_isa isa);

    int rank() const { return rank_; }
    float threshold() const { return threshold_; }
    int64_t memory_bytes() const;  // int8 factors, their fp32 column scales and the bias
    const PredictorQuality& calibration_quality() const { return quality_; }

private:
    qjit_isa isa_ = best_isa_up_to(QJIT_ISA_AUTO);
    // One row's scores (after PredictorScore) into s [d_ff], with t [rank] as scratch.
    void score_row(const float* x, float* t, float* s) const;
    // Calls row(i, scores) for each of the m rows of x.
    template <typename Row>
    void for_each_scored_row(const float* x, int64_t m, Row&& row) const;
    // The largest threshold keeping `target` of the truly active neurons' scores.
    float recall_threshold(const float* x, const uint8_t* active, int64_t n, double target) const;

    int64_t d_model_ = 0, d_ff_ = 0;
    int rank_ = 0;
    float threshold_ = 0;
    PredictorScore score_ = PredictorScore::Value;
    // U: [d_model][rank] (A) and V: [rank][d_ff] (B) as int8 with an fp32 scale per column; bias
    // empty when fit had none.
    std::vector<int8_t> u_, v_;
    std::vector<float> u_scale_, v_scale_, bias_;
    PredictorQuality quality_;
};

}  // namespace qjit
