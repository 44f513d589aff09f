// The C API of GGUF tensors: a layer from one quantized weight tensor, imported exactly
// (io/gguf_import.hpp).
#include <utility>

#include "base/error.hpp"
#include "io/gguf_import.hpp"
#include "qjit/qjit.h"
#include "runtime/linear_layer.hpp"

using namespace qjit;

namespace {

// The imported matrix as a layer whose description ends with source="<how it is stored>". A backend
// that does not run the format (CUDA: float offsets, groups of 16) is named after the GGUF type.
std::unique_ptr<qjit_linear> make_linear_from_gguf(qjit_context* context, GgmlType type, const uint8_t* data,
                                                   size_t bytes, int64_t k, int64_t n) {
    QuantizedMatrix matrix = import_gguf_matrix(type, data, bytes, k, n);
    const std::string source = gguf_import_name(type);
    std::unique_ptr<qjit_linear> layer;
    try {
        layer = make_linear(context, std::move(matrix));
    } catch (const Error& e) {
        fail(e.status(), "GGUF ", source, ": ", e.what());
    }
    layer->description += concat(" source=\"GGUF ", source, "\"");
    return layer;
}

}  // namespace

extern "C" {

qjit_status qjit_linear_create_from_gguf(qjit_context* context, uint32_t ggml_type, const void* data, size_t bytes,
                                         int64_t k, int64_t n, qjit_linear** layer) {
    return guarded([&] {
        require(layer != nullptr, "layer (the output pointer) is NULL");
        *layer = nullptr;
        require(context != nullptr, "context is NULL");
        require(data != nullptr, "data is NULL");
        *layer =
            make_linear_from_gguf(context, GgmlType(ggml_type), static_cast<const uint8_t*>(data), bytes, k, n).release();
    });
}

}  // extern "C"
