#include "format/gptq_packing.hpp"

#include <algorithm>
#include <array>

#include "base/error.hpp"
#include "format/code_planes.hpp"

namespace qjit {

namespace {

constexpr int kBlockRows = PackedCodes::kBlockRows;

// Four 4-bit fields (bits 0..15) moved to the low nibbles of the four bytes of a word.
uint32_t nibbles_to_bytes(uint32_t x) {
    x = (x | (x << 8)) & 0x00FF00FFu;
    return (x | (x << 4)) & 0x0F0F0F0Fu;
}

// The codes of a quad of four 3-bit codes (12 bits, code j at bit 3j) spread one per byte
// (code j in bits 0-2 of byte j), for every quad value.
const std::array<uint32_t, 4096>& three_bit_quads_by_byte() {
    static const std::array<uint32_t, 4096> table = [] {
        std::array<uint32_t, 4096> spread{};
        for (uint32_t quad = 0; quad < 4096; ++quad)
            for (int j = 0; j < 4; ++j) spread[quad] |= ((quad >> (3 * j)) & 7u) << (8 * j);
        return spread;
    }();
    return table;
}

// One column's 32-row block: the `Bits` GPTQ words (row i at bit Bits*i of the words read as one
// little-endian stream) to the `Bits` packed words (row i of a plane of width w at byte i % 4,
// field i / 4 of the plane's word i / (32 / w); format/code_planes.hpp).
template <int Bits>
void convert_block(const uint32_t* in, uint32_t* out);

// 8 bits: row i is byte i of the stream in both layouts.
template <>
void convert_block<8>(const uint32_t* in, uint32_t* out) {
    for (int j = 0; j < 8; ++j) out[j] = in[j];
}

// 4 bits: nibble i of a word goes to byte i % 4, nibble i / 4 of that byte.
template <>
void convert_block<4>(const uint32_t* in, uint32_t* out) {
    for (int j = 0; j < 4; ++j) out[j] = nibbles_to_bytes(in[j] & 0xFFFFu) | nibbles_to_bytes(in[j] >> 16) << 4;
}

// 2 bits: field 4a + b of a word (byte a, field b) goes to byte b, field a: the transpose of a
// 4x4 matrix of 2-bit fields, as two delta swaps (the off-diagonal 2x2 blocks, then inside each).
template <>
void convert_block<2>(const uint32_t* in, uint32_t* out) {
    for (int j = 0; j < 2; ++j) {
        uint32_t x = in[j];
        uint32_t t = (x ^ (x >> 12)) & 0x0000F0F0u;
        x ^= t ^ (t << 12);
        t = (x ^ (x >> 6)) & 0x00CC00CCu;
        out[j] = x ^ t ^ (t << 6);
    }
}

// 3 bits: the 96-bit stream read a quad of rows (12 bits) at a time; quad q's low two bits go to
// field q % 4 of the bytes of word q / 4 (the 2-bit plane), its high bits to field q of word 2
// (the 1-bit plane).
template <>
void convert_block<3>(const uint32_t* in, uint32_t* out) {
    const std::array<uint32_t, 4096>& by_byte = three_bit_quads_by_byte();
    const uint64_t low = in[0] | uint64_t(in[1]) << 32;
    const uint32_t quads[8] = {uint32_t(low) & 0xFFFu,
                               uint32_t(low >> 12) & 0xFFFu,
                               uint32_t(low >> 24) & 0xFFFu,
                               uint32_t(low >> 36) & 0xFFFu,
                               uint32_t(low >> 48) & 0xFFFu,
                               uint32_t((low >> 60) | uint64_t(in[2]) << 4) & 0xFFFu,  // straddles words 1 and 2
                               (in[2] >> 8) & 0xFFFu,
                               in[2] >> 20};
    out[0] = out[1] = out[2] = 0;
    for (int q = 0; q < 8; ++q) {
        const uint32_t codes = by_byte[quads[q]];
        out[q / 4] |= (codes & 0x03030303u) << (2 * (q % 4));
        out[2] |= ((codes >> 2) & 0x01010101u) << q;
    }
}

// Blocks [0, full_blocks) of the panels, word by word. qweight's block b of a column is words
// b*Bits .. b*Bits + Bits-1 of that column.
template <int Bits>
void pack_full_blocks(const uint32_t* qweight, int64_t full_blocks, int64_t first_panel, int64_t end_panel,
                      PackedCodes& out) {
    const int64_t n = out.n, panel_columns = out.panel_columns;
    for (int64_t block = 0; block < full_blocks; ++block)
        for (int64_t panel = first_panel; panel < end_panel; ++panel) {
            const int64_t c0 = panel * panel_columns, width = std::min(panel_columns, n - c0);
            const uint32_t* in = qweight + block * Bits * n + c0;
            uint32_t* packed = out.words.data() + panel * out.panel_words() + block * Bits * panel_columns;
            for (int64_t c = 0; c < width; ++c) {
                uint32_t gptq_words[Bits], packed_words[Bits];
                for (int j = 0; j < Bits; ++j) gptq_words[j] = in[j * n + c];
                convert_block<Bits>(gptq_words, packed_words);
                for (int j = 0; j < Bits; ++j) packed[j * panel_columns + c] = packed_words[j];
            }
        }
}

// Storage rows [first_row, K) code by code, storage row r read from GPTQ row row_order[r] (r when
// row_order is empty); their packed words must still be zero. The loop over columns has only
// shifts and masks that are the same for the whole row, so the compiler vectorizes it.
void pack_rows(const uint32_t* qweight, const std::vector<int32_t>& row_order, int64_t first_row,
               int64_t first_panel, int64_t end_panel, PackedCodes& out) {
    const int bits = out.bits;
    const int64_t n = out.n, panel_columns = out.panel_columns;
    const uint32_t code_mask = (1u << bits) - 1u;
    const std::vector<jit::CodePlane> planes = jit::code_planes(bits);
    for (int64_t row = first_row; row < out.k; ++row) {
        const int64_t source_row = row_order.empty() ? row : row_order[size_t(row)];
        const int64_t first_bit = source_row * bits, word_row = first_bit / 32;
        const int shift = int(first_bit % 32);
        // A code that straddles two words (3 bits) takes its high bits from the next word row;
        // otherwise reading the same row twice keeps the loop free of a branch.
        const int64_t high_word_row = shift + bits > 32 ? word_row + 1 : word_row;
        const int64_t block = row / kBlockRows;
        const int row_in_block = int(row % kBlockRows);
        for (const jit::CodePlane& plane : planes) {
            const jit::PlaneSlot slot = jit::plane_slot(plane, row_in_block);
            const uint32_t plane_mask = (1u << plane.width) - 1u;
            for (int64_t panel = first_panel; panel < end_panel; ++panel) {
                const int64_t c0 = panel * panel_columns, width = std::min(panel_columns, n - c0);
                const uint32_t* low_words = qweight + word_row * n + c0;
                const uint32_t* high_words = qweight + high_word_row * n + c0;
                uint32_t* packed = out.words.data() + panel * out.panel_words() +
                                   (block * bits + slot.word) * panel_columns;
                for (int64_t c = 0; c < width; ++c) {
                    const uint64_t window = low_words[c] | uint64_t(high_words[c]) << 32;
                    const uint32_t code = uint32_t(window >> shift) & code_mask;
                    packed[c] |= ((code >> plane.value_shift) & plane_mask) << slot.shift;
                }
            }
        }
    }
}

}  // namespace

void pack_gptq_panels(const int32_t* qweight, const std::vector<int32_t>& row_order, int64_t first_panel,
                      int64_t end_panel, PackedCodes& out) {
    require(first_panel >= 0 && first_panel <= end_panel && end_panel <= out.num_panels(), "panels [", first_panel,
            ", ", end_panel, ") are not within the ", out.num_panels(), " panels of the layer");
    require(row_order.empty() || row_order.size() == size_t(out.k), "row_order holds ", row_order.size(),
            " rows; expected ", out.k);
    // int32 and uint32 may alias: the words are read as the unsigned bit patterns they are.
    const auto* words = reinterpret_cast<const uint32_t*>(qweight);
    const int64_t full_blocks = row_order.empty() ? out.k / kBlockRows : 0;
    switch (out.bits) {
        case 2: pack_full_blocks<2>(words, full_blocks, first_panel, end_panel, out); break;
        case 3: pack_full_blocks<3>(words, full_blocks, first_panel, end_panel, out); break;
        case 4: pack_full_blocks<4>(words, full_blocks, first_panel, end_panel, out); break;
        case 8: pack_full_blocks<8>(words, full_blocks, first_panel, end_panel, out); break;
        default: fail(QJIT_ERROR_INVALID_ARGUMENT, "bits is ", out.bits, "; expected 2, 3, 4 or 8");
    }
    pack_rows(words, row_order, full_blocks * kBlockRows, first_panel, end_panel, out);
}

}  // namespace qjit
