// Names in the order a person reads them: runs of digits compared as numbers, so that
// "layers.2.mlp" comes before "layers.10.mlp" (checkpoints list their layers in this order).
#pragma once

#include <string>

namespace qjit {

bool natural_less(const std::string& a, const std::string& b);

}  // namespace qjit
