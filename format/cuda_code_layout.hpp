// Where each code sits in the device's packed 32-code blocks: the one table both the host packer
// (format/cuda_weights.cpp) and the source generator (jit/cuda/cuda_source_writer.cpp) follow.
//
// A block holds 32 consecutive codes of one column in `bits` 32-bit words: 2, 3, 4, 5, 6 or 8
// bits per code, every bit used. Codes are handled in 16 pairs (2p, 2p+1): the even code sits at
// bit `shift` of a half-word, the odd one at the same bit of the other half (16 + shift), so one
// AND/OR (lop3) with 0x64006400 turns a pair into two fp16 numbers 1024 + code.
//   Regular pairs: a word holds 16 / bits of them, pair p in word p / (16 / bits) at shift
//   bits * (p % (16 / bits)). At 2, 4 and 8 bits these are all 16 pairs.
//   Spare pairs: at 3, 5 and 6 bits the top 16 % bits bits of each half-word (1, 1 and 4) are
//   left over, exactly enough for the remaining pairs (pair 15 at 3 and 5 bits, pairs 12-15 at 6
//   bits). The low half-words' spare bits, word 0's first and each word's from its lowest up, form
//   one stream holding the even codes of the spare pairs one after another, lowest bit first; the
//   high half-words' spare bits hold the odd codes at the same places. A run of a code's bits in
//   one word (a "piece") lies at the same place in both halves, so one shift and one lop3 move it
//   into place for both codes of the pair.
// Why packed words rather than the CPU's bit planes (format/code_planes.hpp: 5 = 4 + 1, 6 = 4 + 2):
// a regular pair decodes with one shift and one lop3, and a spare pair with one of each per piece
// (5 at 5 bits, 2 per pair at 6), so a 5- or 6-bit block costs about 40 operations, where planes
// cost two of each for every pair (about 64). Each width keeps 32 codes in `bits` whole words, as the GEMV's
// 16-byte loads, the GEMM's cp.async chunks and the mma kernel's fragment order need.
#pragma once

#include <algorithm>
#include <cstdint>

namespace qjit::cuda_layout {

// Rows of K per packed block.
inline constexpr int kCodesPerBlock = 32;
// K and N as the device stores them: K padded to a multiple of 256 (the largest GEMM block_k), N
// to a multiple of 256 (the largest block_n), so no kernel ever reads past the arrays.
inline constexpr int64_t kPaddingK = 256, kPaddingN = 256;
inline constexpr int64_t padded_k(int64_t k) { return (k + kPaddingK - 1) / kPaddingK * kPaddingK; }
inline constexpr int64_t padded_n(int64_t n) { return (n + kPaddingN - 1) / kPaddingN * kPaddingN; }

// The code widths the device layout holds.
inline constexpr bool is_device_width(int bits) {
    return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
}

inline constexpr int kPairsPerBlock = 16;

// Pairs at regular positions (all 16 at 2/4/8 bits, 15 at 3 and 5 bits, 12 at 6 bits).
inline constexpr int pairs_per_word(int bits) { return 16 / bits; }
inline constexpr int regular_pairs(int bits) { return bits * pairs_per_word(bits); }
inline constexpr int pair_word(int bits, int pair) { return pair / pairs_per_word(bits); }
inline constexpr int pair_shift(int bits, int pair) { return bits * (pair % pairs_per_word(bits)); }

// Spare bits per half-word (as many as spare pairs), from bit first_spare_bit(bits) up.
inline constexpr int spare_bits(int bits) { return kPairsPerBlock - regular_pairs(bits); }
inline constexpr int first_spare_bit(int bits) { return 16 - spare_bits(bits); }

// Bits `to .. to + length - 1` of a spare pair's codes are bits `from ..` of word `word`'s low
// half-word (the even code) and high half-word (the odd code, 16 higher).
struct SparePiece {
    int word, from, to, length;
};
struct SparePieces {
    SparePiece piece[8] = {};
    int count = 0;
};
// The pieces of spare pair `pair` (regular_pairs(bits) <= pair < 16), lowest code bits first.
inline constexpr SparePieces spare_pieces(int bits, int pair) {
    SparePieces out;
    const int per_word = spare_bits(bits), start = (pair - regular_pairs(bits)) * bits;
    for (int bit = 0; bit < bits;) {
        const int at = start + bit, word = at / per_word, offset = at % per_word;
        const int length = std::min(bits - bit, per_word - offset);
        out.piece[out.count++] = {word, first_spare_bit(bits) + offset, bit, length};
        bit += length;
    }
    return out;
}

// Every spare piece lies inside the block's `bits` words, at every width.
inline constexpr bool spare_pieces_fit(int bits) {
    for (int pair = regular_pairs(bits); pair < kPairsPerBlock; ++pair) {
        const SparePieces pieces = spare_pieces(bits, pair);
        for (int i = 0; i < pieces.count; ++i)
            if (pieces.piece[i].word >= bits || pieces.piece[i].from + pieces.piece[i].length > 16) return false;
    }
    return true;
}
static_assert(spare_pieces_fit(2) && spare_pieces_fit(3) && spare_pieces_fit(4) && spare_pieces_fit(5) &&
              spare_pieces_fit(6) && spare_pieces_fit(8));

// Fragment order, the second device layout (read by the tensor-core "mma" kernel). A warp's unit
// is a tile of 8 columns by 128 rows (a "step"). Lane l (t = l % 4, g = l / 4) holds one ordinary
// 32-code block (the layout above): rows 128 * step + 32 * t .. + 31 of column 8 * tile + g.
// The kernel feeds block pair p to mma.m16n8k16 as register b(p % 2) of k16 slice p / 2, with the
// activations permuted to match (slice kk, slot 2t + j (+8) <- row 32t + 4kk + j (+2)): a dot
// product does not care which k goes where, so each lane reads 32 consecutive activations of a row
// with 16-byte loads and each lane's block lies in one group. Words are stored
//   [tile][step][lane][word]  (tile = column / 8, step = row / 128, lane < 32, word < bits),
// so a warp's loads of one step read 128 * bits contiguous bytes.
inline constexpr int kFragmentTileN = 8;
inline constexpr int kFragmentStepK = 128;
inline constexpr int64_t fragment_row(int64_t step, int lane, int code) {
    return step * kFragmentStepK + 32 * (lane % 4) + code;
}
inline constexpr int64_t fragment_column(int64_t tile, int lane) { return tile * kFragmentTileN + lane / 4; }

}  // namespace qjit::cuda_layout
