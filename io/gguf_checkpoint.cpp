#include "io/gguf_checkpoint.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "io/gguf_import.hpp"
#include "io/natural_order.hpp"

namespace qjit {

GgufCheckpoint::GgufCheckpoint(const std::string& path) : GgufCheckpoint(GgufFile::open(path), path) {}

GgufCheckpoint::GgufCheckpoint(std::shared_ptr<const GgufFile> file, std::string path)
    : path_(std::move(path)), file_(std::move(file)) {
    for (const GgufTensor& tensor : file_->tensors()) {
        if (tensor.dims.size() != 2 || !gguf_import_supported(tensor.type)) continue;
        GgufCheckpointLayer layer;
        layer.name = tensor.name;
        layer.k = tensor.dims[0];
        layer.n = tensor.dims[1];
        layer.type = tensor.type;
        try {
            layer.format = gguf_import_format(tensor.type, layer.k, layer.n);
        } catch (const Error& e) {
            fail(e.status(), "'", path_, "': tensor ", tensor.name, ": ", e.what());
        }
        layer.format_name = layer.format.name();
        layer.data = tensor.data;
        layer.bytes = tensor.bytes;
        layers_.push_back(std::move(layer));
    }
    sort_by_natural_name(layers_);
}

const GgufCheckpointLayer* GgufCheckpoint::find(const std::string& name) const { return find_named(layers_, name); }

}  // namespace qjit
