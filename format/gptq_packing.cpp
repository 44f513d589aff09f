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

// For 2, 4 and 8 bits, packed word j of a column's 32-row block is a fixed bit permutation of
// GPTQ word j alone (row i of the block at bit Bits*i of the words read as one little-endian
// stream; packed: byte i % 4, field i / 4 of word i / (32 / Bits); format/code_planes.hpp), so
// whole rows of words convert elementwise, which the compiler vectorizes.
template <int Bits>
uint32_t convert_word(uint32_t x);

// 8 bits: row i is byte i of the stream in both layouts.
template <>
uint32_t convert_word<8>(uint32_t x) {
    return x;
}

// 4 bits: nibble i of a word goes to byte i % 4, nibble i / 4 of that byte.
template <>
uint32_t convert_word<4>(uint32_t x) {
    return nibbles_to_bytes(x & 0xFFFFu) | nibbles_to_bytes(x >> 16) << 4;
}

// 2 bits: field 4a + b of a word (byte a, field b) goes to byte b, field a: the transpose of a
// 4x4 matrix of 2-bit fields, as two delta swaps (the off-diagonal 2x2 blocks, then inside each).
template <>
uint32_t convert_word<2>(uint32_t x) {
    uint32_t t = (x ^ (x >> 12)) & 0x0000F0F0u;
    x ^= t ^ (t << 12);
    t = (x ^ (x >> 6)) & 0x00CC00CCu;
    return x ^ t ^ (t << 6);
}

