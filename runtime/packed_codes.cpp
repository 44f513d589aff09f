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

uint8_t PackedCodes::code(int64_t row, int64_t column) const {
    const int64_t block = row / kBlockRows;
    const int r = int(row % kBlockRows);
    const uint32_t* base = &words[size_t(block * bits * n + column)];
    const BitSlot s = slot_of(bits, r);
    if (bits == 3) {
        const uint32_t low = (base[s.word * n] >> s.shift) & 3u;
        const uint32_t high = (base[2 * n] >> r) & 1u;
        return uint8_t(low | (high << 2));
    }
    return uint8_t((base[s.word * n] >> s.shift) & ((1u << bits) - 1u));
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
        uint32_t* base = &out.words[size_t(block * bits * n)];
        const uint8_t* src = codes + row * n;
        for (int64_t c = 0; c < n; ++c) {
            const uint32_t q = src[c];
            if (bits == 3) {
                base[s.word * n + c] |= (q & 3u) << s.shift;
                base[2 * n + c] |= (q >> 2) << r;
            } else {
                base[s.word * n + c] |= q << s.shift;
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
