#include "format/packed_codes.hpp"

#include <algorithm>
#include <cstring>

#include "base/error.hpp"
#include "format/code_planes.hpp"

namespace qjit {

namespace {

// Index of word `word` of row block `block` for `column`.
size_t word_index(const PackedCodes& p, int64_t block, int word, int64_t column) {
    const int64_t panel = column / p.panel_columns;
    return size_t(panel * p.panel_words() + p.block_offset(block) + word * p.panel_columns + column % p.panel_columns);
}

}  // namespace

uint8_t PackedCodes::code(int64_t row, int64_t column) const {
    const int64_t block = row / kBlockRows;
    const int r = int(row % kBlockRows);
    uint32_t code = 0;
    for (const CodePlane& plane : code_planes(block_width(block))) {
        const PlaneSlot slot = plane_slot(plane, r);
        const uint32_t field = (words[word_index(*this, block, slot.word, column)] >> slot.shift) &
                               ((1u << plane.width) - 1u);
        code |= field << plane.value_shift;
    }
    return uint8_t(code);
}

std::vector<uint8_t> block_widths(const WeightFormat& format) {
    if (format.uniform_bits()) return {};
    std::vector<uint8_t> widths(size_t((format.k + PackedCodes::kBlockRows - 1) / PackedCodes::kBlockRows));
    for (size_t b = 0; b < widths.size(); ++b)
        widths[b] = uint8_t(format.group_width(int64_t(b) * PackedCodes::kBlockRows / format.group_size));
    return widths;
}

void assign_block_widths(PackedCodes& codes, std::vector<uint8_t> block_bits) {
    codes.block_starts.clear();
    if (!block_bits.empty()) {
        require(int64_t(block_bits.size()) == codes.num_blocks(), "packed codes: ", block_bits.size(),
                " block widths for ", codes.num_blocks(), " blocks");
        codes.block_starts.assign(block_bits.size() + 1, 0);
        for (size_t b = 0; b < block_bits.size(); ++b) codes.block_starts[b + 1] = codes.block_starts[b] + block_bits[b];
    }
    codes.block_bits = std::move(block_bits);
}

int64_t column_words(const WeightFormat& format) {
    const std::vector<uint8_t> widths = block_widths(format);
    if (widths.empty()) return (format.k + PackedCodes::kBlockRows - 1) / PackedCodes::kBlockRows * format.bits;
    int64_t words = 0;
    for (uint8_t w : widths) words += w;
    return words;
}

size_t packed_word_count(const WeightFormat& format, int64_t n, int panel_columns) {
    return size_t(column_words(format) * ((n + panel_columns - 1) / panel_columns) * panel_columns);
}

PackedCodes unwritten_packed_codes(int bits, int64_t k, int64_t n, int panel_columns, std::vector<uint8_t> block_bits) {
    PackedCodes out;
    out.bits = bits;
    out.k = k;
    out.n = n;
    out.panel_columns = panel_columns;
    assign_block_widths(out, std::move(block_bits));
    out.words.resize(size_t(out.num_panels() * out.panel_words()));
    return out;
}

PackedCodes zeroed_packed_codes(int bits, int64_t k, int64_t n, int panel_columns, std::vector<uint8_t> block_bits) {
    PackedCodes out = unwritten_packed_codes(bits, k, n, panel_columns, std::move(block_bits));
    std::fill(out.words.begin(), out.words.end(), 0u);
    return out;
}

PackedCodes pack_codes(const uint8_t* codes, int bits, int64_t k, int64_t n, int panel_columns,
                       std::vector<uint8_t> block_bits) {
    PackedCodes out = zeroed_packed_codes(bits, k, n, panel_columns, std::move(block_bits));
    // Row by row, plane by plane, panel by panel: the inner loop runs over a panel's contiguous
    // columns, reading a row's codes and or-ing into a row of words, which the compiler vectorizes.
    // The 32 rows of a block revisit the same words (bits x N of them), which stay in cache.
    const int64_t panel_words = out.panel_words();
    for (int64_t row = 0; row < k; ++row) {
        const int64_t block = row / PackedCodes::kBlockRows;
        const int r = int(row % PackedCodes::kBlockRows);
        const uint8_t* code_row = codes + row * n;
        for (const CodePlane& plane : code_planes(out.block_width(block))) {
            const PlaneSlot slot = plane_slot(plane, r);
            const uint32_t mask = (1u << plane.width) - 1u;
            const int value_shift = plane.value_shift, shift = slot.shift;
            uint32_t* words = out.words.data() + (out.block_start(block) + slot.word) * panel_columns;
            for (int64_t c0 = 0; c0 < n; c0 += panel_columns, words += panel_words) {
                const int64_t width = std::min<int64_t>(panel_columns, n - c0);
                const uint8_t* source = code_row + c0;
                for (int64_t c = 0; c < width; ++c) words[c] |= ((uint32_t(source[c]) >> value_shift) & mask) << shift;
            }
        }
    }
    return out;
}

void pack_column_block(const uint8_t* codes, int bits, uint32_t* words) {
    if (bits == 8) {  // one 8-bit plane: the codes in order
        std::memcpy(words, codes, 32);
        return;
    }
    if (bits == 4) {  // byte j of word w: rows 8w + j (low nibble) and 8w + 4 + j (high nibble)
        for (int w = 0; w < 4; ++w) {
            uint32_t word = 0;
            for (int j = 0; j < 4; ++j) word |= uint32_t(codes[8 * w + j] | codes[8 * w + 4 + j] << 4) << (8 * j);
            words[w] = word;
        }
        return;
    }
    std::fill(words, words + bits, 0u);
    for (const CodePlane& plane : code_planes(bits))
        for (int r = 0; r < 32; ++r) {
            const PlaneSlot slot = plane_slot(plane, r);
            words[slot.word] |= ((uint32_t(codes[r]) >> plane.value_shift) & ((1u << plane.width) - 1u)) << slot.shift;
        }
}

std::vector<uint8_t> unpack_codes(const PackedCodes& packed) {
    // pack_codes' loops run backwards: row by row, plane by plane, over a panel's contiguous words
    // (vectorized; a code at a time through PackedCodes::code is 20x slower on a 7B layer).
    const int64_t k = packed.k, n = packed.n, panel_columns = packed.panel_columns;
    std::vector<uint8_t> codes(size_t(k * n), 0);
    const int64_t panel_words = packed.panel_words();
    for (int64_t row = 0; row < k; ++row) {
        const int64_t block = row / PackedCodes::kBlockRows;
        const int r = int(row % PackedCodes::kBlockRows);
        uint8_t* code_row = codes.data() + row * n;
        for (const CodePlane& plane : code_planes(packed.block_width(block))) {
            const PlaneSlot slot = plane_slot(plane, r);
            const uint32_t mask = (1u << plane.width) - 1u;
            const int value_shift = plane.value_shift, shift = slot.shift;
            const uint32_t* words = packed.words.data() + packed.block_offset(block) + slot.word * panel_columns;
            for (int64_t c0 = 0; c0 < n; c0 += panel_columns, words += panel_words) {
                const int64_t width = std::min<int64_t>(panel_columns, n - c0);
                uint8_t* target = code_row + c0;
                for (int64_t c = 0; c < width; ++c) target[c] |= uint8_t(((words[c] >> shift) & mask) << value_shift);
            }
        }
    }
    return codes;
}

void copy_panels(const PackedCodes& from, int64_t first_panel, int64_t end_panel, PackedCodes& to) {
    require(!from.has_slots() && !to.has_slots(), "copy_panels: codes with metadata slots");
    const int64_t column_words = from.column_words();  // a column's words, block after block
    for (int64_t panel = first_panel; panel < end_panel; ++panel) {
        const int64_t c0 = panel * to.panel_columns, c1 = std::min(to.n, c0 + to.panel_columns);
        uint32_t* target = to.words.data() + panel * to.panel_words();
        for (int64_t w = 0; w < column_words; ++w)
            for (int64_t c = c0; c < c1; ++c)
                target[w * to.panel_columns + c - c0] =
                    from.words[size_t(c / from.panel_columns * from.panel_words() + w * from.panel_columns +
                                      c % from.panel_columns)];
    }
}

}  // namespace qjit
