// The C API's checkpoint entry points: open a GPTQ checkpoint directory, list its layers, create
// one by name.
#include <string>
#include <vector>

#include "base/error.hpp"
#include "io/gptq_checkpoint.hpp"
#include "qjit/qjit.h"
#include "runtime/checkpoint_handle.hpp"
#include "runtime/gptq_layer.hpp"

using namespace qjit;

namespace qjit {

const CheckpointLayer& checkpoint_layer(const qjit_checkpoint& checkpoint, const char* name) {
    require(name != nullptr, "name is NULL");
    const CheckpointLayer* entry = checkpoint.files.find(name);
    require(entry != nullptr, "the checkpoint '", checkpoint.files.directory(), "' has no layer '", name,
            "' (a layer is a tensor prefix P with P.qweight)");
    return *entry;
}

}  // namespace qjit

namespace {

// Imports the layer straight from the mapped tensors; a config that promises symmetric zero
// points is held to it.
std::unique_ptr<qjit_linear> create_layer(qjit_checkpoint& checkpoint, const CheckpointLayer& entry) {
    const CheckpointTensors tensors = checkpoint.files.tensors(entry);
    std::unique_ptr<qjit_linear> layer = make_linear_from_gptq(checkpoint.context, entry.k, entry.n, tensors.view);
    if (checkpoint.files.config().sym && !layer->params.symmetric)
        fail(QJIT_ERROR_CORRUPT_DATA, "layer '", entry.name, "' has zero points other than 2^(bits-1), but '",
             checkpoint.files.config().file, "' says \"sym\": true");
    return layer;
}

}  // namespace

extern "C" {

qjit_status qjit_checkpoint_open(qjit_context* context, const char* directory, qjit_checkpoint** checkpoint) {
    return guarded([&] {
        require(checkpoint != nullptr, "checkpoint (the output pointer) is NULL");
        *checkpoint = nullptr;
        require(context != nullptr, "context is NULL");
        require(directory != nullptr && *directory, "directory is NULL or empty");
        *checkpoint = new qjit_checkpoint{context, GptqCheckpoint(directory)};
    });
}

qjit_status qjit_checkpoint_close(qjit_checkpoint* checkpoint) {
    return guarded([&] { delete checkpoint; });
}

qjit_status qjit_checkpoint_num_layers(const qjit_checkpoint* checkpoint, int64_t* count) {
    return guarded([&] {
        require(checkpoint != nullptr, "checkpoint is NULL");
        require(count != nullptr, "count is NULL");
        *count = int64_t(checkpoint->files.layers().size());
    });
}

qjit_status qjit_checkpoint_get_layer(const qjit_checkpoint* checkpoint, int64_t index, qjit_checkpoint_layer* layer) {
    return guarded([&] {
        require(checkpoint != nullptr, "checkpoint is NULL");
        require(layer != nullptr, "layer is NULL");
        const std::vector<CheckpointLayer>& layers = checkpoint->files.layers();
        require(index >= 0 && index < int64_t(layers.size()), "index is ", index, "; the checkpoint has ",
                layers.size(), " layers");
        const CheckpointLayer& entry = layers[size_t(index)];
        const CheckpointConfig& config = checkpoint->files.config();
        layer->name = entry.name.c_str();
        layer->k = entry.k;
        layer->n = entry.n;
        layer->bits = config.bits;
        layer->group_size = config.group_size;
        layer->act_order = entry.act_order;
        layer->symmetric = config.sym;
        layer->format = entry.format.c_str();
        layer->checkpoint_format = config.checkpoint_format;
        layer->scale_dtype = entry.scale_dtype;
        layer->checkpoint_bytes = entry.bytes;
    });
}

qjit_status qjit_checkpoint_create_layer(qjit_checkpoint* checkpoint, const char* name, qjit_linear** layer) {
    return guarded([&] {
        require(layer != nullptr, "layer (the output pointer) is NULL");
        *layer = nullptr;
        require(checkpoint != nullptr, "checkpoint is NULL");
        *layer = create_layer(*checkpoint, checkpoint_layer(*checkpoint, name)).release();
    });
}

}  // extern "C"
