#include "runtime/packed_codes.hpp"

namespace qjit {

namespace {

struct BitSlot {
    int word;   // word within the row's block
    int shift;  // bit offset within that word
};

// Where the low `bits` (or, for 3-bit, the low two) bits of row r (within its block) live.
BitSlot slot_of(int bits, int r) {
    if (bits == 3) return {r / 16, 2 * (r % 16)};
    const int per_word = 32 / bits;
    return {r / per_word, bits * (r % per_word)};
}

}  // namespace

size_t PackedCodes::word_index(int64_t block, int word, int64_t column) const {
    const int64_t n0 = column / kPanelColumns * kPanelColumns;
    return size_t(n0 * num_blocks() * bits + (block * bits + word) * panel_width(n0) + (column - n0));
}

uint8_t PackedCodes::code(int64_t row, int64_t column) const {
    const int64_t block = row / kBlockRows;
    const int r = int(row % kBlockRows);
    const BitSlot s = slot_of(bits, r);
    const uint32_t word = words[word_index(block, s.word, column)];
    if (bits == 3) {
        const uint32_t high = (words[word_index(block, 2, column)] >> r) & 1u;
        return uint8_t(((word >> s.shift) & 3u) | (high << 2));
    }
    return uint8_t((word >> s.shift) & ((1u << bits) - 1u));
}

PackedCodes pack_codes(const uint8_t* codes, int bits, int64_t k, int64_t n) {
    PackedCodes out;
    out.bits = bits;
    out.k = k;
    out.n = n;
    out.words.assign(PackedCodes::word_count(bits, k, n), 0u);
    for (int64_t row = 0; row < k; ++row) {
        const int64_t block = row / PackedCodes::kBlockRows;
        const int r = int(row % PackedCodes::kBlockRows);
        const BitSlot s = slot_of(bits, r);
        const uint8_t* src = codes + row * n;
        for (int64_t c = 0; c < n; ++c) {
            const uint32_t q = src[c];
            if (bits == 3) {
                out.words[out.word_index(block, s.word, c)] |= (q & 3u) << s.shift;
                out.words[out.word_index(block, 2, c)] |= (q >> 2) << r;
            } else {
                out.words[out.word_index(block, s.word, c)] |= q << s.shift;
            }
        }
    }
    return out;
}

std::vector<uint8_t> unpack_codes(const PackedCodes& packed) {
    std::vector<uint8_t> codes(size_t(packed.k * packed.n));
    for (int64_t row = 0; row < packed.k; ++row)
        for (int64_t c = 0; c < packed.n; ++c) codes[size_t(row * packed.n + c)] = packed.code(row, c);
    return codes;
}

}  // namespace qjit
