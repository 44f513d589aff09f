#include "models/flash_ffn_runner.hpp"

#include <algorithm>

#include "models/fail.hpp"

namespace qjit_models::llama {

namespace {

void check(qjit_status status, const char* what) {
    if (status != QJIT_OK) fail(what, ": ", qjit_status_string(status), ": ", qjit_last_error());
}

}  // namespace

FlashFfnRunner::FlashFfnRunner(qjit_context* context, const Config& config, const FlashRunOptions& options)
    : options_(options), layers_(config.n_layers), dim_(config.dim) {
    // The budget is a share of what every neuron resident takes: open once, reading nothing but
    // the header, to learn it.
    qjit_flash_options flash;
    qjit_flash_options_init(&flash);
    flash.window = options.window;
    flash.use_sparsity = 0;
    check(qjit_flash_ffn_create(context, options.path.c_str(), &flash, &ffn_), "opening the neuron file");
    qjit_flash_ffn_info i = info();
    if (i.layers != config.n_layers || i.d_model != config.dim || i.d_ff != config.hidden_dim ||
        i.activation != QJIT_FFN_SWIGLU)
        fail(options.path, ": its FFNs (", i.layers, " layers, ", i.d_model, " -> ", i.d_ff, ") are not this model's");
    flash.dram_budget_bytes = int64_t(options.budget_fraction * double(i.all_resident_bytes));
    flash.use_sparsity = 1;
    flash.read_ahead = options.read_ahead ? 1 : 0;
    flash.tune_reads = options.tune_reads ? 1 : 0;
    flash.activations = options.activations;
    qjit_flash_ffn_destroy(ffn_);
    ffn_ = nullptr;
    check(qjit_flash_ffn_create(context, options.path.c_str(), &flash, &ffn_), "opening the neuron file");
    for (int l = 0; l < layers_; ++l) {
        qjit_ffn* layer = nullptr;
        check(qjit_ffn_create_flash_layer(ffn_, l, &layer), "a flash FFN layer");
        layer_ffns_.emplace_back(layer);
    }
}

FlashFfnRunner::~FlashFfnRunner() {
    layer_ffns_.clear();  // before the flash FFN they borrow
    qjit_flash_ffn_destroy(ffn_);
}

std::vector<std::vector<float>> capture_ffn_inputs(Model& model, const std::vector<std::vector<int>>& sequences,
                                                   int64_t max_rows) {
    const Config& c = model.config();
    const size_t dim = size_t(c.dim);
    std::vector<std::vector<float>> inputs(static_cast<size_t>(c.n_layers));
    for (const std::vector<int>& sequence : sequences) {
        std::vector<float> stream = model.embed_sequence(sequence);
        for (int l = 0; l < c.n_layers; ++l) {
            model.capture_inputs(stream, {l, 4}, [&](const float* x, int64_t rows) {
                inputs[size_t(l)].insert(inputs[size_t(l)].end(), x, x + rows * int64_t(dim));
            });
            model.run_layer(l, stream);
        }
    }
    for (std::vector<float>& x : inputs) {
        const size_t rows = x.size() / dim;
        if (max_rows <= 0 || rows <= size_t(max_rows)) continue;
        std::vector<float> sample(size_t(max_rows) * dim);
        for (size_t i = 0; i < size_t(max_rows); ++i) {  // row i * rows / max_rows
            const size_t row = i * rows / size_t(max_rows);
            std::copy_n(x.data() + row * dim, dim, sample.data() + i * dim);
        }
        x = std::move(sample);
    }
    return inputs;
}

void FlashFfnRunner::fit_predictors(Model& model, const std::vector<std::vector<int>>& sequences) {
    const std::vector<std::vector<float>> inputs = capture_ffn_inputs(model, sequences);
    for (int l = 0; l < layers_; ++l)
        check(qjit_flash_ffn_fit_predictor(ffn_, l, inputs[size_t(l)].data(), int64_t(inputs[size_t(l)].size()) / dim_,
                                           options_.target_recall, options_.magnitude_threshold),
              "fitting a predictor");
}

void FlashFfnRunner::forward(int layer, const float* x, int count, float* y) {
    check(qjit_ffn_forward(layer_ffns_.at(size_t(layer)).get(), x, count, y), "a flash FFN forward");
}

qjit_flash_counters FlashFfnRunner::counters() const {
    qjit_flash_counters c;
    check(qjit_flash_ffn_get_counters(ffn_, &c), "reading the flash counters");
    return c;
}

qjit_flash_ffn_info FlashFfnRunner::info() const {
    qjit_flash_ffn_info i;
    check(qjit_flash_ffn_get_info(ffn_, &i), "reading the flash FFN");
    return i;
}

double FlashFfnRunner::curve_gbps(int64_t chunk_bytes) const {
    double gbps = 0;
    check(qjit_flash_ffn_curve_gbps(ffn_, chunk_bytes, &gbps), "reading the read curve");
    return gbps;
}

void FlashFfnRunner::reset_counters() { check(qjit_flash_ffn_reset_counters(ffn_), "resetting the flash counters"); }

}  // namespace qjit_models::llama
