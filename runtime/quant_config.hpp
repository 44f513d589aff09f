// The C quantization config read once, at the boundary: every field checked (messages name the
// qjit_quant_config field) and turned into the config of the quantizer it asks for, whose target
// format holds the width, group size, symmetry and scale type. Nothing below reads the C config.
#pragma once

#include <cstdint>
#include <variant>

#include "quant/quantize_gptq.hpp"
#include "quant/quantize_hqq.hpp"
#include "quant/quantize_milo.hpp"
#include "quant/quantize_mixed.hpp"
#include "format/weight_format.hpp"
#include "qjit/qjit.h"

namespace qjit {

// One quantizer's config; round to nearest (QJIT_QUANT_RTN) needs its format alone.
using QuantizerConfig = std::variant<WeightFormat, HqqConfig, MiloConfig, GptqConfig, MixedConfig>;

// The quantizer `config` asks for on a k x n layer (k, n valid), its format shaped k x n. Throws an
// invalid-argument Error naming the field of `config` that is out of range.
QuantizerConfig quantizer_config(const qjit_quant_config& config, int64_t k, int64_t n);

// Whether `config` asks for float offsets, QJIT_FLOAT_OFFSETS_BY_METHOD resolved for its method.
// Throws for an invalid method, milo_base or float_offsets.
bool uses_float_offsets(const qjit_quant_config& config);

}  // namespace qjit
