// A layer made straight from GPTQ tensors: the metadata read as import_gptq reads it, the tiling
// chosen, then qweight packed for that tiling's panel width on the context's thread pool, with
// no [k][n] code matrix in between (format/gptq_packing.hpp).
#pragma once

#include <cstdint>
#include <memory>

#include "qjit/qjit.h"
#include "runtime/linear_layer.hpp"

namespace qjit {

// tensors: as qjit_linear_create_from_gptq takes them (format/gptq_import.hpp); the pointers may
// point into memory-mapped files, read only. Throws an Error naming the bad argument. A compensator
// (rank > 0) is added as make_linear adds it.
std::unique_ptr<qjit_linear> make_linear_from_gptq(qjit_context* context, int64_t k, int64_t n,
                                                   const qjit_gptq_tensors& tensors, LowRankFactors compensator = {});

}  // namespace qjit
