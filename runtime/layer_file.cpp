#include "runtime/layer_file.hpp"

#include "base/replace_file.hpp"
#include "format/inline_metadata.hpp"
#include "io/framed_file.hpp"

namespace qjit {

std::string serialize_layer(const qjit_linear& layer) {
    const PackedCodes& codes = layer.cpu->codes();  // a file holds the codes without metadata slots
    return serialize_layer(layer_params(layer), codes.has_slots() ? without_metadata_slots(codes) : codes,
                           unpack_low_rank(layer));
}

void save_layer(const qjit_linear& layer, const std::string& path) { replace_file(path, serialize_layer(layer)); }

std::unique_ptr<qjit_linear> layer_from_image(qjit_context* context, std::string_view image) {
    LayerImage loaded = deserialize_layer(image);
    return make_linear(context, std::move(loaded.params), std::move(loaded.codes), std::move(loaded.compensator));
}

std::unique_ptr<qjit_linear> load_layer(qjit_context* context, const std::string& path) {
    return read_mapped(path, [&](std::string_view image) { return layer_from_image(context, image); });
}

}  // namespace qjit
