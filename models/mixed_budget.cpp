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
    const double allowed = bits_per_weight * weights;
    if (total > allowed)
        throw std::runtime_error("--bits-per-weight " + std::to_string(bits_per_weight) + " is below the " +
                                 std::to_string(total / weights) + " bits per weight these matrices store with every "
                                 "group in 2 bits");
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
    for (const Widenings& w : all)  // half a bit over: the layer's own check compares products of doubles
        shares[w.matrix] = (stored_bits(config, *w.matrix, w.taken) + 0.5) / (double(w.matrix->k()) * double(w.matrix->n()));
    return shares;
}

}  // namespace qjit_models::llama
