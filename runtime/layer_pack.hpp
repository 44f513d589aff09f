// Layers in pack files (io/pack_file.hpp is the container; qjit.h's qjit_pack_* the API). An
// entry is one of two kinds:
//   "panels"  an x86 JIT layer whose kernels hold all of its metadata, as they read it: the codes
//             in panels (format/packed_codes.hpp) and the scales and zero points or offsets in the
//             panel layout (format/panel_metadata.hpp), a section each, borrowed from the mapping
//             when read; its fields name the format, the kernel family and the tiling;
//   "layer"   any other layer, as a layer file's image (io/layer_file.hpp), rebuilt when read.
#pragma once

#include <memory>
#include <string>

#include "io/pack_file.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit {

void write_pack_entry(PackWriter& writer, const std::string& name, const qjit_linear& layer);

// The pack at `path`, checked for layers of `context`: its source must be `source` and every
// "panels" entry's kernel family the one the context makes for its format (QJIT_ERROR_STALE
// otherwise); every section's checksum is checked on the context's threads (QJIT_ERROR_CORRUPT_DATA).
std::shared_ptr<const PackFile> open_pack(qjit_context& context, const std::string& path, const std::string& source);

// The layer of an entry of a pack open_pack checked for `context`.
std::unique_ptr<qjit_linear> layer_from_pack(qjit_context* context, const PackFile& pack, const PackEntry& entry);

}  // namespace qjit
