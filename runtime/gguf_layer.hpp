// A layer made from one GGUF weight tensor, imported exactly (io/gguf_import.hpp): its blocks
// unpacked straight into the panels of the kernel chosen for its format, on the context's threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "io/gguf_file.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit {

// The layer's description ends with source="GGUF <how the type is stored>". A backend that does
// not run the format is refused naming the GGUF type.
std::unique_ptr<qjit_linear> make_linear_from_gguf(qjit_context* context, GgmlType type, const uint8_t* data,
                                                   size_t bytes, int64_t k, int64_t n);

}  // namespace qjit
