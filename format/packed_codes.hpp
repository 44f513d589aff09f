// The packed code layout every CPU kernel streams ("kblock32_quad").
//
// Columns are split into panels of `panel_columns` (N is padded up to a whole panel with zero
// codes) and each panel is stored whole, so a thread working on a panel reads one contiguous
// stream. Within a panel, rows are taken in blocks of 32 (the last block zero-padded) and a block
// stores `bits` uint32 words per column:
//     words[((panel * num_blocks + block) * bits + word) * panel_columns + column_in_panel]
// format/code_planes.hpp says which word and bits of a block hold each row's code. A layer of mixed
// widths (2 and 4 bits by K-group) stores each block at its group's width, so a block starts
// after the words of the blocks before it: block_start(block) words per column.
//
// Metadata slots (the x86 kernels' inline metadata): after each K-group's blocks a panel may hold
// `slot_words` words of that group's scales and zero points for the whole panel
// (format/inline_metadata.hpp), so a kernel reads codes and metadata from one stream. A block then
// starts block_offset(block) words into its panel.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/page_buffer.hpp"
#include "format/weight_format.hpp"

namespace qjit {

struct PackedCodes {
    int bits = 0;
    int64_t k = 0;
    int64_t n = 0;
    int panel_columns = 0;
    using Words = PageBuffer<uint32_t>;  // resize() leaves new words unwritten; a pack file's are borrowed
    Words words;
    std::vector<uint8_t> block_bits;    // mixed widths: each 32-row block's width; empty: all `bits`
    std::vector<int64_t> block_starts;  // mixed widths: words per column before each block [num_blocks + 1]
    int64_t slot_group_blocks = 0;      // metadata slots: blocks per K-group, a slot after each (0: no slots)
    int64_t slot_words = 0;             // words of one slot (the whole panel's metadata of one group)

    static constexpr int kBlockRows = 32;
    static constexpr const char* kLayoutName = "kblock32_quad";
    static constexpr const char* kSlottedLayoutName = "kblock32_quad_inline";  // with metadata slots
    const char* layout_name() const { return has_slots() ? kSlottedLayoutName : kLayoutName; }

    int64_t num_blocks() const { return (k + kBlockRows - 1) / kBlockRows; }
    int64_t num_panels() const { return (n + panel_columns - 1) / panel_columns; }
    bool mixed() const { return !block_bits.empty(); }
    int block_width(int64_t block) const { return mixed() ? int(block_bits[size_t(block)]) : bits; }
    int64_t block_start(int64_t block) const { return mixed() ? block_starts[size_t(block)] : block * bits; }
    int64_t column_words() const { return block_start(num_blocks()); }  // a column's words in all blocks
    bool has_slots() const { return slot_group_blocks > 0; }
    int64_t slot_groups() const { return has_slots() ? (num_blocks() + slot_group_blocks - 1) / slot_group_blocks : 0; }
    // Words from the start of a panel to block `block` (block num_blocks(): past the last block's
    // codes, before its group's slot), and to the slot of K-group `group`.
    int64_t block_offset(int64_t block) const {
        return block_start(block) * panel_columns + (has_slots() ? block / slot_group_blocks * slot_words : 0);
    }
    int64_t slot_offset(int64_t group) const {
        const int64_t end = std::min((group + 1) * slot_group_blocks, num_blocks());
        return block_start(end) * panel_columns + group * slot_words;
    }
    int64_t panel_words() const { return column_words() * panel_columns + slot_groups() * slot_words; }
    // First word of the panel that holds column n0 (a multiple of panel_columns).
    const uint32_t* panel(int64_t n0) const { return words.data() + n0 / panel_columns * panel_words(); }
    uint8_t code(int64_t row, int64_t column) const;
};

// Sets a layout's block widths (empty: uniform) and where each block starts.
void assign_block_widths(PackedCodes& codes, std::vector<uint8_t> block_bits);

// Words per column of a layout of `format` (all blocks), and words over n columns in panels of
// panel_columns.
int64_t column_words(const WeightFormat& format);
size_t packed_word_count(const WeightFormat& format, int64_t n, int panel_columns);

// The width of each 32-row block of a format of mixed widths (groups of whole 32-row blocks, so a block
// lies in one group); empty for a uniform format.
std::vector<uint8_t> block_widths(const WeightFormat& format);

// Every word zero, sized for the layout: what the packers fill in. block_bits: as PackedCodes holds
// them (empty: uniform).
PackedCodes zeroed_packed_codes(int bits, int64_t k, int64_t n, int panel_columns,
                                std::vector<uint8_t> block_bits = {});
// Sized for the layout, the words not written yet: for a packer that writes every word
// (pack_gptq_panels), so pages are first touched by the threads that fill them.
PackedCodes unwritten_packed_codes(int bits, int64_t k, int64_t n, int panel_columns,
                                   std::vector<uint8_t> block_bits = {});

// codes: [k][n], each below its block's width (2^bits). panel_columns: a positive multiple of 8.
PackedCodes pack_codes(const uint8_t* codes, int bits, int64_t k, int64_t n, int panel_columns,
                       std::vector<uint8_t> block_bits = {});
std::vector<uint8_t> unpack_codes(const PackedCodes& packed);
// The `bits` words (at most 8) of one column's 32-row block from its 32 codes, each below 2^bits:
// what a packer that works block by block writes (the column's words sit panel_columns apart).
void pack_column_block(const uint8_t* codes, int bits, uint32_t* words);

// The same codes in panels of another width: a 32-row block of a column is the same words at any
// panel width, so a column's words are copied as they are. Fills the panels [first_panel,
// end_panel) of `to` (made by zeroed_packed_codes with from's bits, k and n), so threads can
// share the work by panel ranges.
void copy_panels(const PackedCodes& from, int64_t first_panel, int64_t end_panel, PackedCodes& to);

}  // namespace qjit
