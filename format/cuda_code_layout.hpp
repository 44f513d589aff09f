// Where each code sits in the device's packed 32-code blocks: the one table both the host packer
// (format/cuda_weights.cpp) and the source generator (jit/cuda/cuda_source.cpp) follow.
//
// A block holds 32 consecutive codes of one column in `bits` 32-bit words. Codes are handled in 16
// pairs (2p, 2p+1): the even code sits at bit `shift` of its word, the odd one at bit 16 + shift,
// so one AND/OR (lop3) with 0x64006400 turns a pair into two fp16 numbers 1024 + code.
//   2, 4, 8 bits: word p / (16 / bits), shift bits * (p % (16 / bits)).
//   3 bits: pairs 0..14 in words p / 5 at shift 3 * (p % 5), which leaves bits 15 and 31 of each
//   word free; those six bits hold pair 15 (codes 30 and 31), so no bit is wasted:
//   code 30 = w0[15] | w0[31] << 1 | w1[15] << 2,   code 31 = w1[31] | w2[15] << 1 | w2[31] << 2.
#pragma once

#include <cstdint>

namespace qjit::cuda_layout {

// Rows of K per packed block.
inline constexpr int kCodesPerBlock = 32;
// K and N as the device stores them: K padded to a multiple of 256 (the largest GEMM block_k), N
// to a multiple of 256 (the largest block_n), so no kernel ever reads past the arrays.
inline constexpr int64_t kPaddingK = 256, kPaddingN = 256;
inline constexpr int64_t padded_k(int64_t k) { return (k + kPaddingK - 1) / kPaddingK * kPaddingK; }
inline constexpr int64_t padded_n(int64_t n) { return (n + kPaddingN - 1) / kPaddingN * kPaddingN; }


inline constexpr int kPairsPerBlock = 16;

// Pairs packed at regular positions (all 16 for 2/4/8 bits, the first 15 for 3 bits).
inline constexpr int regular_pairs(int bits) { return bits == 3 ? 15 : kPairsPerBlock; }
inline constexpr int pairs_per_word(int bits) { return bits == 3 ? 5 : 16 / bits; }
inline constexpr int pair_word(int bits, int pair) { return pair / pairs_per_word(bits); }
inline constexpr int pair_shift(int bits, int pair) { return bits * (pair % pairs_per_word(bits)); }

// 3-bit pair 15: bit b of code 30 + i (i = 0, 1) is bit kSpareBit[i][b] of word kSpareWord[i][b].
inline constexpr int kSpareWord[2][3] = {{0, 0, 1}, {1, 2, 2}};
inline constexpr int kSpareBit[2][3] = {{15, 31, 15}, {31, 15, 31}};

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
