// Layer files: a quantized matrix (its params, codes packed in panels, its compensator) as bytes.
//
// File layout (little-endian):
//   "QJITLAYR"                 8-byte magic
//   u32 format version         1 for a plain layer; 2 for a layer with a low-rank compensator; 3 for a
//                              layer with mixed 2/4-bit groups, second-order scales or sparse outliers
//                              (and maybe a compensator); 4 for a layer with permuted output columns (a
//                              tensor-parallel shard's). Each is written only when needed, so that an
//                              older reader refuses what it cannot represent instead of dropping it.
//   u32 header length H
//   H bytes of JSON            shape, format, layout name, qjit version, section sizes; a compensator
//                              adds "low_rank": {"rank", "bits"}; version 3 adds "mixed_bits" (bool),
//                              "outliers" (count) and scale_dtype "second_order" beside "f16"/"f32";
//                              version 4 adds "permuted_columns" (bool), version 5 "float_offsets"
//                              (bool), version 6 "scale_code_bits" (0, or 4, 6, 8 with scale_dtype
//                              "super_block")
//   sections, back to back     codes (u32 words, layout PackedCodes::kLayoutName; a mixed layer's blocks
//                              at their group's width), scales (f32; absent with second-order scales),
//                              zeros (u16), row_order (i32, empty without act-order); version 3 then
//                              group_bits (u8 per K-group) when mixed, the second-order scales' codes
//                              (u8 [groups][n]), scales and zeros (fp16 [groups][ceil(n/16)]) when
//                              second-order, and the outliers' column starts (i64 [n+1]), storage rows
//                              (i32) and values (fp16) when there are any; then the compensator's U and
//                              V^T (format/low_rank.hpp): codes (u8, one per value) and component scales
//                              (f32) of each, or their fp16 values (u16); version 4 then the column
//                              order (i32 [n]) when the columns are permuted; version 5 the offsets
//                              (f32 [groups][n]) with float offsets, unless the scales are super-block
//                              ones; version 6 those: scale codes (i8 [groups][n]) and d (fp16
//                              [k/256][n]), with float offsets min codes (u8) and dmin (fp16) too
//   u32 CRC-32                 of every byte before it
// Each format feature owns its header fields and sections: its codec in io/layer_sections.cpp
// writes, reads and checks them (the base: codes, scales, zeros; act-order: row_order; mixed widths;
// second-order scales; outliers; the compensator), and this file's reader loops over the features
// the header names. A file is trusted only after its size, checksum, header and every section size
// agree; the header names exactly the sections its format has.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "format/low_rank.hpp"
#include "format/packed_codes.hpp"
#include "format/quantized_matrix.hpp"

namespace qjit {

inline constexpr uint32_t kLayerFileVersion = 6;             // the newest this qjit writes and reads: super-block scales
inline constexpr uint32_t kOffsetLayerFileVersion = 5;       // float offsets
inline constexpr uint32_t kPermutedLayerFileVersion = 4;     // permuted columns
inline constexpr uint32_t kMixedLayerFileVersion = 3;        // mixed widths, second-order scales, outliers
inline constexpr uint32_t kCompensatedLayerFileVersion = 2;  // a compensator, none of version 3's features
inline constexpr uint32_t kPlainLayerFileVersion = 1;        // neither

struct LayerImage {
    QuantParams params;
    PackedCodes codes;
    LowRankFactors compensator;  // rank 0: none
};

// The file image of a quantized matrix: its params, its codes packed in panels of any width, and
// its compensator (rank 0: none); and its inverse (QJIT_ERROR_CORRUPT_DATA on any mismatch).
std::string serialize_layer(const QuantParams& params, const PackedCodes& codes, const LowRankFactors& compensator);
LayerImage deserialize_layer(std::string_view image);

}  // namespace qjit
