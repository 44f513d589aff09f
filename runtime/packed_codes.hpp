// The packed code layout the portable kernel streams ("kblock32").
//
// Rows are taken in blocks of 32 (the last block zero-padded). A block stores `bits` uint32 words
// per column, block-major then word then column: words[(block * bits + word) * n + column], so a
// kernel reading one word row touches n consecutive words.
//   bits 2, 4, 8: word w holds rows w*(32/bits) .. +32/bits-1, row i of the word at bit bits*i.
//   bits 3:       two 2-bit planes (words 0 and 1: low two bits of rows 0..15 and 16..31) and one
//                 1-bit plane (word 2: the high bit of rows 0..31). 96 bits per 32 codes: no waste,
//                 and both planes unpack with shifts and masks only.
#pragma once

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
    int64_t num_blocks() const { return (k + kBlockRows - 1) / kBlockRows; }
    static size_t word_count(int bits, int64_t k, int64_t n) {
        return size_t((k + kBlockRows - 1) / kBlockRows * bits * n);
    }
    uint8_t code(int64_t row, int64_t column) const;
};

// codes: [k][n], each below 2^bits.
PackedCodes pack_codes(const uint8_t* codes, int bits, int64_t k, int64_t n);
std::vector<uint8_t> unpack_codes(const PackedCodes& packed);

}  // namespace qjit
