// The C API's checkpoint entry points: open a GPTQ checkpoint directory or a GGUF file, list its
// layers, create one by name.
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "qjit/qjit.h"
#include "runtime/checkpoint_handle.hpp"
#include "runtime/gguf_layer.hpp"
#include "runtime/gptq_layer.hpp"

using namespace qjit;

namespace qjit {

const CheckpointLayer& checkpoint_layer(const qjit_checkpoint& checkpoint, const char* name) {
    require(name != nullptr, "name is NULL");
    if (!checkpoint.gptq)
        fail(QJIT_ERROR_UNSUPPORTED, "'", checkpoint.gguf->path(),
             "' is a GGUF file; this call takes the GPTQ tensors of a checkpoint directory");
    const CheckpointLayer* entry = checkpoint.gptq->find(name);
    require(entry != nullptr, "the checkpoint '", checkpoint.gptq->directory(), "' has no layer '", name,
            "' (a layer is a tensor prefix P with P.qweight)");
    return *entry;
}

}  // namespace qjit

namespace {

// Imports the layer straight from the mapped tensors; a config that promises symmetric zero
// points is held to it.
std::unique_ptr<qjit_linear> create_gptq_layer(const qjit_checkpoint& checkpoint, const CheckpointLayer& entry) {
    const CheckpointTensors tensors = checkpoint.gptq->tensors(entry);
    std::unique_ptr<qjit_linear> layer = make_linear_from_gptq(checkpoint.context, entry.k, entry.n, tensors.view);
    if (checkpoint.gptq->config().sym && !layer->params.symmetric)
        fail(QJIT_ERROR_CORRUPT_DATA, "layer '", entry.name, "' has zero points other than 2^(bits-1), but '",
             checkpoint.gptq->config().file, "' says \"sym\": true");
    return layer;
}

std::unique_ptr<qjit_linear> create_gguf_layer(const qjit_checkpoint& checkpoint, const char* name) {
    require(name != nullptr, "name is NULL");
    const GgufCheckpointLayer* entry = checkpoint.gguf->find(name);
    require(entry != nullptr, "'", checkpoint.gguf->path(), "' has no layer '", name,
            "' (a layer is a 2-dimensional tensor of a type qjit imports)");
    try {
        return make_linear_from_gguf(checkpoint.context, entry->type, entry->data, entry->bytes, entry->k, entry->n);
    } catch (const Error& e) {
        fail(e.status(), "'", checkpoint.gguf->path(), "': tensor ", entry->name, ": ", e.what());
    }
}

int64_t layer_count(const qjit_checkpoint& checkpoint) {
    return int64_t(checkpoint.gptq ? checkpoint.gptq->layers().size() : checkpoint.gguf->layers().size());
}

void describe_gptq_layer(const qjit_checkpoint& checkpoint, const CheckpointLayer& entry, qjit_checkpoint_layer& layer) {
    const CheckpointConfig& config = checkpoint.gptq->config();
    layer.name = entry.name.c_str();
    layer.k = entry.k;
    layer.n = entry.n;
    layer.bits = config.bits;
    layer.group_size = config.group_size;
    layer.act_order = entry.act_order;
    layer.symmetric = config.sym;
    layer.format = entry.format.c_str();
    layer.checkpoint_format = config.checkpoint_format;
    layer.scale_dtype = entry.scale_dtype;
    layer.checkpoint_bytes = entry.bytes;
    layer.ggml_type = -1;
}

void describe_gguf_layer(const GgufCheckpointLayer& entry, qjit_checkpoint_layer& layer) {
    layer.name = entry.name.c_str();
    layer.k = entry.k;
    layer.n = entry.n;
    layer.bits = entry.format.bits;
    layer.group_size = entry.format.per_column() ? QJIT_GROUP_PER_COLUMN : int(entry.format.group_size);
    layer.act_order = 0;
    layer.symmetric = entry.format.symmetric;
    layer.format = entry.format_name.c_str();
    layer.checkpoint_format = QJIT_GGUF_BLOCKS;
    layer.scale_dtype = entry.format.f16_scales() ? QJIT_DTYPE_F16 : QJIT_DTYPE_F32;
    layer.checkpoint_bytes = int64_t(entry.bytes);
    layer.ggml_type = int(entry.type);
}

}  // namespace

extern "C" {

qjit_status qjit_checkpoint_open(qjit_context* context, const char* path, qjit_checkpoint** checkpoint) {
    return guarded([&] {
        require(checkpoint != nullptr, "checkpoint (the output pointer) is NULL");
        *checkpoint = nullptr;
        require(context != nullptr, "context is NULL");
        require(path != nullptr && *path, "path is NULL or empty");
        auto opened = std::make_unique<qjit_checkpoint>();
        opened->context = context;
        std::error_code error;
        if (std::filesystem::is_regular_file(path, error)) opened->gguf.emplace(path);
        else opened->gptq.emplace(path);
        *checkpoint = opened.release();
    });
}

qjit_status qjit_checkpoint_close(qjit_checkpoint* checkpoint) {
    return guarded([&] { delete checkpoint; });
}

qjit_status qjit_checkpoint_num_layers(const qjit_checkpoint* checkpoint, int64_t* count) {
    return guarded([&] {
        require(checkpoint != nullptr, "checkpoint is NULL");
        require(count != nullptr, "count is NULL");
        *count = layer_count(*checkpoint);
    });
}

qjit_status qjit_checkpoint_get_layer(const qjit_checkpoint* checkpoint, int64_t index, qjit_checkpoint_layer* layer) {
    return guarded([&] {
        require(checkpoint != nullptr, "checkpoint is NULL");
        require(layer != nullptr, "layer is NULL");
        const int64_t count = layer_count(*checkpoint);
        require(index >= 0 && index < count, "index is ", index, "; the checkpoint has ", count, " layers");
        if (checkpoint->gptq) describe_gptq_layer(*checkpoint, checkpoint->gptq->layers()[size_t(index)], *layer);
        else describe_gguf_layer(checkpoint->gguf->layers()[size_t(index)], *layer);
    });
}

qjit_status qjit_checkpoint_create_layer(qjit_checkpoint* checkpoint, const char* name, qjit_linear** layer) {
    return guarded([&] {
        require(layer != nullptr, "layer (the output pointer) is NULL");
        *layer = nullptr;
        require(checkpoint != nullptr, "checkpoint is NULL");
        *layer = (checkpoint->gptq ? create_gptq_layer(*checkpoint, checkpoint_layer(*checkpoint, name))
                                   : create_gguf_layer(*checkpoint, name))
                     .release();
    });
}

}  // extern "C"