// 3 bits: the 96-bit stream read a quad of rows (12 bits) at a time; quad q's low two bits go to
// field q % 4 of the bytes of word q / 4 (the 2-bit plane), its high bits to field q of word 2
// (the 1-bit plane).
void convert_three_bit_block(const uint32_t* in, uint32_t* out) {
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
[[gnu::always_inline]] inline void pack_full_blocks(const uint32_t* qweight, int64_t full_blocks, int64_t first_panel, int64_t end_panel,
                      PackedCodes& out) {
    const int64_t n = out.n, panel_columns = out.panel_columns;
    for (int64_t block = 0; block < full_blocks; ++block)
        for (int64_t panel = first_panel; panel < end_panel; ++panel) {
            const int64_t c0 = panel * panel_columns, width = std::min(panel_columns, n - c0);
            const uint32_t* in = qweight + block * Bits * n + c0;
            uint32_t* packed = out.words.data() + panel * out.panel_words() + block * Bits * panel_columns;
            if constexpr (Bits == 3) {
                for (int64_t c = 0; c < width; ++c) {
                    const uint32_t gptq_words[3] = {in[c], in[n + c], in[2 * n + c]};
                    uint32_t packed_words[3];
                    convert_three_bit_block(gptq_words, packed_words);
                    for (int j = 0; j < 3; ++j) packed[j * panel_columns + c] = packed_words[j];
                }
            } else {
                for (int j = 0; j < Bits; ++j) {
                    const uint32_t* source = in + j * n;
                    uint32_t* target = packed + j * panel_columns;
                    for (int64_t c = 0; c < width; ++c) target[c] = convert_word<Bits>(source[c]);
                }
            }
            for (int64_t c = width; c < panel_columns; ++c)  // the last panel's padding columns
                for (int j = 0; j < Bits; ++j) packed[j * panel_columns + c] = 0;
        }
}

// Storage rows [first_row, K) code by code, storage row r read from GPTQ row row_order[r] (r when
// row_order is empty), first_row a multiple of 32; their blocks are zeroed first. The loops over
// columns have only shifts and masks that are the same for the whole row, so they vectorize.
template <int Bits>
[[gnu::always_inline]] inline void pack_rows(const uint32_t* qweight, const std::vector<int32_t>& row_order, int64_t first_row,
               int64_t first_panel, int64_t end_panel, PackedCodes& out) {
    constexpr uint32_t kCodeMask = (1u << Bits) - 1u;
    const int64_t n = out.n, panel_columns = out.panel_columns;
    const std::vector<CodePlane> planes = code_planes(Bits);  // one plane; for 3 bits 2 + 1
    for (int64_t panel = first_panel; panel < end_panel; ++panel) {
        uint32_t* panel_words = out.words.data() + panel * out.panel_words();
        std::fill(panel_words + first_row / kBlockRows * Bits * panel_columns, panel_words + out.panel_words(), 0u);
    }
    for (int64_t row = first_row; row < out.k; ++row) {
        const int64_t source_row = row_order.empty() ? row : row_order[size_t(row)];
        const int64_t first_bit = source_row * Bits, word_row = first_bit / 32;
        const int shift = int(first_bit % 32);
        const bool straddles = shift + Bits > 32;  // 3 bits: the code's high bits are in the next word row
        const int64_t block = row / kBlockRows;
        const int row_in_block = int(row % kBlockRows);
        const PlaneSlot low_slot = plane_slot(planes.front(), row_in_block);
        const PlaneSlot high_slot = plane_slot(planes.back(), row_in_block);  // 3 bits: bit 2
        for (int64_t panel = first_panel; panel < end_panel; ++panel) {
            const int64_t c0 = panel * panel_columns, width = std::min(panel_columns, n - c0);
            const uint32_t* low_words = qweight + word_row * n + c0;
            const uint32_t* high_words = straddles ? low_words + n : low_words;
            uint32_t* block_words = out.words.data() + panel * out.panel_words() + block * Bits * panel_columns;
            uint32_t* low_plane = block_words + low_slot.word * panel_columns;
            uint32_t* high_plane = block_words + high_slot.word * panel_columns;
            auto place = [&](int64_t c, uint32_t code) {
                if constexpr (Bits == 3) {
                    low_plane[c] |= (code & 3u) << low_slot.shift;
                    high_plane[c] |= (code >> 2) << high_slot.shift;
                } else {
                    low_plane[c] |= code << low_slot.shift;
                }
            };
            if (!straddles)
                for (int64_t c = 0; c < width; ++c) place(c, (low_words[c] >> shift) & kCodeMask);
            else
                for (int64_t c = 0; c < width; ++c)
                    place(c, ((low_words[c] >> shift) | (high_words[c] << (32 - shift))) & kCodeMask);
        }
    }
}

template <int Bits>
[[gnu::always_inline]] inline void pack_panels(const uint32_t* qweight, const std::vector<int32_t>& row_order,
                                               int64_t first_panel, int64_t end_panel, PackedCodes& out) {
    const int64_t full_blocks = row_order.empty() ? out.k / kBlockRows : 0;
    pack_full_blocks<Bits>(qweight, full_blocks, first_panel, end_panel, out);
    pack_rows<Bits>(qweight, row_order, full_blocks * kBlockRows, first_panel, end_panel, out);
}

// Every width's packer, inlined into one function per instruction set: the library is built for
// baseline x86-64, and the helpers above vectorize with whatever the function they land in allows.
[[gnu::always_inline]] inline void pack_words(const uint32_t* words, const std::vector<int32_t>& row_order,
                                              int64_t first_panel, int64_t end_panel, PackedCodes& out) {
    switch (out.bits) {
        case 2: return pack_panels<2>(words, row_order, first_panel, end_panel, out);
        case 3: return pack_panels<3>(words, row_order, first_panel, end_panel, out);
        case 4: return pack_panels<4>(words, row_order, first_panel, end_panel, out);
        default: return pack_panels<8>(words, row_order, first_panel, end_panel, out);
    }
}

using PackWords = void (*)(const uint32_t*, const std::vector<int32_t>&, int64_t, int64_t, PackedCodes&);

__attribute__((target("avx512f"))) void pack_words_avx512(const uint32_t* words, const std::vector<int32_t>& row_order,
                                                          int64_t first_panel, int64_t end_panel, PackedCodes& out) {
    pack_words(words, row_order, first_panel, end_panel, out);
}

__attribute__((target("avx2"))) void pack_words_avx2(const uint32_t* words, const std::vector<int32_t>& row_order,
                                                    int64_t first_panel, int64_t end_panel, PackedCodes& out) {
    pack_words(words, row_order, first_panel, end_panel, out);
}

void pack_words_baseline(const uint32_t* words, const std::vector<int32_t>& row_order, int64_t first_panel,
                         int64_t end_panel, PackedCodes& out) {
    pack_words(words, row_order, first_panel, end_panel, out);
}

// Chosen on first use, not by an ifunc resolver: resolvers run before the sanitizers' runtimes
// are up (ThreadSanitizer crashes in one).
PackWords best_packer() {
    if (__builtin_cpu_supports("avx512f")) return pack_words_avx512;
    if (__builtin_cpu_supports("avx2")) return pack_words_avx2;
    return pack_words_baseline;
}

}  // namespace

void pack_gptq_panels(const int32_t* qweight, const std::vector<int32_t>& row_order, int64_t first_panel,
                      int64_t end_panel, PackedCodes& out) {
    require(first_panel >= 0 && first_panel <= end_panel && end_panel <= out.num_panels(), "panels [", first_panel,
            ", ", end_panel, ") are not within the ", out.num_panels(), " panels of the layer");
    require(row_order.empty() || row_order.size() == size_t(out.k), "row_order holds ", row_order.size(),
            " rows; expected ", out.k);
    require(out.bits == 2 || out.bits == 3 || out.bits == 4 || out.bits == 8, "bits is ", out.bits,
            "; expected 2, 3, 4 or 8");
    static const PackWords pack = best_packer();
    // int32 and uint32 may alias: the words are read as the unsigned bit patterns they are.
    pack(reinterpret_cast<const uint32_t*>(qweight), row_order, first_panel, end_panel, out);
}

}  // namespace qjit
