// Which neurons a token activates, predicted before their weights are read: a low-rank product
// approximating the projection that decides activity, and a threshold on its score fitted for a
// recall target on recorded activations.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace qjit {

enum class PredictorScore : uint8_t {
    Value,          // score = s            (ReLU: active when x . up + bias > 0)
    SiluMagnitude,  // score = |silu(s)|    (SwiGLU: the gate's contribution to |a|)
};

struct PredictorOptions {
    PredictorScore score = PredictorScore::Value;
    double target_recall = 0.99;     // of the truly active neurons, on the calibration tokens
    std::vector<int> ranks{16, 32, 64, 128, 256};  // tried in order; the first reaching the target at
                                                  // max_predicted_fraction or less is kept
    double max_predicted_fraction = 0.25;  // of d_ff per token, on average
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
    // or null; x: n calibration rows [n][d_model]; active: [n][d_ff], 1 where the neuron was truly
    // active. Throws an invalid-argument Error for bad shapes or an empty calibration.
    static NeuronPredictor fit(const float* w, const float* bias, int64_t d_model, int64_t d_ff, const float* x,
                               const uint8_t* active, int64_t n, const PredictorOptions& options);

    // The neurons predicted active for any of the m rows, ascending.
    void predict(const float* x, int64_t m, std::vector<int32_t>& active) const;
    PredictorQuality evaluate(const float* x, const uint8_t* active, int64_t n) const;

    int rank() const { return rank_; }
    float threshold() const { return threshold_; }
    int64_t memory_bytes() const;
    const PredictorQuality& calibration_quality() const { return quality_; }

private:
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
    // U: [d_model][rank] and V: [rank][d_ff] as int8 with an fp32 scale per column.
    std::vector<int8_t> u_, v_;
    std::vector<float> u_scale_, v_scale_, bias_;
    PredictorQuality quality_;
};

}  // namespace qjit
