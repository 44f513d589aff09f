// Save and load packed layers.
//
// File layout (little-endian):
//   "QJITLAYR"                 8-byte magic
//   u32 format version         1, or 2 for a layer with a low-rank compensator (a reader of version 1
//                              refuses it instead of dropping the compensator)
//   u32 header length H
//   H bytes of JSON            shape, format, layout name, qjit version, section sizes; version 2 adds
//                              "low_rank": {"rank", "bits"}
//   sections, back to back     codes (u32 words, layout PackedCodes::kLayoutName), scales (f32), zeros (u16),
//                              row_order (i32, empty without act-order); version 2 then U and V^T
//                              (format/low_rank.hpp): codes (u8, one per value) and component scales
//                              (f32) of each, or their fp16 values (u16)
//   u32 CRC-32                 of every byte before it
// A file is trusted only after its size, checksum, header and every section size agree.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "runtime/linear_layer.hpp"

namespace qjit {

inline constexpr uint32_t kLayerFileVersion = 2;         // the newest this qjit writes and reads
inline constexpr uint32_t kPlainLayerFileVersion = 1;    // a layer without a compensator

// Writes to a temporary file beside `path`, then renames it over `path`.
void save_layer(const qjit_linear& layer, const std::string& path);
std::unique_ptr<qjit_linear> load_layer(qjit_context* context, const std::string& path);

struct LayerImage {
    QuantParams params;
    PackedCodes codes;
    LowRankFactors compensator;  // rank 0: none
};

// The in-memory image save_layer writes, and its inverse (QJIT_ERROR_CORRUPT_DATA on any mismatch).
std::string serialize_layer(const qjit_linear& layer);
LayerImage deserialize_layer(std::string_view image);

}  // namespace qjit
