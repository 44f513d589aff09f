#include "models/gguf_import_maker.hpp"

#include <stdexcept>

namespace qjit_models::llama {

GgufImportMaker::GgufImportMaker(const qjit_context_options* options) : context_(make_context(options)) {}

std::unique_ptr<Linear> GgufImportMaker::make_linear(const LoadedMatrix& matrix) {
    const GgmlMatrix* ggml = matrix.ggml();
    if (!ggml)
        throw std::runtime_error("matrix " + matrix.name() +
                                 " has no GGUF tensor to import exactly (its weights are dense fp32)");
    qjit_linear* layer = nullptr;
    const qjit_status status = qjit_linear_create_from_gguf(context_.get(), ggml->type, ggml->data, ggml->bytes,
                                                            matrix.k(), matrix.n(), &layer);
    if (status != QJIT_OK)
        throw std::runtime_error("qjit_linear_create_from_gguf failed on " + matrix.name() + ": " +
                                 qjit_status_string(status) + ": " + qjit_last_error());
    matrix.release_source();  // the layer holds the weights now; the file's pages can go
    return own_qjit_layer(context_, layer, matrix.n(), matrix.k());
}

}  // namespace qjit_models::llama
