// Save and load packed layers.
//
// File layout (little-endian):
//   "QJITLAYR"                 8-byte magic
//   u32 format version         kLayerFileVersion
//   u32 header length H
//   H bytes of JSON            shape, format, layout name, qjit version, section sizes
//   sections, back to back     codes (u32 words, layout PackedCodes::kLayoutName), scales (f32), zeros (u16),
//                              row_order (i32, empty without act-order)
//   u32 CRC-32                 of every byte before it
// A file is trusted only after its size, checksum, header and every section size agree.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "runtime/linear_layer.hpp"

namespace qjit {

inline constexpr uint32_t kLayerFileVersion = 1;

// Writes to a temporary file beside `path`, then renames it over `path`.
void save_layer(const qjit_linear& layer, const std::string& path);
std::unique_ptr<qjit_linear> load_layer(qjit_context* context, const std::string& path);

struct LayerImage {
    QuantParams params;
    PackedCodes codes;
};

// The in-memory image save_layer writes, and its inverse (QJIT_ERROR_CORRUPT_DATA on any mismatch).
std::string serialize_layer(const qjit_linear& layer);
LayerImage deserialize_layer(std::string_view image);

}  // namespace qjit
