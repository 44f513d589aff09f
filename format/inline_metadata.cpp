#include "format/inline_metadata.hpp"

#include <cstring>

#include "base/error.hpp"

namespace qjit {

namespace {

void require_plain_metadata(const PanelMetadataLayout& layout) {
    require(!layout.format.super_block_scales() && !layout.format.second_order_scales(),
            "inline metadata: ", layout.format.name(), " has super-block or second-order scales");
}

// Walks the runs of code words of every group of every panel: `run` gets the run's word offsets
// in `plain` (no slots) and in `slotted`, its words, and the offset of the group's slot, with its
// panel and group.
template <typename Run>
void for_each_group_run(const PackedCodes& plain, const PackedCodes& slotted, const Run& run) {
    for (int64_t panel = 0; panel < slotted.num_panels(); ++panel)
        for (int64_t group = 0; group < slotted.slot_groups(); ++group) {
            const int64_t first = group * slotted.slot_group_blocks;
            const int64_t end = std::min(first + slotted.slot_group_blocks, slotted.num_blocks());
            const size_t plain_at = size_t(panel * plain.panel_words() + plain.block_offset(first));
            const size_t slotted_at = size_t(panel * slotted.panel_words() + slotted.block_offset(first));
            const size_t slot_at = size_t(panel * slotted.panel_words() + slotted.slot_offset(group));
            run(plain_at, slotted_at, size_t(plain.block_offset(end) - plain.block_offset(first)), slot_at, panel, group);
        }
}

}  // namespace

int64_t inline_metadata_bytes(const PanelMetadataLayout& layout) {
    return layout.panel_columns * (layout.format.scale_bytes() + layout.format.zero_point_bytes());
}

PackedCodes with_metadata_slots(const PackedCodes& codes, const PanelMetadata& metadata,
                                const PanelMetadataLayout& layout, int64_t group_blocks, int64_t slot_bytes) {
    require_plain_metadata(layout);
    require(!codes.has_slots(), "with_metadata_slots: the codes have slots already");
    require(group_blocks > 0 && slot_bytes % 4 == 0 && slot_bytes >= inline_metadata_bytes(layout),
            "with_metadata_slots: slots of ", slot_bytes, " bytes after ", group_blocks, " blocks for ",
            inline_metadata_bytes(layout), " bytes of metadata");
    require(layout.panel_columns == codes.panel_columns, "with_metadata_slots: metadata in panels of ",
            layout.panel_columns, " columns for codes in panels of ", codes.panel_columns);
    PackedCodes out;
    out.bits = codes.bits;
    out.k = codes.k;
    out.n = codes.n;
    out.panel_columns = codes.panel_columns;
    out.slot_group_blocks = group_blocks;
    out.slot_words = slot_bytes / 4;
    out.words.resize(size_t(out.num_panels() * out.panel_words()));
    const size_t scale_bytes = size_t(layout.panel_columns * layout.format.scale_bytes());
    const size_t zero_bytes = size_t(layout.panel_columns * layout.format.zero_point_bytes());
    for_each_group_run(codes, out, [&](size_t plain_at, size_t slotted_at, size_t words, size_t slot_at, int64_t panel,
                                       int64_t group) {
        std::memcpy(out.words.data() + slotted_at, codes.words.data() + plain_at, words * sizeof(uint32_t));
        uint8_t* slot = reinterpret_cast<uint8_t*>(out.words.data() + slot_at);
        const PanelMetadataOffsets at = panel_metadata_offsets(layout, panel, group);
        std::memcpy(slot, metadata.scales.data() + at.scales, scale_bytes);
        if (zero_bytes > 0) std::memcpy(slot + scale_bytes, metadata.zeros.data() + at.zeros, zero_bytes);
        std::memset(slot + scale_bytes + zero_bytes, 0, size_t(slot_bytes) - scale_bytes - zero_bytes);
    });
    return out;
}

PanelMetadata metadata_from_slots(const PackedCodes& codes, const PanelMetadataLayout& layout) {
    require_plain_metadata(layout);
    require(codes.has_slots(), "metadata_from_slots: the codes have no slots");
    WeightFormat format = layout.format;
    format.n = codes.n;
    const PanelMetadataSizes sizes = panel_metadata_sizes(format, layout);
    PanelMetadata metadata;
    metadata.scales.assign(sizes.scale_bytes, 0);
    metadata.zeros.assign(sizes.zero_bytes, 0);
    const size_t scale_bytes = size_t(layout.panel_columns * layout.format.scale_bytes());
    const size_t zero_bytes = size_t(layout.panel_columns * layout.format.zero_point_bytes());
    for_each_group_run(codes, codes, [&](size_t, size_t, size_t, size_t slot_at, int64_t panel, int64_t group) {
        const uint8_t* slot = reinterpret_cast<const uint8_t*>(codes.words.data() + slot_at);
        const PanelMetadataOffsets at = panel_metadata_offsets(layout, panel, group);
        std::memcpy(metadata.scales.data() + at.scales, slot, scale_bytes);
        if (zero_bytes > 0) std::memcpy(metadata.zeros.data() + at.zeros, slot + scale_bytes, zero_bytes);
    });
    return metadata;
}

PackedCodes without_metadata_slots(const PackedCodes& codes) {
    require(codes.has_slots(), "without_metadata_slots: the codes have no slots");
    PackedCodes out = zeroed_packed_codes(codes.bits, codes.k, codes.n, codes.panel_columns);
    for_each_group_run(out, codes, [&](size_t plain_at, size_t slotted_at, size_t words, size_t, int64_t, int64_t) {
        std::memcpy(out.words.data() + plain_at, codes.words.data() + slotted_at, words * sizeof(uint32_t));
    });
    return out;
}

}  // namespace qjit
