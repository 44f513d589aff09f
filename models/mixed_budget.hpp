// A 2/4/16 bits-per-weight budget met by the whole model instead of by each matrix: 4-bit groups go
// where they lower the output error most per stored bit (estimated), or each matrix takes the share of
// 4-bit groups that lowers the calibration loss most per stored bit (measured).
#pragma once

#include <unordered_map>
#include <vector>

#include "models/llama_model.hpp"
#include "qjit/qjit.h"

namespace qjit_models::llama {

// Runs the calibration sequences once through `model` (as it is: the runners' is fp32), layer by
// layer, capturing each matrix's inputs; asks qjit for each K-group's gain from 4 bits
// (qjit_mixed_widening_gains); then widens groups greedily by gain per stored bit
// (qjit_mixed_stored_bits) until the model's matrices would exceed `bits_per_weight` on average.
// Returns each matrix's share as a per-layer budget (config.mixed_bits_per_weight) for the
// quantization that follows. The classifier takes part when `classifier` is true. Throws when the
// budget is below every group in 2 bits, naming that model's smallest bits per weight.
std::unordered_map<const LoadedMatrix*, double> share_mixed_budget(Model& model,
                                                                   const std::vector<std::vector<int>>& sequences,
                                                                   const qjit_quant_config& config,
                                                                   double bits_per_weight, bool classifier);

// The loss-aware sharing: on the model with every matrix in 4 bits, each matrix in turn is quantized
// with 0, 1/4, 1/2 and 3/4 of its groups in 4 bits (the rest in 2), and the model's NLL on the first
// `score_sequences` calibration sequences measured: the rise over all-4-bit is what that level
// costs the loss. A greedy multiple-choice knapsack then picks a level per matrix (the step that
// saves the most rise per stored bit first, the rises taken as additive) until the budget is spent;
// what is left widens the matrices with the most rise still to save. Returns each matrix's share as
// share_mixed_budget does, and throws as it does. Costs four forwards of the score sequences, from
// the matrix's layer on, per matrix. `model` gives the weights and is left as it is.
std::unordered_map<const LoadedMatrix*, double> share_mixed_budget_by_loss(
    Model& model, const std::vector<std::vector<int>>& sequences, const qjit_quant_config& config,
    double bits_per_weight, bool classifier, int score_sequences = 16);

}  // namespace qjit_models::llama
