#include "format/cuda_weights.hpp"

#include <algorithm>
#include <cstring>

#include "format/cuda_code_layout.hpp"
#include "base/half.hpp"

namespace qjit {

using cuda_layout::kCodesPerBlock;

namespace {

// Writes the 32 codes of one block (code(i) for i < 32) into `words` per cuda_code_layout.hpp.
template <typename CodeAt>
void pack_block(int bits, CodeAt code, uint32_t* words) {
    using namespace cuda_layout;
    for (int p = 0; p < regular_pairs(bits); ++p) {
        const int word = pair_word(bits, p), shift = pair_shift(bits, p);
        words[word] |= uint32_t(code(2 * p)) << shift | uint32_t(code(2 * p + 1)) << (16 + shift);
    }
    for (int p = regular_pairs(bits); p < kPairsPerBlock; ++p) {
        const SparePieces pieces = spare_pieces(bits, p);
        for (int i = 0; i < pieces.count; ++i) {
            const SparePiece& piece = pieces.piece[i];
            const uint32_t mask = (1u << piece.length) - 1;
            words[piece.word] |= (uint32_t(code(2 * p)) >> piece.to & mask) << piece.from |
                                 (uint32_t(code(2 * p + 1)) >> piece.to & mask) << (16 + piece.from);
        }
    }
}

}  // namespace

void pack_cuda_block(int bits, const uint8_t (&codes)[32], uint32_t* words) {
    std::fill(words, words + bits, 0u);
    pack_block(bits, [&](int i) { return codes[i]; }, words);
}

std::vector<uint32_t> pack_block_codes(const QuantizedMatrix& matrix) {
    const QuantParams& p = matrix.params;
    const int64_t kp = cuda_layout::padded_k(p.k), np = cuda_layout::padded_n(p.n);
    const int64_t column_words = kp / kCodesPerBlock * p.bits;
    std::vector<uint32_t> codes(size_t(np * column_words), 0);
    // A 32-row block of 64 columns at a time, read row by row into a transposed tile: reading a
    // column's 32 codes straight from the [k][n] array touches 32 cache lines per column.
    constexpr int64_t kTileColumns = 64;
    uint8_t tile[kTileColumns][kCodesPerBlock];
    for (int64_t block = 0; block < kp / kCodesPerBlock; ++block)
        for (int64_t c0 = 0; c0 < p.n; c0 += kTileColumns) {
            const int64_t width = std::min(kTileColumns, p.n - c0);
            for (int i = 0; i < kCodesPerBlock; ++i) {
                const int64_t row = block * kCodesPerBlock + i;
                const uint8_t* source = row < p.k ? &matrix.codes[size_t(row * p.n + c0)] : nullptr;
                for (int64_t c = 0; c < width; ++c) tile[c][i] = source ? source[c] : 0;
            }
            for (int64_t c = 0; c < width; ++c)
                pack_block(p.bits, [&](int i) { return tile[c][i]; },
                           &codes[size_t((c0 + c) * column_words + block * p.bits)]);
        }
    return codes;
}

CudaWeights pack_cuda_weights(const QuantizedMatrix& matrix) {
    CudaWeights w = pack_cuda_metadata(matrix);
    w.codes = pack_block_codes(matrix);
    return w;
}

namespace {

// fp16 d [super-blocks][np], then 8-bit codes [num_groups][np]: `d` [super-blocks][n] and `codes`
// [num_groups][n], with zero padding columns.
template <typename Code>
std::vector<uint8_t> super_block_array(const QuantParams& p, int64_t np, const std::vector<uint16_t>& d,
                                       const std::vector<Code>& codes) {
    const int64_t supers = p.k / kSuperBlockRows, groups = p.num_groups();
    std::vector<uint8_t> bytes(size_t((supers * 2 + groups) * np), 0);
    uint8_t* code_bytes = bytes.data() + supers * np * 2;
    for (int64_t c = 0; c < p.n; ++c) {
        for (int64_t s = 0; s < supers; ++s) std::memcpy(&bytes[size_t((s * np + c) * 2)], &d[size_t(s * p.n + c)], 2);
        for (int64_t g = 0; g < groups; ++g) code_bytes[g * np + c] = uint8_t(codes[size_t(g * p.n + c)]);
    }
    return bytes;
}

}  // namespace

CudaWeights pack_cuda_metadata(const QuantizedMatrix& matrix) {
    const QuantParams& p = matrix.params;
    CudaWeights w;
    w.bits = p.bits, w.k = p.k, w.n = p.n;
    w.kp = cuda_layout::padded_k(p.k), w.np = cuda_layout::padded_n(p.n);
    w.num_groups = p.num_groups();
    if (p.super_block_scales()) {  // the file's codes and d (dmin): the kernels form the products
        w.super_block = true, w.f16_scales = false;
        w.super_block_scales = super_block_array(p, w.np, p.super_block.scales, p.super_block.scale_codes);
        if (p.float_offsets)
            w.super_block_offsets = super_block_array(p, w.np, p.super_block.mins, p.super_block.min_codes);
        return w;
    }
    w.f16_scales = scales_and_offsets_exact_in_f16(p);

    const size_t metadata = size_t(w.num_groups * w.np);
    auto place = [&](const std::vector<float>& from, std::vector<uint16_t>& to_f16, std::vector<float>& to_f32) {
        if (w.f16_scales) to_f16.assign(metadata, 0);
        else to_f32.assign(metadata, 0.f);
        for (int64_t g = 0; g < w.num_groups; ++g)
            for (int64_t col = 0; col < p.n; ++col) {
                const float value = from[size_t(g * p.n + col)];
                const size_t to = size_t(g * w.np + col);
                if (w.f16_scales) to_f16[to] = float_to_half(value);
                else to_f32[to] = value;
            }
    };
    place(p.scales, w.scales_f16, w.scales_f32);
    if (p.float_offsets) {
        place(p.offsets, w.offsets_f16, w.offsets_f32);
    } else if (!p.symmetric) {
        w.zeros.assign(metadata, 0);
        for (int64_t g = 0; g < w.num_groups; ++g)
            for (int64_t col = 0; col < p.n; ++col) w.zeros[size_t(g * w.np + col)] = p.zeros[size_t(g * p.n + col)];
    }
    return w;
}

const void* CudaWeights::scale_data() const {
    if (super_block) return super_block_scales.data();
    return f16_scales ? static_cast<const void*>(scales_f16.data()) : scales_f32.data();
}

int64_t CudaWeights::scale_bytes() const {
    return int64_t(super_block_scales.size() + scales_f16.size() * 2 + scales_f32.size() * 4);
}

const void* CudaWeights::zero_point_data() const {
    if (!super_block_offsets.empty()) return super_block_offsets.data();
    if (!offsets_f16.empty()) return offsets_f16.data();
    if (!offsets_f32.empty()) return offsets_f32.data();
    return zeros.empty() ? nullptr : zeros.data();
}

int64_t CudaWeights::zero_point_bytes() const {
    return int64_t(super_block_offsets.size() + offsets_f16.size() * 2 + offsets_f32.size() * 4 + zeros.size() * 2);
}

namespace {

// Code i of a block whose word j is word(j).
template <typename WordAt>
int unpack_block_code(int bits, WordAt word, int i) {
    using namespace cuda_layout;
    const int pair = i / 2, half = 16 * (i % 2);
    if (pair < regular_pairs(bits))
        return int(word(pair_word(bits, pair)) >> (pair_shift(bits, pair) + half)) & ((1 << bits) - 1);
    int code = 0;
    const SparePieces pieces = spare_pieces(bits, pair);
    for (int j = 0; j < pieces.count; ++j) {
        const SparePiece& piece = pieces.piece[j];
        code |= int(word(piece.word) >> (piece.from + half) & ((1u << piece.length) - 1)) << piece.to;
    }
    return code;
}

}  // namespace

int unpack_cuda_code(const CudaWeights& w, int64_t row, int64_t column) {
    const int64_t column_words = w.kp / kCodesPerBlock * w.bits;
    const uint32_t* block = &w.codes[size_t(column * column_words + row / kCodesPerBlock * w.bits)];
    return unpack_block_code(w.bits, [&](int j) { return block[j]; }, int(row % kCodesPerBlock));
}

std::vector<uint32_t> pack_fragment_codes(const QuantizedMatrix& matrix) {
    using namespace cuda_layout;
    const QuantParams& p = matrix.params;
    const int64_t steps = padded_k(p.k) / kFragmentStepK, tiles = padded_n(p.n) / kFragmentTileN;
    std::vector<uint32_t> codes(size_t(tiles * steps * p.bits * 32), 0);
    std::vector<uint32_t> block(size_t(p.bits));
    for (int64_t tile = 0; tile < tiles; ++tile)
        for (int64_t step = 0; step < steps; ++step)
            for (int lane = 0; lane < 32; ++lane) {
                const int64_t col = fragment_column(tile, lane);
                auto code = [&](int i) -> uint8_t {
                    const int64_t row = fragment_row(step, lane, i);
                    return row < p.k && col < p.n ? matrix.codes[size_t(row * p.n + col)] : 0;
                };
                std::fill(block.begin(), block.end(), 0u);
                pack_block(p.bits, code, block.data());
                for (int j = 0; j < p.bits; ++j) codes[size_t(((tile * steps + step) * 32 + lane) * p.bits + j)] = block[size_t(j)];
            }
    return codes;
}

int unpack_fragment_code(const std::vector<uint32_t>& codes, int bits, int64_t kp, int64_t row, int64_t column) {
    using namespace cuda_layout;
    const int64_t steps = kp / kFragmentStepK, tile = column / kFragmentTileN, step = row / kFragmentStepK;
    const int r = int(row % kFragmentStepK), lane = 4 * int(column % kFragmentTileN) + r / 32;
    const uint32_t* words = &codes[size_t(((tile * steps + step) * 32 + lane) * bits)];
    return unpack_block_code(bits, [&](int j) { return words[j]; }, r % 32);
}


bool scales_and_offsets_exact_in_f16(const QuantParams& params) {
    if (params.f16_scales()) return true;  // float offsets are exact at the scales' type
    auto exact = [](const std::vector<float>& values) {
        for (float v : values)
            if (round_to_half(v) != v) return false;
        return true;
    };
    return exact(params.scales) && exact(params.offsets);
}

}  // namespace qjit
