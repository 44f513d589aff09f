// What a qjit_checkpoint handle holds, for the C API's files that make layers from one.
#pragma once

#include "io/gptq_checkpoint.hpp"
#include "qjit/qjit.h"

struct qjit_checkpoint {
    qjit_context* context = nullptr;
    qjit::GptqCheckpoint files;
};

namespace qjit {

// The checkpoint's layer `name`; QJIT_ERROR_INVALID_ARGUMENT naming it when there is none.
const CheckpointLayer& checkpoint_layer(const qjit_checkpoint& checkpoint, const char* name);

}  // namespace qjit
