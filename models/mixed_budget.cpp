#include "models/mixed_budget.hpp"

#include <algorithm>
#include <functional>
#include <queue>
#include <stdexcept>
#include <string>

#include "models/llama_linear.hpp"

namespace qjit_models::llama {

namespace {

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

double weight_count(const std::vector<const LoadedMatrix*>& matrices) {
    double weights = 0.0;
    for (const LoadedMatrix* m : matrices) weights += double(m->k()) * double(m->n());
    return weights;
}

// The budget in bits for `matrices`, checked against their all-2-bit storage.
double allowed_bits(const qjit_quant_config& config, const std::vector<const LoadedMatrix*>& matrices,
                    double bits_per_weight) {
    double narrowest = 0.0;
    for (const LoadedMatrix* m : matrices) narrowest += stored_bits(config, *m, 0);
    const double weights = weight_count(matrices);
    if (narrowest > bits_per_weight * weights)
        throw std::runtime_error("--bits-per-weight " + std::to_string(bits_per_weight) + " is below the " +
                                 std::to_string(narrowest / weights) + " bits per weight these matrices store with "
                                 "every group in 2 bits");
    return bits_per_weight * weights;
}

// A matrix's share for the layer's own budget: half a bit over its stored bits, as the layer's
// check compares products of doubles.
double share_of(const qjit_quant_config& config, const LoadedMatrix& m, int64_t wide) {
    return (stored_bits(config, m, wide) + 0.5) / (double(m.k()) * double(m.n()));
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

    std::vector<const LoadedMatrix*> quantized;
    double total = 0.0;
    for (const Widenings& w : all) {
        quantized.push_back(w.matrix);
        total += stored_bits(config, *w.matrix, 0);
    }
    const double allowed = allowed_bits(config, quantized, bits_per_weight);
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
    for (const Widenings& w : all) shares[w.matrix] = share_of(config, *w.matrix, w.taken);
    return shares;
}

std::unordered_map<const LoadedMatrix*, double> share_mixed_budget_by_loss(
    Model& model, const std::vector<std::vector<int>>& sequences, const qjit_quant_config& config,
    double bits_per_weight, bool classifier, int score_sequences) {
    const Config& c = model.config();
    const std::vector<ModelMatrix> matrices = model_matrices(model.weights(), true);
    const std::vector<std::vector<int>> scored(sequences.begin(),
                                               sequences.begin() + std::min(sequences.size(), size_t(score_sequences)));
    std::vector<std::vector<float>> streams;
    for (const std::vector<int>& tokens : scored) streams.push_back(model.embed_sequence(tokens));
    const double base = score_from_layer(model, streams, scored, 0, score_sequences);

    // Each matrix wholly in 2 bits (groups by their range, rounded to nearest), the rest as they are.
    qjit_quant_config narrow = config;
    narrow.mixed_alpha = 0.0;
    narrow.mixed_bits_per_weight = 0.0;
    narrow.act_order = 0;
    QuantizingMaker narrow_maker(narrow);
    struct Candidate {
        const LoadedMatrix* matrix;
        double rise_per_bit;
    };
    std::vector<Candidate> candidates;
    auto probe = [&](int layer, int which) {
        const LoadedMatrix& m = site_matrix(matrices, {layer, which}, c.n_layers);
        std::unique_ptr<Linear> held = model.replace_linear({layer, which}, narrow_maker.make_linear(m));
        const double rise = score_from_layer(model, streams, scored, layer, score_sequences) - base;
        model.replace_linear({layer, which}, std::move(held));
        const double bits = stored_bits(config, m, group_count(config, m)) - stored_bits(config, m, 0);
        candidates.push_back({&m, std::max(rise, 0.0) / bits});
    };
    for (int layer = 0; layer < c.n_layers; ++layer) {
        for (int which = 0; which < 7; ++which) probe(layer, which);
        for (std::vector<float>& stream : streams) model.run_layer(layer, stream);
    }
    if (classifier) probe(c.n_layers, 0);
    model.reset();

    std::vector<const LoadedMatrix*> quantized;
    double total = 0.0;
    for (const Candidate& candidate : candidates) {
        quantized.push_back(candidate.matrix);
        total += stored_bits(config, *candidate.matrix, 0);
    }
    const double allowed = allowed_bits(config, quantized, bits_per_weight);
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.rise_per_bit > b.rise_per_bit; });
    std::unordered_map<const LoadedMatrix*, double> shares;
    for (const Candidate& candidate : candidates) {
        const LoadedMatrix& m = *candidate.matrix;
        const double narrowest = stored_bits(config, m, 0), widest = stored_bits(config, m, group_count(config, m));
        const double extra = std::clamp(allowed - total, 0.0, widest - narrowest);  // all of it, part, or none
        total += extra;
        shares[&m] = (narrowest + extra + 0.5) / (double(m.k()) * double(m.n()));
    }
    return shares;
}

}  // namespace qjit_models::llama
