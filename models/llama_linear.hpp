// The linear layers of the Llama model (models/llama_model.hpp) and the makers that make them from a
// LoadedMatrix: plain fp32 loops, or qjit layers quantized from the fp32 weights by any of qjit's
// methods (with or without a calibration). models/gguf_import_maker.hpp imports GGUF tensors exactly.
//
// Errors (bad arguments, failing qjit calls) are reported by throwing std::runtime_error.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/loaded_matrix.hpp"
#include "qjit/qjit.h"

namespace qjit_models::llama {

// Throws std::runtime_error naming `call`, the status and qjit_last_error() unless status is QJIT_OK.
void check_qjit(qjit_status status, const char* call);

// y (m x n) = x (m x k) * W^T for a weight matrix W of n rows by k columns.
class Linear {
public:
    virtual ~Linear() = default;
    virtual void forward(const float* x, int64_t m, float* y) const = 0;
    virtual int64_t in_features() const = 0;   // k
    virtual int64_t out_features() const = 0;  // n
    virtual int64_t weight_bytes() const = 0;  // bytes one forward streams
    virtual int64_t stored_bytes() const = 0;  // bytes the format stores (qjit_linear_info.stored_bytes)
    virtual int64_t low_rank_bytes() const { return 0; }  // of those, a compensator's
    virtual std::string describe() const = 0;
    // A qjit layer's info (false for a layer that is not one).
    virtual bool qjit_info(qjit_linear_info* /*info*/) const { return false; }
    // A qjit layer and its context (null for a layer that is not one).
    virtual qjit_linear* qjit_layer() const { return nullptr; }
    virtual qjit_context* qjit_layer_context() const { return nullptr; }
};

// ys[i] = x W_i for linears that read the same inputs (m rows): one qjit call when every one is a
// qjit layer of one context (qjit_linear_forward_shared_input, the products in one dispatch), else
// each its own forward. The outputs are the same either way.
void forward_shared_input(std::initializer_list<const Linear*> linears, const float* x, int64_t m,
                          std::initializer_list<float*> ys);

// What a calibrated quantizer learns of a matrix's inputs: a qjit_calibration (H = sum of x^T x).
class Calibration {
public:
    explicit Calibration(int64_t k);
    void add(const float* x, int64_t m);  // m rows of K inputs
    int64_t rows() const;
    const qjit_calibration* get() const { return calibration_.get(); }

private:
    struct Deleter {
        void operator()(qjit_calibration* c) const { qjit_calibration_destroy(c); }
    };
    std::unique_ptr<qjit_calibration, Deleter> calibration_;
};

// Makes a Linear of a matrix (its weights are copied or converted: the source need not outlive it).
class LayerMaker {
public:
    virtual ~LayerMaker() = default;
    virtual std::unique_ptr<Linear> make_linear(const LoadedMatrix& matrix) = 0;
    virtual std::string name() const = 0;
    // The qjit context the layers run on, whose threads the model's other loops share (null: none).
    virtual std::shared_ptr<qjit_context> context() const { return nullptr; }
};

// A qjit context that the layers made in it keep alive, so layers may outlive their maker.
using SharedContext = std::shared_ptr<qjit_context>;
SharedContext make_context(const qjit_context_options* options);  // options NULL: the library defaults

// Plain fp32 loops with fp32 accumulation in input order, as in llama2.c's run.c: the baseline. Its
// context (one thread) runs the model's other ops and picks the loops' instruction set.
class DenseMaker final : public LayerMaker {
public:
    DenseMaker();
    std::unique_ptr<Linear> make_linear(const LoadedMatrix& matrix) override;
    std::string name() const override { return "fp32 dense"; }
    std::shared_ptr<qjit_context> context() const override { return context_; }

private:
    SharedContext context_;
};
// A Linear that owns `layer`, a qjit layer made in `context` (of n outputs and k inputs).
std::unique_ptr<Linear> own_qjit_layer(SharedContext context, qjit_linear* layer, int64_t n, int64_t k);

// One qjit layer per matrix, quantized from its fp32 weights with `config`.
class QuantizingMaker final : public LayerMaker {
public:
    // options may be NULL for the library defaults.
    explicit QuantizingMaker(const qjit_quant_config& config, const qjit_context_options* options = nullptr);
    std::unique_ptr<Linear> make_linear(const LoadedMatrix& matrix) override;
    // With a calibration of the matrix's inputs (qjit_linear_create_calibrated); NULL: none.
    std::unique_ptr<Linear> make_calibrated_linear(const LoadedMatrix& matrix, const Calibration* calibration);
    std::string name() const override;
    std::shared_ptr<qjit_context> context() const override { return context_; }
    const qjit_quant_config& config() const { return config_; }
    // MiLo ranks per matrix (a rank of 0 makes that matrix its base alone), in place of config.rank;
    // a matrix left out is refused.
    void set_ranks(std::unordered_map<const LoadedMatrix*, int> ranks) { ranks_ = std::move(ranks); }
    // MiLo: each matrix's rank the largest whose compensator adds at most `fraction` of its base's
    // bytes (qjit_rank_within_budget), in place of config.rank.
    void set_rank_budget(double fraction) { rank_budget_ = fraction; }
    // 2/4/16: each matrix's own bits-per-weight budget (share_mixed_budget), in place of the config's.
    void set_bits_per_weight(std::unordered_map<const LoadedMatrix*, double> budgets) { budgets_ = std::move(budgets); }

private:
    // config_ with the matrix's rank (set, by the budget, or config_.rank); rank 0: the MiLo base's
    // method alone.
    qjit_quant_config config_for(const LoadedMatrix& matrix) const;

    qjit_quant_config config_;
    double rank_budget_ = 0;
    std::unordered_map<const LoadedMatrix*, int> ranks_;
    std::unordered_map<const LoadedMatrix*, double> budgets_;
    SharedContext context_;
};

// A quantization config with qjit's defaults (f16 scales) and the given bits, group and symmetry.
qjit_quant_config make_quant_config(int bits, int group_size, bool symmetric);
std::string describe_quant_config(const qjit_quant_config& config);  // e.g. "int4 g32 asym f16"

}  // namespace qjit_models::llama
