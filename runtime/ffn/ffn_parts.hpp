// One FFN's description, which every strategy of runtime/ffn/ runs: its gate, up and down layers and
// the activation between them (include/qjit/qjit_ffn.h). Dense (dense_ffn) runs one; Sharded
// (sharded_ffn) runs a rank's shards of one between collectives; Experts (experts_ffn) runs several
// on the rows routed to each; Sparse (flash_layer_ffn) runs a layer of a flash FFN instead.
#pragma once

#include <cstdint>
#include <string>

#include "qjit/qjit_ffn.h"

struct qjit_linear;

namespace qjit {

class ThreadPool;

struct FfnParts {
    qjit_ffn_activation activation = QJIT_FFN_SWIGLU;
    const qjit_linear* gate = nullptr;  // K x H, SwiGLU only
    const qjit_linear* up = nullptr;    // K x H
    const qjit_linear* down = nullptr;  // H x N

    bool gated() const { return activation == QJIT_FFN_SWIGLU; }
    int64_t inputs() const;   // K
    int64_t hidden() const;   // H
    int64_t outputs() const;  // N
    ThreadPool& pool() const;  // the up layer's context's
};

// A C activation value (read as an integer, so an out-of-range one is never cast): throws naming
// `name` unless it is a qjit_ffn_activation.
qjit_ffn_activation ffn_activation_of(int value, const char* name);

// Throws QJIT_ERROR_INVALID_ARGUMENT naming `name`'s part ("gate", "experts[2].up") that is NULL, a
// gate given to an activation without one, a layer of another context than `context`, or shapes that
// do not chain (gate and up K x H, down H x N).
void check_ffn_parts(const FfnParts& parts, const qjit_context* context, const std::string& name);

// up (count values) = the parts' activation of gate and up, in place, on the up layer's context's
// threads when long, in its context's instruction-set family.
void activate(const FfnParts& parts, float* up, const float* gate, int64_t count);

}  // namespace qjit
