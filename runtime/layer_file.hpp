// Saving and loading layer handles as layer files (io/layer_file.hpp: the format).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "io/layer_file.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit {

// Writes to a temporary file beside `path`, then renames it over `path`.
void save_layer(const qjit_linear& layer, const std::string& path);
std::unique_ptr<qjit_linear> load_layer(qjit_context* context, const std::string& path);
// The layer a layer file's image holds (a file's, or a section of a tensor-parallel MLP file's).
std::unique_ptr<qjit_linear> layer_from_image(qjit_context* context, std::string_view image);

// The image save_layer writes: the layer's params, its CPU codes and its compensator.
std::string serialize_layer(const qjit_linear& layer);

}  // namespace qjit
