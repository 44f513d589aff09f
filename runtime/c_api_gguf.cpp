// The C API of GGUF tensors: a layer from one quantized weight tensor, imported exactly
// (runtime/gguf_layer.hpp).
#include "base/error.hpp"
#include "qjit/qjit.h"
#include "runtime/gguf_layer.hpp"

using namespace qjit;

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
