// A 2/4/16 bits-per-weight budget met by the whole model instead of by each matrix: 4-bit groups go
// where they lower the output error most per stored bit, across every matrix the method quantizes.
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

}  // namespace qjit_models::llama
