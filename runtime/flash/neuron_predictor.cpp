#include "runtime/flash/neuron_predictor.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/activations.hpp"
#include "base/error.hpp"
#include "base/simd_family.hpp"
#include "quant/truncated_svd.hpp"

namespace qjit {

namespace {

// Dense factors of rank `rank`: a [d_model][rank] = U_r S_r, b [rank][d_ff] = V_r^T, so that
// truncating to r < rank keeps the leading columns of a and rows of b. With row_scale, the SVD is
// of diag(row_scale) w and a is unscaled back by 1 / row_scale: the best rank-r fit in the norm
// that weighs each input channel by its calibration RMS.
struct DenseFactors {
    int rank = 0;
    std::vector<float> a, b;
};

DenseFactors low_rank_factors(const float* w, int64_t d_model, int64_t d_ff, int rank,
                              const std::vector<float>* row_scale) {
    std::vector<float> scaled;
    if (row_scale) {
        scaled.assign(w, w + d_model * d_ff);
        for (int64_t k = 0; k < d_model; ++k)
            for (int64_t c = 0; c < d_ff; ++c) scaled[size_t(k * d_ff + c)] *= (*row_scale)[size_t(k)];
        w = scaled.data();
    }
    // truncated_svd splits sqrt(S) into both factors; move it all into a so that b's rows are unit
    // vectors and a per-column int8 scale of b does not flatten the small components.
    TruncatedSvd svd = truncated_svd(d_model, d_ff, rank, w);
    DenseFactors out{rank, std::move(svd.u), std::move(svd.v)};
    for (int j = 0; j < rank; ++j) {
        const float root = std::sqrt(std::max(svd.singular_values[size_t(j)], 0.0f));
        const float inverse = root > 0 ? 1.0f / root : 0.0f;
        for (int64_t k = 0; k < d_model; ++k) out.a[size_t(k * rank + j)] *= root;
        for (int64_t c = 0; c < d_ff; ++c) out.b[size_t(j * d_ff + c)] *= inverse;
    }
    if (row_scale)
        for (int64_t k = 0; k < d_model; ++k)
            for (int j = 0; j < rank; ++j) out.a[size_t(k * rank + j)] /= (*row_scale)[size_t(k)];
    return out;
}

// Symmetric int8 with one fp32 scale per column of the leading `cols` columns of a
// [rows][stride] matrix.
void quantize_columns(const float* values, int64_t rows, int64_t cols, int64_t stride, std::vector<int8_t>& codes,
                      std::vector<float>& scales) {
    scales.assign(size_t(cols), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            scales[size_t(c)] = std::max(scales[size_t(c)], std::fabs(values[r * stride + c]));
    std::vector<float> inverse(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) {
        scales[size_t(c)] /= 127.0f;
        inverse[size_t(c)] = scales[size_t(c)] > 0 ? 1.0f / scales[size_t(c)] : 0.0f;
    }
    codes.resize(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            codes[size_t(r * cols + c)] =
                int8_t(std::clamp(std::lround(values[r * stride + c] * inverse[size_t(c)]), -127L, 127L));
}

// The RMS of each input channel over the calibration rows, floored so that a silent channel does
// not blow up the unscaling.
std::vector<float> channel_rms(const float* x, int64_t n, int64_t d_model) {
    std::vector<double> sum(size_t(d_model), 0.0);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < d_model; ++k) sum[size_t(k)] += double(x[i * d_model + k]) * x[i * d_model + k];
    std::vector<float> rms(static_cast<size_t>(d_model));
    for (int64_t k = 0; k < d_model; ++k) rms[size_t(k)] = float(std::sqrt(sum[size_t(k)] / double(n)));
    const float largest = *std::max_element(rms.begin(), rms.end());
    const float floor = largest > 0 ? largest * 1e-3f : 1.0f;
    for (float& r : rms) r = std::max(r, floor);
    return rms;
}

// out[width] += sum over i of coef[i] * rows[i][width]: a GEMV over a row-major int8 matrix as
// row updates, so the inner loop is contiguous and vectorizes (x A with rows of A scaled by x[k],
// t B with rows of B scaled by t[j]). Blocking over columns or unrolling over rows gained nothing
// measurable at 4096 x 16384, rank 128: the int8 to fp32 widening bounds it (about 16 GMAC/s with
// AVX-512 on one core).
[[gnu::always_inline]] inline void accumulate_rows(const float* coef, const int8_t* rows, int64_t count, int64_t width,
                                                   float* __restrict out) {
    for (int64_t i = 0; i < count; ++i) {
        const float c = coef[i];
        const int8_t* __restrict row = rows + i * width;
        for (int64_t j = 0; j < width; ++j) out[j] += c * float(row[j]);
    }
}

using AccumulateRows = void (*)(const float*, const int8_t*, int64_t, int64_t, float*);

QJIT_TARGET_AVX512 void accumulate_rows_avx512(const float* coef, const int8_t* rows, int64_t count, int64_t width,
                                               float* out) {
    accumulate_rows(coef, rows, count, width, out);
}
QJIT_TARGET_AVX2 void accumulate_rows_avx2(const float* coef, const int8_t* rows, int64_t count, int64_t width,
                                           float* out) {
    accumulate_rows(coef, rows, count, width, out);
}
void accumulate_rows_baseline(const float* coef, const int8_t* rows, int64_t count, int64_t width, float* out) {
    accumulate_rows(coef, rows, count, width, out);
}

// One copy per family (base/simd_family.hpp). The library is built for baseline x86-64; the copies
// above vectorize with what their target allows.
constexpr PerFamily<AccumulateRows> kAccumulateRows{accumulate_rows_baseline, accumulate_rows_avx2,
                                                    accumulate_rows_avx512};

// Per-thread scratch of predict and evaluate: grows to the largest layer, then stays.
struct Scratch {
    std::vector<float> t, s, best;
};
Scratch& scratch() {
    thread_local Scratch buffers;
    return buffers;
}

}  // namespace

void NeuronPredictor::use_isa(qjit_isa isa) { isa_ = best_isa_up_to(isa); }

void NeuronPredictor::score_row(const float* x, float* t, float* s) const {
    const AccumulateRows accumulate = kAccumulateRows[simd_family(isa_)];
    // t = x A, then s = t B; each factor's column scales applied once, after its product.
    std::fill(t, t + rank_, 0.0f);
    accumulate(x, u_.data(), d_model_, rank_, t);
    for (int j = 0; j < rank_; ++j) t[j] *= u_scale_[size_t(j)];
    std::fill(s, s + d_ff_, 0.0f);
    accumulate(t, v_.data(), rank_, d_ff_, s);
    const float* __restrict scale = v_scale_.data();
    if (bias_.empty()) {
        for (int64_t c = 0; c < d_ff_; ++c) s[c] *= scale[c];
    } else {
        const float* __restrict bias = bias_.data();
        for (int64_t c = 0; c < d_ff_; ++c) s[c] = s[c] * scale[c] + bias[c];
    }
    if (score_ == PredictorScore::SiluMagnitude)
        for (int64_t c = 0; c < d_ff_; ++c) s[c] = std::fabs(silu(s[c]));
}

template <typename Row>
void NeuronPredictor::for_each_scored_row(const float* x, int64_t m, Row&& row) const {
    Scratch& buffers = scratch();
    buffers.t.resize(size_t(rank_));
    buffers.s.resize(size_t(d_ff_));
    for (int64_t i = 0; i < m; ++i) {
        score_row(x + i * d_model_, buffers.t.data(), buffers.s.data());
        row(i, static_cast<const float*>(buffers.s.data()));
    }
}

NeuronPredictor NeuronPredictor::fit(const float* w, const float* bias, int64_t d_model, int64_t d_ff, const float* x,
                                     const uint8_t* active, int64_t n, const PredictorOptions& options) {
    require(w != nullptr, "w is NULL");
    require(x != nullptr, "x is NULL");
    require(active != nullptr, "active is NULL");
    require(d_model >= 1, "d_model is ", d_model, "; expected >= 1");
    require(d_ff >= 1, "d_ff is ", d_ff, "; expected >= 1");
    require(n >= 1, "n (calibration rows) is ", n, "; expected >= 1");
    require(!options.ranks.empty(), "options.ranks is empty");
    require(options.target_recall > 0 && options.target_recall <= 1, "options.target_recall is ",
            options.target_recall, "; expected in (0, 1]");
    require(options.max_predicted_fraction > 0 && options.max_predicted_fraction <= 1,
            "options.max_predicted_fraction is ", options.max_predicted_fraction, "; expected in (0, 1]");
    for (int r : options.ranks) require(r >= 1, "options.ranks holds ", r, "; expected ranks >= 1");
    for (int64_t i = 0; i < n * d_model; ++i) require(std::isfinite(x[i]), "x value ", i, " is not finite");
    // A rank of min(d_model, d_ff) or more stores more than w itself.
    std::vector<int> ranks;
    for (int r : options.ranks)
        if (r < std::min(d_model, d_ff)) ranks.push_back(r);
    require(!ranks.empty(), "options.ranks has no rank below min(d_model, d_ff) = ", std::min(d_model, d_ff));
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());

