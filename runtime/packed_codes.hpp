// The packed code layout the portable kernel streams ("kblock32_n64").
//
// Columns are split into panels of 64 (the last one narrower) and each panel is stored whole, so
// a thread working on a panel reads one contiguous stream. Within a panel of width w, rows are
// taken in blocks of 32 (the last block zero-padded) and a block stores `bits` uint32 words per
// column: words[panel_start + (block * bits + word) * w + column_in_panel], where panel_start =
// n0 * num_blocks * bits for the panel's first column n0.
//   bits 2, 4, 8: word w holds rows w*(32/bits) .. +32/bits-1, row i of the word at bit bits*i.
//   bits 3:       two 2-bit planes (words 0 and 1: low two bits of rows 0..15 and 16..31) and one
//                 1-bit plane (word 2: the high bit of rows 0..31). 96 bits per 32 codes: no waste,
//                 and both planes unpack with shifts and masks only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace qjit {

struct PackedCodes {
    int bits = 0;
    int64_t k = 0;
    int64_t n = 0;
    std::vector<uint32_t> words;

    static constexpr int kBlockRows = 32;
    static constexpr int kPanelColumns = 64;
    static constexpr const char* kLayoutName = "kblock32_n64";

    int64_t num_blocks() const { return (k + kBlockRows - 1) / kBlockRows; }
    int64_t panel_width(int64_t n0) const { return std::min<int64_t>(kPanelColumns, n - n0); }
    // First word of the panel that starts at column n0 (a multiple of kPanelColumns).
    const uint32_t* panel(int64_t n0) const { return words.data() + n0 * num_blocks() * bits; }
    static size_t word_count(int bits, int64_t k, int64_t n) {
        return size_t((k + kBlockRows - 1) / kBlockRows * bits * n);
    }
    size_t word_index(int64_t block, int word, int64_t column) const;
    uint8_t code(int64_t row, int64_t column) const;
};

// codes: [k][n], each below 2^bits.
PackedCodes pack_codes(const uint8_t* codes, int bits, int64_t k, int64_t n);
std::vector<uint8_t> unpack_codes(const PackedCodes& packed);

}  // namespace qjit
