#include "format/panel_metadata.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "base/half.hpp"

namespace qjit {

namespace {

int64_t panels_of(const QuantParams& p, const PanelMetadataLayout& layout) {
    return (p.n + layout.panel_columns - 1) / layout.panel_columns;
}

void put_float(const WeightFormat& format, PageBuffer<uint8_t>& to, size_t at, float value) {
    if (format.f16_scales()) {
        const uint16_t half = float_to_half(value);
        std::memcpy(&to[at * 2], &half, 2);
    } else {
        std::memcpy(&to[at * 4], &value, 4);
    }
}

float get_float(const WeightFormat& format, const PageBuffer<uint8_t>& from, size_t at) {
    if (format.f16_scales()) {
        uint16_t half;
        std::memcpy(&half, &from[at * 2], 2);
        return half_to_float(half);
    }
    float value;
    std::memcpy(&value, &from[at * 4], 4);
    return value;
}

// The (scale, zero) pairs of group g's 16-column groups inside `panel`.
void pack_second_order_pairs(const QuantParams& p, const PanelMetadataLayout& layout, int64_t panel, int64_t g,
                             PanelMetadata& out) {
    const int64_t pairs_per_group = layout.panel_columns / SecondOrderScales::kColumns;
    const int64_t column_groups = SecondOrderScales::column_groups(p.n);
    for (int64_t j = 0; j < pairs_per_group; ++j) {
        const int64_t column_group = (panel * layout.panel_columns) / SecondOrderScales::kColumns + j;
        if (column_group >= column_groups) break;
        const size_t from = size_t(g * column_groups + column_group);
        const uint16_t pair[2] = {p.second_order.scales[from], p.second_order.zeros[from]};
        const size_t at = size_t(((panel * layout.groups + g) * pairs_per_group + j) *
                                 PanelMetadataLayout::kSecondOrderPairBytes);
        std::memcpy(&out.scales[at], pair, sizeof pair);
    }
}

int64_t groups_per_super_block(const PanelMetadataLayout& layout) {
    return SuperBlockScales::groups_per_super_block(layout.format);
}

// Bytes of one super-block of one panel in a stream: the fp16 super-values, then (with codes) each
// group's codes.
int64_t super_block_bytes(const PanelMetadataLayout& layout, bool with_codes) {
    const int64_t codes = with_codes ? groups_per_super_block(layout) * layout.code_bytes(layout.panel_columns) : 0;
    return layout.panel_columns * PanelMetadataLayout::kSuperBlockScaleBytes + codes;
}
int64_t scale_super_block_bytes(const PanelMetadataLayout& layout) { return super_block_bytes(layout, true); }
int64_t zero_super_block_bytes(const PanelMetadataLayout& layout) {
    return super_block_bytes(layout, !layout.mins_in_scale_bytes());
}

// Where column c (of the panel) of group g lies in a super-block stream of `super_bytes` per
// super-block: its super-value and its code (a byte, or 6 bits at `shift` of a 24-bit word), as
// byte offsets.
struct SuperBlockSlot {
    size_t value, code;
    int shift = 0;
};
SuperBlockSlot super_block_slot(const PanelMetadataLayout& layout, int64_t super_bytes, int64_t panel, int64_t g,
                                int64_t c) {
    const int64_t per_super = groups_per_super_block(layout), super = g / per_super;
    const int64_t start = (panel * (layout.groups / per_super) + super) * super_bytes;
    const int64_t codes = start + layout.panel_columns * PanelMetadataLayout::kSuperBlockScaleBytes +
                          (g % per_super) * layout.code_bytes(layout.panel_columns);
    const size_t value = size_t(start + c * PanelMetadataLayout::kSuperBlockScaleBytes);
    if (!layout.six_bit_codes()) return {value, size_t(codes + c)};
    return {value, size_t(codes + c / 4 * 3), int(c % 4) * 6};
}

// A code's bits at a slot (the buffer starts zeroed; slots do not overlap).
void put_code(const PanelMetadataLayout& layout, PageBuffer<uint8_t>& to, const SuperBlockSlot& slot, uint8_t code) {
    if (!layout.six_bit_codes()) {
        to[slot.code] = code;
        return;
    }
    const uint32_t bits = uint32_t(code & 63u) << slot.shift;
    for (int b = 0; b < 3; ++b) to[slot.code + b] |= uint8_t(bits >> (8 * b));
}
uint8_t get_code(const PanelMetadataLayout& layout, const PageBuffer<uint8_t>& from, const SuperBlockSlot& slot) {
    if (!layout.six_bit_codes()) return from[slot.code];
    const uint32_t word = from[slot.code] | uint32_t(from[slot.code + 1]) << 8 | uint32_t(from[slot.code + 2]) << 16;
    return uint8_t(word >> slot.shift & 63u);
}
// A scale code read back from its stored bits: symmetric formats' codes are signed (6-bit ones
// sign-extended).
int8_t scale_code(const PanelMetadataLayout& layout, uint8_t bits) {
    if (!layout.format.symmetric || !layout.six_bit_codes()) return int8_t(bits);
    return int8_t(int8_t(uint8_t(bits << 2)) >> 2);
}

void pack_super_block(const QuantParams& p, const PanelMetadataLayout& layout, int64_t panel, PanelMetadata& out) {
    const int64_t first = panel * layout.panel_columns, end = std::min(p.n, first + layout.panel_columns);
    const SuperBlockScales& s = p.super_block;
    const int64_t per_super = groups_per_super_block(layout);
    const bool shared = layout.mins_in_scale_bytes();
    for (int64_t g = 0; g < p.num_groups(); ++g)
        for (int64_t c = first; c < end; ++c) {
            const SuperBlockSlot slot = super_block_slot(layout, scale_super_block_bytes(layout), panel, g, c - first);
            const size_t from = size_t(g * p.n + c), super = size_t(g / per_super * p.n + c);
            put_code(layout, out.scales, slot, uint8_t(uint8_t(s.scale_codes[from]) | (shared ? s.min_codes[from] << 4 : 0)));
            std::memcpy(&out.scales[slot.value], &s.scales[super], 2);
            if (!p.float_offsets) continue;
            const SuperBlockSlot min = super_block_slot(layout, zero_super_block_bytes(layout), panel, g, c - first);
            if (!shared) put_code(layout, out.zeros, min, s.min_codes[from]);
            std::memcpy(&out.zeros[min.value], &s.mins[super], 2);
        }
}

void unpack_super_block(const PanelMetadata& metadata, const PanelMetadataLayout& layout, QuantParams& p) {
    SuperBlockScales& s = p.super_block;
    const size_t groups = size_t(p.num_groups() * p.n), supers = size_t(p.k / kSuperBlockRows * p.n);
    s.scale_codes.resize(groups);
    s.scales.resize(supers);
    s.min_codes.resize(p.float_offsets ? groups : 0);
    s.mins.resize(p.float_offsets ? supers : 0);
    const int64_t per_super = groups_per_super_block(layout), width = layout.panel_columns;
    const bool shared = layout.mins_in_scale_bytes();
    for (int64_t panel = 0; panel < panels_of(p, layout); ++panel)
        for (int64_t g = 0; g < p.num_groups(); ++g)
            for (int64_t c = panel * width; c < std::min(p.n, (panel + 1) * width); ++c) {
                const SuperBlockSlot slot =
                    super_block_slot(layout, scale_super_block_bytes(layout), panel, g, c - panel * width);
                const size_t to = size_t(g * p.n + c), super = size_t(g / per_super * p.n + c);
                const uint8_t code = get_code(layout, metadata.scales, slot);
                s.scale_codes[to] = shared ? int8_t(code & 15) : scale_code(layout, code);
                std::memcpy(&s.scales[super], &metadata.scales[slot.value], 2);
                if (!p.float_offsets) continue;
                const SuperBlockSlot min =
                    super_block_slot(layout, zero_super_block_bytes(layout), panel, g, c - panel * width);
                s.min_codes[to] = shared ? uint8_t(code >> 4) : get_code(layout, metadata.zeros, min);
                std::memcpy(&s.mins[super], &metadata.zeros[min.value], 2);
            }
    expand_super_block_scales(p);
    if (!p.float_offsets) p.zeros.assign(groups, uint16_t(p.symmetric_zero()));
}

}  // namespace

PanelMetadataOffsets panel_metadata_offsets(const PanelMetadataLayout& layout, int64_t panel, int64_t group) {
    const WeightFormat& f = layout.format;
    const int64_t entry = (panel * layout.groups + group) * layout.panel_columns;  // a value per column and group
    PanelMetadataOffsets at;
    if (f.super_block_scales()) {
        const int64_t per_super = groups_per_super_block(layout);
        const int64_t super = panel * (layout.groups / per_super) + group / per_super;
        at.scales = size_t(super * scale_super_block_bytes(layout));
        at.zeros = f.float_offsets ? size_t(super * zero_super_block_bytes(layout)) : 0;
        return at;
    }
    at.scales = f.second_order_scales()
                    ? size_t(entry / SecondOrderScales::kColumns * PanelMetadataLayout::kSecondOrderPairBytes)
                    : size_t(entry * f.scale_bytes());
    at.zeros = size_t(entry * f.zero_point_bytes());
    return at;
}

PanelMetadataSizes panel_metadata_sizes(const WeightFormat& format, const PanelMetadataLayout& layout) {
    const int64_t panels = (format.n + layout.panel_columns - 1) / layout.panel_columns;
    const PanelMetadataOffsets end = panel_metadata_offsets(layout, panels, 0);
    const size_t padding = layout.six_bit_codes() ? PanelMetadataLayout::kSixBitReadPadding : 0;
    return {end.scales + padding, end.zeros + (end.zeros > 0 ? padding : 0)};
}

PanelMetadata allocate_panel_metadata(const QuantParams& p, const PanelMetadataLayout& layout) {
    const PanelMetadataSizes sizes = panel_metadata_sizes(p, layout);
    PanelMetadata out;
    out.scales.assign(sizes.scale_bytes, 0);
    out.zeros.assign(sizes.zero_bytes, 0);
    return out;
}

void pack_panel_metadata(const QuantParams& p, const PanelMetadataLayout& layout, int64_t panel, PanelMetadata& out) {
    if (layout.format.super_block_scales()) return pack_super_block(p, layout, panel, out);
    const int64_t width = layout.panel_columns, first = panel * width, end = std::min(p.n, first + width);
    const bool second_order = layout.format.second_order_scales();
    for (int64_t g = 0; g < p.num_groups(); ++g) {
        if (second_order) pack_second_order_pairs(p, layout, panel, g, out);
        for (int64_t c = first; c < end; ++c) {
            const size_t at = size_t((panel * layout.groups + g) * width + c - first);
            const size_t from = size_t(g * p.n + c);
            if (second_order) {
                out.zeros[at] = uint8_t(p.zeros[from] | p.second_order.codes[from] << 4);
                continue;
            }
            put_float(layout.format, out.scales, at, p.scales[from]);
            if (p.float_offsets) put_float(layout.format, out.zeros, at, p.offsets[from]);
            else if (!p.symmetric) out.zeros[at] = uint8_t(p.zeros[from]);
        }
    }
}

bool panel_metadata_is_exact(const QuantParams& p, const PanelMetadataLayout& layout) {
    if (layout.format.second_order_scales()) return false;
    if (layout.format.super_block_scales()) return true;
    if (!layout.format.f16_scales()) return true;
    const auto exact = [](float v) { return std::bit_cast<uint32_t>(half_to_float(float_to_half(v))) == std::bit_cast<uint32_t>(v); };
    return std::all_of(p.scales.begin(), p.scales.end(), exact) && std::all_of(p.offsets.begin(), p.offsets.end(), exact);
}

void unpack_panel_metadata(const PanelMetadata& metadata, const PanelMetadataLayout& layout, QuantParams& p) {
    if (layout.format.super_block_scales()) return unpack_super_block(metadata, layout, p);
    const size_t entries = size_t(p.num_groups() * p.n);
    p.scales.resize(entries);
    if (p.float_offsets)
        p.offsets.resize(entries);
    else
        p.zeros.assign(entries, uint16_t(p.symmetric_zero()));
    const int64_t width = layout.panel_columns;
    for (int64_t panel = 0; panel < panels_of(p, layout); ++panel)
        for (int64_t g = 0; g < p.num_groups(); ++g)
            for (int64_t c = panel * width; c < std::min(p.n, (panel + 1) * width); ++c) {
                const size_t at = size_t((panel * layout.groups + g) * width + c - panel * width);
                const size_t to = size_t(g * p.n + c);
                p.scales[to] = get_float(layout.format, metadata.scales, at);
                if (p.float_offsets) p.offsets[to] = get_float(layout.format, metadata.zeros, at);
                else if (!p.symmetric) p.zeros[to] = metadata.zeros[at];
            }
}

}  // namespace qjit