    // One SVD at the largest rank serves every smaller one: its leading components are theirs.
    std::vector<DenseFactors> variants;
    variants.push_back(low_rank_factors(w, d_model, d_ff, ranks.back(), nullptr));
    if (options.calibration_weighted) {
        const std::vector<float> rms = channel_rms(x, n, d_model);
        variants.push_back(low_rank_factors(w, d_model, d_ff, ranks.back(), &rms));
    }

    NeuronPredictor best;
    for (int r : ranks) {
        NeuronPredictor best_at_rank;
        for (const DenseFactors& dense : variants) {
            NeuronPredictor p;
            p.d_model_ = d_model;
            p.d_ff_ = d_ff;
            p.rank_ = r;
            p.score_ = options.score;
            quantize_columns(dense.a.data(), d_model, r, dense.rank, p.u_, p.u_scale_);
            quantize_columns(dense.b.data(), r, d_ff, d_ff, p.v_, p.v_scale_);
            if (bias) p.bias_.assign(bias, bias + d_ff);
            p.threshold_ = p.recall_threshold(x, active, n, options.target_recall);
            p.quality_ = p.evaluate(x, active, n);
            if (best_at_rank.rank_ == 0 ||
                p.quality_.predicted_fraction < best_at_rank.quality_.predicted_fraction)
                best_at_rank = std::move(p);
        }
        best = std::move(best_at_rank);
        if (best.quality_.predicted_fraction <= options.max_predicted_fraction) break;
    }
    return best;
}

float NeuronPredictor::recall_threshold(const float* x, const uint8_t* active, int64_t n, double target) const {
    std::vector<float> scores;  // of the truly active neurons
    for_each_scored_row(x, n, [&](int64_t i, const float* s) {
        const uint8_t* truth = active + i * d_ff_;
        for (int64_t c = 0; c < d_ff_; ++c)
            if (truth[c]) scores.push_back(s[c]);
    });
    if (scores.empty()) return std::numeric_limits<float>::infinity();  // nothing to recall
    // The largest t with #(score >= t) >= target * count: the (count - needed)-th smallest score.
    const size_t count = scores.size();
    const size_t needed = std::min(count, size_t(std::ceil(target * double(count) - 1e-9)));
    const auto pick = scores.begin() + ptrdiff_t(count - std::max<size_t>(needed, 1));
    std::nth_element(scores.begin(), pick, scores.end());
    return *pick;
}

void NeuronPredictor::predict(const float* x, int64_t m, std::vector<int32_t>& active) const {
    require(x != nullptr, "x is NULL");
    require(m >= 1, "m is ", m, "; expected >= 1");
    require(rank_ > 0, "the predictor is not fitted");
    active.clear();
    // The union over rows is the per-neuron maximum score against the threshold.
    std::vector<float>& best = scratch().best;
    best.resize(size_t(d_ff_));
    for_each_scored_row(x, m, [&](int64_t i, const float* s) {
        if (i == 0)
            std::copy(s, s + d_ff_, best.begin());
        else
            for (int64_t c = 0; c < d_ff_; ++c) best[size_t(c)] = std::max(best[size_t(c)], s[c]);
    });
    for (int64_t c = 0; c < d_ff_; ++c)
        if (best[size_t(c)] >= threshold_) active.push_back(int32_t(c));
}

PredictorQuality NeuronPredictor::evaluate(const float* x, const uint8_t* active, int64_t n) const {
    require(x != nullptr, "x is NULL");
    require(active != nullptr, "active is NULL");
    require(n >= 1, "n is ", n, "; expected >= 1");
    require(rank_ > 0, "the predictor is not fitted");
    int64_t truly = 0, predicted = 0, hits = 0;
    for_each_scored_row(x, n, [&](int64_t i, const float* s) {
        const uint8_t* truth = active + i * d_ff_;
        for (int64_t c = 0; c < d_ff_; ++c) {
            const bool p = s[c] >= threshold_, t = truth[c] != 0;
            truly += t;
            predicted += p;
            hits += p && t;
        }
    });
    PredictorQuality q;
    q.recall = truly ? double(hits) / double(truly) : 1.0;
    q.precision = predicted ? double(hits) / double(predicted) : 1.0;
    q.predicted_fraction = double(predicted) / double(n * d_ff_);
    return q;
}

int64_t NeuronPredictor::memory_bytes() const {
    return int64_t(u_.size() + v_.size()) +
           int64_t(sizeof(float) * (u_scale_.size() + v_scale_.size() + bias_.size()));
}

}  // namespace qjit
