// Inline metadata: each K-group's scales and zero points (or offsets) in a slot right after the
// group's codes in its panel (PackedCodes' metadata slots), so that a kernel reads one stream. On
// the Zen 4 machine of bench/results/metadata-stream-2026-11-30 the scales' own stream, 1/8 of
// the codes' bytes at 4 bits in groups of 32, cost the one-row kernels 10-30 % of their time.
//
// A slot holds the panel's metadata of its group as the panel layout (format/panel_metadata.hpp)
// holds it: the panel_columns scales, then the zero points or offsets, if any, zero-padded to
// `slot_bytes`. Formats of plain per-group metadata only: no super-block or second-order scales.
#pragma once

#include <cstdint>

#include "format/packed_codes.hpp"
#include "format/panel_metadata.hpp"

namespace qjit {

// Bytes of one group's metadata over a panel of `layout`, before padding.
int64_t inline_metadata_bytes(const PanelMetadataLayout& layout);

// `codes` (without slots) and `metadata` (in `layout`, at codes' panel width) as one stream: a slot
// of slot_bytes (a multiple of 4, at least inline_metadata_bytes) after every group_blocks blocks
// of each panel, and after its last block.
PackedCodes with_metadata_slots(const PackedCodes& codes, const PanelMetadata& metadata,
                                const PanelMetadataLayout& layout, int64_t group_blocks, int64_t slot_bytes);

// The slots' metadata back in `layout`, and the codes without their slots.
PanelMetadata metadata_from_slots(const PackedCodes& codes, const PanelMetadataLayout& layout);
PackedCodes without_metadata_slots(const PackedCodes& codes);

}  // namespace qjit
