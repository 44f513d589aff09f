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

}  // namespace

PanelMetadataSizes panel_metadata_sizes(const WeightFormat& format, const PanelMetadataLayout& layout) {
    const int64_t panels = (format.n + layout.panel_columns - 1) / layout.panel_columns;
    const int64_t entries = panels * layout.groups * layout.panel_columns;
    const size_t scale_bytes = layout.format.scale_bytes();
    PanelMetadataSizes sizes;
    if (layout.format.second_order_scales()) {
        const int64_t pairs = panels * layout.groups * (layout.panel_columns / SecondOrderScales::kColumns);
        sizes.scale_bytes = size_t(pairs * PanelMetadataLayout::kSecondOrderPairBytes);
    } else {
        sizes.scale_bytes = size_t(entries) * scale_bytes;
    }
    if (!format.symmetric) sizes.zero_bytes = size_t(entries) * (format.float_offsets ? scale_bytes : 1);
    return sizes;
}

PanelMetadata allocate_panel_metadata(const QuantParams& p, const PanelMetadataLayout& layout) {
    const PanelMetadataSizes sizes = panel_metadata_sizes(p, layout);
    PanelMetadata out;
    out.scales.assign(sizes.scale_bytes, 0);
    out.zeros.assign(sizes.zero_bytes, 0);
    return out;
}

void pack_panel_metadata(const QuantParams& p, const PanelMetadataLayout& layout, int64_t panel, PanelMetadata& out) {
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
    if (!layout.format.f16_scales()) return true;
    const auto exact = [](float v) { return std::bit_cast<uint32_t>(half_to_float(float_to_half(v))) == std::bit_cast<uint32_t>(v); };
    return std::all_of(p.scales.begin(), p.scales.end(), exact) && std::all_of(p.offsets.begin(), p.offsets.end(), exact);
}

void unpack_panel_metadata(const PanelMetadata& metadata, const PanelMetadataLayout& layout, QuantParams& p) {
    const size_t entries = size_t(p.num_groups() * p.n);
    p.scales.resize(entries);
    if (p.float_offsets)
        p.offsets.resize(entries);
    else
        p.zeros.assign(entries, uint16_t(1u << (p.bits - 1)));
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
