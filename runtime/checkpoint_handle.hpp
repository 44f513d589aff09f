// What a qjit_checkpoint handle holds, for the C API's files that make layers from one: a GPTQ
// checkpoint directory or a GGUF file.
#pragma once

#include <optional>

#include "io/gguf_checkpoint.hpp"
#include "io/gptq_checkpoint.hpp"
#include "qjit/qjit.h"

struct qjit_checkpoint {
    qjit_context* context = nullptr;
    std::optional<qjit::GptqCheckpoint> gptq;  // opened from a directory
    std::optional<qjit::GgufCheckpoint> gguf;  // opened from a GGUF file
};

namespace qjit {

// The GPTQ checkpoint's layer `name`; QJIT_ERROR_INVALID_ARGUMENT naming it when there is none, and
// QJIT_ERROR_UNSUPPORTED when the checkpoint is a GGUF file (for what needs GPTQ tensors).
const CheckpointLayer& checkpoint_layer(const qjit_checkpoint& checkpoint, const char* name);

}  // namespace qjit
