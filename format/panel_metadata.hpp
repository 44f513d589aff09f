// The scales and zero points of a layer in the CPU kernels' panel layout: per column panel, per
// K-group, the panel's columns side by side, so a kernel streams its panel's metadata
// contiguously. The generated kernels (jit/x86/gemm_emitter.cpp) read this layout; this file is
// its one packer.
//
//     scales[((panel * groups + g) * panel_columns + column_in_panel) * scale_bytes]  fp16 or fp32
//     zeros [((panel * groups + g) * panel_columns + column_in_panel) * zero_bytes]   asymmetric only:
//            a byte per integer zero point; float offsets are stored like the scales
// Second-order scales store, per panel and group, one fp16 (scale, zero) pair per 16 columns in
// `scales`, and in `zeros` a byte per column: the zero point | the 4-bit scale code << 4.
// Super-block scales store, per panel and 256-row super-block, in `scales` the fp16 super-scales d
// of the panel's columns, then a signed or unsigned byte per group and column (the scale code); in
// `zeros` (float offsets) the fp16 super-mins dmin, then a byte per group and column (the min code).
// 4-bit codes with float offsets (GGUF Q2_K) share a byte, scale | min << 4, in `scales`, and
// `zeros` holds only the super-mins. 6-bit codes (Q3_K, Q4_K, Q5_K, IQ4_XS) are packed four to
// three bytes: column c of a group is bits 6 (c % 4) .. 6 (c % 4) + 5 of the little-endian 24-bit
// word at byte 3 (c / 4) of the group's codes, so the panels hold exactly the file's bits. The
// kernels read those codes 16 bytes at a time; such streams end with kSixBitReadPadding bytes.
// Groups past the layer's own (groups of 16 over rows padded to 32) keep scale 0.
#pragma once

#include <cstdint>
#include <vector>

#include "base/page_buffer.hpp"
#include "format/quantized_matrix.hpp"

namespace qjit {

struct PanelMetadataLayout {
    WeightFormat format;  // the kernel's: its scale type says how scales are stored
    int64_t panel_columns = 0;
    int64_t groups = 0;  // K-groups the kernels walk (may exceed the format's by one)

    // Bytes of the fp16 (scale, zero) pair of one 16-column second-order group.
    static constexpr int kSecondOrderPairBytes = 4;
    // Bytes of the fp16 super-scale of a column.
    static constexpr int kSuperBlockScaleBytes = 2;
    // Zero bytes after a stream of 6-bit codes: the kernels load 16 bytes for 12 (or 6) they use.
    static constexpr int kSixBitReadPadding = 16;

    // Super-block scale (and min) codes packed four to three bytes.
    bool six_bit_codes() const { return format.super_block_scales() && format.scale_code_bits == 6; }
    // Bytes of one group's codes over `columns` columns (a multiple of 4).
    int64_t code_bytes(int64_t columns) const { return six_bit_codes() ? columns / 4 * 3 : columns; }

    // Super-block scales whose min codes share the scale codes' bytes (4-bit codes and float offsets).
    bool mins_in_scale_bytes() const {
        return format.super_block_scales() && format.float_offsets && format.scale_code_bits == 4;
    }
};

// Byte offsets, inside the scales and inside the zeros, of panel `panel`'s metadata from K-group
// `group` on (with super-block scales, a group that starts a super-block). Panel `panels`, group 0
// gives the sizes.
struct PanelMetadataOffsets {
    size_t scales = 0, zeros = 0;
};
PanelMetadataOffsets panel_metadata_offsets(const PanelMetadataLayout& layout, int64_t panel, int64_t group);

struct PanelMetadata {
    PageBuffer<uint8_t> scales;
    PageBuffer<uint8_t> zeros;  // empty for symmetric formats
};

// Bytes of the scales and of the zero points (or offsets) of `params` in `layout`.
struct PanelMetadataSizes {
    size_t scale_bytes = 0, zero_bytes = 0;
};
PanelMetadataSizes panel_metadata_sizes(const WeightFormat& format, const PanelMetadataLayout& layout);

// Metadata of `params` in `layout`, zero-filled and sized; fill it panel by panel with
// pack_panel_metadata (panels are independent, so they may be packed in parallel).
PanelMetadata allocate_panel_metadata(const QuantParams& params, const PanelMetadataLayout& layout);
void pack_panel_metadata(const QuantParams& params, const PanelMetadataLayout& layout, int64_t panel,
                         PanelMetadata& out);

// Whether the metadata holds params' scales, zero points and offsets exactly, so that
// unpack_panel_metadata gives them back: the scales and offsets representable at the layout's
// scale type (fp16 or fp32), and no second-order scales (their pairs are not read back); super-block
// scales are read back as their codes and super-scales.
bool panel_metadata_is_exact(const QuantParams& params, const PanelMetadataLayout& layout);
// params' scales, zero points (symmetric: 2^(bits - 1)) and offsets, sized and read back from the
// metadata pack_panel_metadata made of them (panel_metadata_is_exact must hold).
void unpack_panel_metadata(const PanelMetadata& metadata, const PanelMetadataLayout& layout, QuantParams& params);

}  // namespace qjit
