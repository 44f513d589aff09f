// The model a runner's --method asks for, built from a model's weights: "fp32" (dense fp32 loops),
// "exact" (qjit layers with exactly the weights of the GGUF tensors), or qjit layers quantized from
// the fp32 weights by rtn, hqq, milo (one rank, or ranks from a policy), gptq or mixed; the
// calibrated methods quantize layer by layer on the model's own activations of a calibration set.
// hqq with a calibration weighs each row's error by its inputs' second moment and keeps a layer's
// hqq matrices only where the model's calibration NLL is no higher than with round to nearest's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/llama_model.hpp"
#include "models/runner_options.hpp"
#include "qjit/qjit.h"

namespace qjit_models::llama {

struct MethodModel {
    std::unique_ptr<Model> model;
    std::string maker_name;     // "fp32 dense", "qjit int3 g64 asym f16", ...
    std::vector<int> ranks;       // milo under a rank policy: each quantized matrix's rank
    int64_t calibration_rows = 0; // rows each calibrated matrix saw (one per calibration token)
    double quantization_seconds = 0;  // the quantizers themselves
    double calibration_seconds = 0;   // running the calibration sequences (and scoring layer choices)
    std::optional<CalibratedQuantization> choice;  // hqq with calibration: its choice against rtn per layer
    std::string pack;             // built through a pack file: "mapped", or "written (<why>)"
};

// `calibration` is needed when options.calibrated(); fp32_classifier keeps the classifier in dense
// fp32 loops whatever the method. Without ffn_linears the FFN matrices are not built (Model's
// constructor; not for a calibrated method, which runs them to quantize the layers after them).
MethodModel build_method_model(std::shared_ptr<const Weights> weights, const MethodOptions& options,
                               const qjit_context_options& context_options,
                               const std::vector<std::vector<int>>* calibration, bool fp32_classifier,
                               bool ffn_linears = true);

// The exact import (method "exact") through the pack file at pack_path, made from the GGUF file at
// gguf_path: mapped from it when it is fresh, else imported and written to it (MethodModel::pack
// says which, and why).
MethodModel build_packed_model(std::shared_ptr<const Weights> weights, const std::string& pack_path,
                               const std::string& gguf_path, const qjit_context_options& context_options,
                               bool fp32_classifier);

// The ranks a policy gives the model's matrices (the classifier's last when with_classifier), in the
// order the model makes them.
std::vector<int> policy_ranks(const MethodOptions& options, const Weights& weights, bool with_classifier);

}  // namespace qjit_models::llama
