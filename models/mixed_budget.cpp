#include "models/mixed_budget.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <queue>
#include <stdexcept>
#include <string>

#include "models/llama_linear.hpp"

namespace qjit_models::llama {

namespace {

// The loss-aware sharing's levels: the share of a matrix's groups in 4 bits.
constexpr std::array<double, 5> kLossLevels = {0.0, 0.25, 0.5, 0.75, 1.0};

// One matrix's widenings, best gain first, and how many are taken.
struct Widenings {
    const LoadedMatrix* matrix;
    std::vector<double> gains;  // sorted, largest first
    int64_t taken = 0;
};

double stored_bits(const qjit_quant_config& config, const LoadedMatrix& m, int64_t wide) {
    double bits = 0.0;
    check_qjit(qjit_mixed_stored_bits(&config, m.k(), m.n(), wide, &bits), "qjit_mixed_stored_bits");
    return bits;
}

int64_t group_count(const qjit_quant_config& config, const LoadedMatrix& m) {
    return (m.k() + config.group_size - 1) / config.group_size;
}

// The budget in bits for matrices of `weights` weights that store `narrowest` bits with every group
// in 2 bits; throws when the budget is below that.
double allowed_bits(double narrowest, double weights, double bits_per_weight) {
    if (narrowest > bits_per_weight * weights)
        throw std::runtime_error("--bits-per-weight " + std::to_string(bits_per_weight) + " is below the " +
                                 std::to_string(narrowest / weights) + " bits per weight these matrices store with "
                                 "every group in 2 bits");
    return bits_per_weight * weights;
}

// A matrix's share for the layer's own budget when it stores `bits`: half a bit over, as the
// layer's check compares products of doubles.
double share_of(const LoadedMatrix& m, double bits) {
    return (bits + 0.5) / (double(m.k()) * double(m.n()));
}

}  // namespace

std::unordered_map<const LoadedMatrix*, double> share_mixed_budget(Model& model,
                                                                   const std::vector<std::vector<int>>& sequences,
                                                                   const qjit_quant_config& config,
                                                                   double bits_per_weight, bool classifier) {
    const Config& c = model.config();
    const std::vector<ModelMatrix> matrices = model_matrices(model.weights(), true);
    std::vector<std::vector<float>> streams;
    for (const std::vector<int>& tokens : sequences) streams.push_back(model.embed_sequence(tokens));

    std::vector<Widenings> all;
    auto measure = [&](int layer, const std::vector<int>& which) {
        const LoadedMatrix& first = site_matrix(matrices, {layer, which[0]}, c.n_layers);
        Calibration calibration(first.k());
        for (const std::vector<float>& stream : streams)
            model.capture_inputs(stream, {layer, which[0]}, [&](const float* x, int64_t m) { calibration.add(x, m); });
        for (int w : which) {
            const LoadedMatrix& m = site_matrix(matrices, {layer, w}, c.n_layers);
            std::vector<float> scratch;
            Widenings widenings{&m, std::vector<double>(size_t((m.k() + config.group_size - 1) / config.group_size))};
            check_qjit(qjit_mixed_widening_gains(&config, calibration.get(), m.k(), m.n(), m.dense_values(scratch).data(),
                                                 QJIT_LAYOUT_N_BY_K, widenings.gains.data()),
                       "qjit_mixed_widening_gains");
            std::sort(widenings.gains.begin(), widenings.gains.end(), std::greater<>());
            all.push_back(std::move(widenings));
        }
    };
    for (int layer = 0; layer < c.n_layers; ++layer) {
        for (const std::vector<int>& which : kSequentialGroups) measure(layer, which);
        for (std::vector<float>& stream : streams) model.run_layer(layer, stream);
    }
    if (classifier) measure(c.n_layers, {0});
    model.reset();

    double weights = 0.0, total = 0.0;
    for (const Widenings& w : all) {
        weights += double(w.matrix->k()) * double(w.matrix->n());
        total += stored_bits(config, *w.matrix, 0);
    }
    const double allowed = allowed_bits(total, weights, bits_per_weight);
    // Greedy by gain per bit: each matrix offers its next group (its gains fall, its costs barely move).
    auto cost = [&](const Widenings& w) {
        return stored_bits(config, *w.matrix, w.taken + 1) - stored_bits(config, *w.matrix, w.taken);
    };
    using Offer = std::pair<double, size_t>;  // gain per bit, matrix
    std::priority_queue<Offer> offers;
    for (size_t i = 0; i < all.size(); ++i)
        if (!all[i].gains.empty()) offers.push({all[i].gains[0] / cost(all[i]), i});
    while (!offers.empty()) {
        Widenings& w = all[offers.top().second];
        offers.pop();
        const double step = cost(w);
        if (total + step > allowed) continue;  // this matrix's next group does not fit; others may
        total += step;
        if (++w.taken < int64_t(w.gains.size())) offers.push({w.gains[size_t(w.taken)] / cost(w), size_t(&w - all.data())});
    }
    std::unordered_map<const LoadedMatrix*, double> shares;
    for (const Widenings& w : all) shares[w.matrix] = share_of(*w.matrix, stored_bits(config, *w.matrix, w.taken));
    return shares;
}

std::unordered_map<const LoadedMatrix*, double> share_mixed_budget_by_loss(
    Model& model, const std::vector<std::vector<int>>& sequences, const qjit_quant_config& config,
    double bits_per_weight, bool classifier, int score_sequences) {
    const Config& c = model.config();
    const std::vector<ModelMatrix> matrices = model_matrices(model.weights(), true);
    const std::vector<std::vector<int>> scored(sequences.begin(),
                                               sequences.begin() + std::min(sequences.size(), size_t(score_sequences)));
    // The probes run on the model with every matrix in 4 bits (groups rounded to nearest, on qjit's
    // kernels): the rest of the model as it mostly ends, and a forward an order faster than fp32's.
    qjit_quant_config wide = config;
    wide.method = QJIT_QUANT_RTN;
    wide.bits = 4;
    wide.act_order = 0;
    wide.mixed_bits_per_weight = 0.0;
    QuantizingMaker wide_maker(wide);
    Model probed(model.shared_weights(), wide_maker);
    probed.share_threads(wide_maker.context());
    std::vector<std::vector<float>> streams;
    for (const std::vector<int>& tokens : scored) streams.push_back(probed.embed_sequence(tokens));
    const double base = score_from_layer(probed, streams, scored, 0, score_sequences);

    // Each matrix at each level in turn (a share of its groups in 4 bits, the rest in 2; by range,
    // rounded to nearest), the rest of the model in 4 bits: the rise of the NLL over all-4-bit.
    // The last level, all in 4 bits, is the base: no rise, no maker.
    std::array<std::unique_ptr<QuantizingMaker>, kLossLevels.size() - 1> level_makers;
    for (size_t l = 0; l < level_makers.size(); ++l) {
        qjit_quant_config level = config;
        level.mixed_alpha = kLossLevels[l];
        level.mixed_bits_per_weight = 0.0;
        level.act_order = 0;
        level_makers[l] = std::make_unique<QuantizingMaker>(level);
    }
    struct Levels {
        const LoadedMatrix* matrix;
        std::array<double, kLossLevels.size()> rise{}, bits{};
        size_t chosen = 0;
    };
    std::vector<Levels> all;
    double weights = 0.0, total = 0.0;
    auto probe = [&](int layer, int which) {
        const LoadedMatrix& m = site_matrix(matrices, {layer, which}, c.n_layers);
        Levels levels{&m};
        for (size_t l = 0; l < kLossLevels.size(); ++l)
            levels.bits[l] = stored_bits(config, m, int64_t(std::lround(kLossLevels[l] * double(group_count(config, m)))));
        for (size_t l = 0; l < level_makers.size(); ++l) {
            std::unique_ptr<Linear> held = probed.replace_linear({layer, which}, level_makers[l]->make_linear(m));
            levels.rise[l] = std::max(score_from_layer(probed, streams, scored, layer, score_sequences) - base, 0.0);
            probed.replace_linear({layer, which}, std::move(held));
        }
        weights += double(m.k()) * double(m.n());
        total += levels.bits[0];
        all.push_back(levels);
    };
    for (int layer = 0; layer < c.n_layers; ++layer) {
        for (int which = 0; which < 7; ++which) probe(layer, which);
        for (std::vector<float>& stream : streams) probed.run_layer(layer, stream);
    }
    if (classifier) probe(c.n_layers, 0);

    const double allowed = allowed_bits(total, weights, bits_per_weight);
    // Greedy on the multiple-choice knapsack: every matrix starts at its narrowest level and offers
    // its best next step (the level after its current one that saves the most rise per extra bit);
    // the best offer overall is taken while it fits.
    auto best_step = [](const Levels& levels) {
        std::pair<double, size_t> best{-1.0, levels.chosen};
        for (size_t l = levels.chosen + 1; l < kLossLevels.size(); ++l) {
            const double saved = levels.rise[levels.chosen] - levels.rise[l];
            const double cost = levels.bits[l] - levels.bits[levels.chosen];
            if (cost > 0 && saved / cost > best.first) best = {saved / cost, l};
        }
        return best;
    };
    for (;;) {
        size_t pick = all.size();
        std::pair<double, size_t> pick_step{-1.0, 0};
        for (size_t i = 0; i < all.size(); ++i) {
            const auto step = best_step(all[i]);
            if (step.second == all[i].chosen) continue;
            if (total + all[i].bits[step.second] - all[i].bits[all[i].chosen] > allowed) continue;
            if (step.first > pick_step.first) pick = i, pick_step = step;
        }
        if (pick == all.size()) break;
        total += all[pick].bits[pick_step.second] - all[pick].bits[all[pick].chosen];
        all[pick].chosen = pick_step.second;
    }
    // What is left goes to the matrices with the most rise still to save, each up to its widest.
    std::stable_sort(all.begin(), all.end(), [](const Levels& a, const Levels& b) {
        return a.rise[a.chosen] > b.rise[b.chosen];
    });
    std::unordered_map<const LoadedMatrix*, double> shares;
    for (const Levels& levels : all) {
        const double at = levels.bits[levels.chosen];
        const double extra = std::clamp(allowed - total, 0.0, levels.bits.back() - at);
        total += extra;
        shares[levels.matrix] = share_of(*levels.matrix, at + extra);
    }
    return shares;
}

}  // namespace qjit_models::llama
