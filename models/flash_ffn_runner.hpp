// A Llama model's FFNs served from a neuron file (include/qjit/qjit_flash.h) for qjit-run: the
// model's own attention, and per layer only the neurons the fitted predictor names, read from
// storage under a DRAM budget.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/llama_model.hpp"
#include "qjit/qjit_ffn.h"
#include "qjit/qjit_flash.h"

namespace qjit_models::llama {

struct FlashRunOptions {
    std::string path;            // the neuron file (qjit-flash-convert --gguf)
    double budget_fraction = 0.5;  // of what every neuron resident takes (gates included)
    int window = 4;
    double target_recall = 0;    // 0: no predictor (every neuron)
    float magnitude_threshold = 0;  // what counts as active when the predictor is fitted
    bool read_ahead = false;     // the next layer's neurons read while this one computes
    bool tune_reads = false;     // measure the device's read curve when the tuning database has none
    qjit_activations activations = QJIT_ACTIVATIONS_AUTO;  // how the gate and up products read x
};

// Each layer's FFN inputs (rows x dim, row-major) on `sequences`, run densely through `model`, at
// most max_rows a layer (0: all; else an even sample of the rows).
std::vector<std::vector<float>> capture_ffn_inputs(Model& model, const std::vector<std::vector<int>>& sequences,
                                                   int64_t max_rows = 0);

class FlashFfnRunner final : public FfnOverride {
public:
    FlashFfnRunner(qjit_context* context, const Config& config, const FlashRunOptions& options);
    ~FlashFfnRunner() override;
    FlashFfnRunner(const FlashFfnRunner&) = delete;
    FlashFfnRunner& operator=(const FlashFfnRunner&) = delete;

    // Fits every layer's predictor on the FFN inputs `model` produces for `sequences` (run densely).
    void fit_predictors(Model& model, const std::vector<std::vector<int>>& sequences);
    void forward(int layer, const float* x, int count, float* y) override;

    qjit_flash_counters counters() const;
    qjit_flash_ffn_info info() const;
    // The read throughput the device's curve gives reads of chunk_bytes (0 without a curve).
    double curve_gbps(int64_t chunk_bytes) const;
    void reset_counters();

private:
    struct FfnDeleter {
        void operator()(qjit_ffn* ffn) const { qjit_ffn_destroy(ffn); }
    };
    qjit_flash_ffn* ffn_ = nullptr;
    std::vector<std::unique_ptr<qjit_ffn, FfnDeleter>> layer_ffns_;  // each layer of ffn_ as an FFN handle
    FlashRunOptions options_;
    int layers_ = 0, dim_ = 0;
};

}  // namespace qjit_models::llama
