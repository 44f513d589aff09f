#include "format/packed_codes.hpp"

#include "format/code_planes.hpp"

namespace qjit {

namespace {

// Index of word `word` of row block `block` for `column`.
size_t word_index(const PackedCodes& p, int64_t block, int word, int64_t column) {
    const int64_t panel = column / p.panel_columns;
    return size_t(panel * p.panel_words() + (block * p.bits + word) * p.panel_columns + column % p.panel_columns);
}

}  // namespace

uint8_t PackedCodes::code(int64_t row, int64_t column) const {
    const int64_t block = row / kBlockRows;
    const int r = int(row % kBlockRows);
    uint32_t code = 0;
    for (const jit::CodePlane& plane : jit::code_planes(bits)) {
        const jit::PlaneSlot slot = jit::plane_slot(plane, r);
        const uint32_t field = (words[word_index(*this, block, slot.word, column)] >> slot.shift) &
                               ((1u << plane.width) - 1u);
        code |= field << plane.value_shift;
    }
    return uint8_t(code);
}

PackedCodes pack_codes(const uint8_t* codes, int bits, int64_t k, int64_t n, int panel_columns) {
    PackedCodes out;
    out.bits = bits;
    out.k = k;
    out.n = n;
    out.panel_columns = panel_columns;
    out.words.assign(PackedCodes::word_count(bits, k, n, panel_columns), 0u);
    const std::vector<jit::CodePlane> planes = jit::code_planes(bits);
    for (int64_t row = 0; row < k; ++row) {
        const int64_t block = row / PackedCodes::kBlockRows;
        const int r = int(row % PackedCodes::kBlockRows);
        for (const jit::CodePlane& plane : planes) {
            const jit::PlaneSlot slot = jit::plane_slot(plane, r);
            const uint32_t mask = (1u << plane.width) - 1u;
            for (int64_t c = 0; c < n; ++c) {
                const uint32_t field = (uint32_t(codes[row * n + c]) >> plane.value_shift) & mask;
                out.words[word_index(out, block, slot.word, c)] |= field << slot.shift;
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
