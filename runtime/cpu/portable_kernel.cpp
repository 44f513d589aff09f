#include "runtime/cpu/portable_kernel.hpp"

#include "format/code_planes.hpp"

#include <algorithm>
#include <cstring>

namespace qjit {

namespace {

constexpr int kPanel = PortableTiling::kChunkColumns;
constexpr int kRows = PortableTiling::kBatchRows;

// Where a column chunk's codes live: the 32-row blocks of one panel, starting at the chunk's column.
struct ChunkCodes {
    const uint32_t* first;      // word 0 of block 0 for the chunk's first column
    int64_t stride;             // words between consecutive word rows (the panel width)
    const PackedCodes* packed;  // where each block starts (blocks of mixed widths)
};

// Decodes row `row` of a column chunk into floats (layout: packed_codes.hpp, format/code_planes.hpp).
template <int Bits>
inline void decode_row(const ChunkCodes& chunk, int64_t row, int width, float* out) {
    const int r = int(row % PackedCodes::kBlockRows);
    const uint32_t* block = chunk.first + chunk.packed->block_start(row / PackedCodes::kBlockRows) * chunk.stride;
    if constexpr (Bits == 3) {
        const jit::PlaneSlot low = jit::plane_slot({2, 0, 0}, r), high = jit::plane_slot({1, 2, 2}, r);
        const uint32_t* low_words = block + low.word * chunk.stride;
        const uint32_t* high_words = block + high.word * chunk.stride;
        for (int j = 0; j < width; ++j)
            out[j] = float(((low_words[j] >> low.shift) & 3u) | (((high_words[j] >> high.shift) & 1u) << 2));
    } else {
        const jit::PlaneSlot slot = jit::plane_slot({Bits, 0, 0}, r);
        const uint32_t* words = block + slot.word * chunk.stride;
        for (int j = 0; j < width; ++j) out[j] = float((words[j] >> slot.shift) & ((1u << Bits) - 1u));
    }
}

// The same for a width known at run time (a mixed layer's group): 2 or 4 bits.
inline void decode_mixed_row(int bits, const ChunkCodes& chunk, int64_t row, int width, float* out) {
    if (bits == 2) decode_row<2>(chunk, row, width, out);
    else decode_row<4>(chunk, row, width, out);
}

// One column panel for Rows activation rows (Bits 0: each group at its own width). Per group, with s and z the group's scale and zero:
// sum_r x_r * s * (q_r - z) = s * (sum_r x_r q_r - z * sum_r x_r), so the inner loop only
// multiplies raw codes and the scale and zero are applied once per group. Rows, and the width of
// a full panel, are compile-time constants so the compiler can unroll and vectorize.
template <int Bits, int Rows, int FixedWidth>
void forward_panel(const QuantParams& p, const ChunkCodes& codes, const float* x, float* y, int64_t n0,
                   int runtime_width) {
    const int width = FixedWidth > 0 ? FixedWidth : runtime_width;
    float q[kPanel];
    float dot[Rows][kPanel];
    float out[Rows][kPanel] = {};
    for (int64_t r0 = 0, g = 0; r0 < p.k; r0 += p.group_size, ++g) {
        const int64_t r1 = std::min(p.k, r0 + p.group_size);
        float x_sum[Rows] = {};
        std::memset(dot, 0, sizeof dot);
        for (int64_t r = r0; r < r1; ++r) {
            if constexpr (Bits == 0) decode_mixed_row(p.group_width(g), codes, r, width, q);
            else decode_row<Bits>(codes, r, width, q);
            for (int i = 0; i < Rows; ++i) {
                const float xv = x[i * p.k + r];
                x_sum[i] += xv;
                for (int j = 0; j < width; ++j) dot[i][j] += xv * q[j];
            }
        }
        const float* scale = &p.scales[size_t(g * p.n + n0)];
        const uint16_t* zero = &p.zeros[size_t(g * p.n + n0)];
        for (int i = 0; i < Rows; ++i)
            for (int j = 0; j < width; ++j) out[i][j] += scale[j] * (dot[i][j] - float(zero[j]) * x_sum[i]);
    }
    for (int i = 0; i < Rows; ++i) std::memcpy(y + i * p.n + n0, out[i], sizeof(float) * size_t(width));
}

template <int Bits, int Rows>
void forward_panel(const QuantParams& p, const ChunkCodes& codes, const float* x, float* y, int64_t n0, int width) {
    if (width == kPanel) forward_panel<Bits, Rows, kPanel>(p, codes, x, y, n0, width);
    else forward_panel<Bits, Rows, 0>(p, codes, x, y, n0, width);
}

template <int Bits>
void forward_panel(const QuantParams& p, const ChunkCodes& codes, const float* x, int rows, float* y, int64_t n0,
                   int width) {
    switch (rows) {
        case 1: return forward_panel<Bits, 1>(p, codes, x, y, n0, width);
        case 2: return forward_panel<Bits, 2>(p, codes, x, y, n0, width);
        case 3: return forward_panel<Bits, 3>(p, codes, x, y, n0, width);
        default: return forward_panel<Bits, kRows>(p, codes, x, y, n0, width);
    }
}

template <int Bits>
void forward_all(const QuantParams& p, const PackedCodes& codes, const float* x, int64_t m, float* y,
                 ThreadPool& pool) {
    // Tasks: chunks of up to kPanel columns that stay inside one packed panel, times row blocks.
    const int64_t chunks_per_panel = (codes.panel_columns + kPanel - 1) / kPanel;
    const int64_t chunks = codes.num_panels() * chunks_per_panel;
    const int64_t row_blocks = (m + kRows - 1) / kRows;
    auto task = [&](int64_t t) {
        const int64_t chunk = t % chunks, row_block = t / chunks;
        const int64_t panel_n0 = chunk / chunks_per_panel * codes.panel_columns;
        const int64_t offset = chunk % chunks_per_panel * kPanel, n0 = panel_n0 + offset;
        const int64_t width = std::min<int64_t>({kPanel, codes.panel_columns - offset, p.n - n0});
        if (width <= 0) return;  // a chunk of the padding after column N
        const int64_t m0 = row_block * kRows;
        const ChunkCodes chunk_codes{codes.panel(panel_n0) + offset, codes.panel_columns, &codes};
        forward_panel<Bits>(p, chunk_codes, x + m0 * p.k, int(std::min<int64_t>(kRows, m - m0)), y + m0 * p.n, n0,
                            int(width));
    };
    // Below this many weight-row visits a dispatch to the pool costs more than it saves.
    constexpr int64_t kMinParallelWork = 1 << 16;
    pool.parallel_for(chunks * row_blocks, task, p.k * p.n * m >= kMinParallelWork);
}

}  // namespace

void portable_forward(const QuantParams& params, const PackedCodes& codes, const float* x, int64_t m, float* y,
                      ThreadPool& pool) {
    if (!params.uniform_bits()) return forward_all<0>(params, codes, x, m, y, pool);
    switch (params.bits) {
        case 2: return forward_all<2>(params, codes, x, m, y, pool);
        case 3: return forward_all<3>(params, codes, x, m, y, pool);
        case 4: return forward_all<4>(params, codes, x, m, y, pool);
        case 8: return forward_all<8>(params, codes, x, m, y, pool);
    }
}

}  // namespace qjit
