// How quantized codes are split into bit planes inside a packed 32-row block. Shared by the
// packer (format/packed_codes) and every kernel that unpacks codes, so both agree by construction.
//
// A block holds 32 rows of one column in `bits` uint32 words. Each plane of width w (1, 2, 4 or 8
// bits) takes 32*w/32 = w words; a word holds 32/w rows. Inside a word, row r (0 .. 32/w - 1) sits
// in byte r % 4, field r / 4 (bits w*(r/4) .. w*(r/4)+w-1 of that byte): the four rows of a "quad"
// share a field index and lie in consecutive bytes, which is the operand layout of vpdpbusd
// (four u8 values per 32-bit lane) and lets one shift and one mask unpack a quad for 16 columns.
//   2-bit: one 2-bit plane.   4-bit: one 4-bit plane.   8-bit: one 8-bit plane (plain bytes).
//   3-bit: a 2-bit plane (low bits, words 0-1) and a 1-bit plane (bit 2, word 2): 96 bits per 32
//          codes, nothing wasted.
//   5-bit: a 4-bit plane (words 0-3) and a 1-bit plane (bit 4, word 4).
//   6-bit: a 4-bit plane (words 0-3) and a 2-bit plane (bits 4-5, words 4-5).
#pragma once

#include <vector>

namespace qjit {

struct CodePlane {
    int width;        // bits of the code this plane holds
    int value_shift;  // position of those bits in the code
    int first_word;   // word offset of the plane inside a 32-row block
    int rows_per_word() const { return 32 / width; }
};

// The width of a code's low plane: the whole code at 2, 4 and 8 bits.
constexpr int low_plane_width(int bits) { return bits == 3 ? 2 : bits == 5 || bits == 6 ? 4 : bits; }

// The planes of a code: the low plane from word 0, then, for 3, 5 and 6 bits, the rest of the code
// in a second plane right after it (the low plane of width w takes w words).
inline std::vector<CodePlane> code_planes(int bits) {
    const int low = low_plane_width(bits);
    if (low == bits) return {{bits, 0, 0}};
    return {{low, 0, 0}, {bits - low, low, low}};
}

// Word (within the block) and bit offset (within the word) of row r's bits in `plane`.
struct PlaneSlot {
    int word;
    int shift;
};
inline PlaneSlot plane_slot(const CodePlane& plane, int r) {
    const int row_in_word = r % plane.rows_per_word();
    return {plane.first_word + r / plane.rows_per_word(), 8 * (row_in_word % 4) + plane.width * (row_in_word / 4)};
}

}  // namespace qjit
