#include "runtime/cpu/portable_kernel.hpp"

#include <algorithm>
#include <cstring>

#include "base/error.hpp"
#include "format/code_planes.hpp"
#include "runtime/cpu/cache_eviction.hpp"
#include "runtime/low_rank_pass.hpp"

namespace qjit {

namespace {

constexpr int kPanel = PortableTiling::kChunkColumns;
constexpr int kRows = PortableTiling::kBatchRows;

// The K-groups of one product pass, and whether it adds to y or overwrites it.
struct GroupSpan {
    int64_t first, end;
    bool accumulate;
};

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
    constexpr int kLow = low_plane_width(Bits), kHigh = Bits - kLow;
    if constexpr (kHigh > 0) {
        const PlaneSlot low = plane_slot({kLow, 0, 0}, r), high = plane_slot({kHigh, kLow, kLow}, r);
        const uint32_t* low_words = block + low.word * chunk.stride;
        const uint32_t* high_words = block + high.word * chunk.stride;
        for (int j = 0; j < width; ++j)
            out[j] = float(((low_words[j] >> low.shift) & ((1u << kLow) - 1u)) |
                           (((high_words[j] >> high.shift) & ((1u << kHigh) - 1u)) << kLow));
    } else {
        const PlaneSlot slot = plane_slot({Bits, 0, 0}, r);
        const uint32_t* words = block + slot.word * chunk.stride;
        for (int j = 0; j < width; ++j) out[j] = float((words[j] >> slot.shift) & ((1u << Bits) - 1u));
    }
}

// The same for a width known at run time (a mixed layer's group): 2 or 4 bits.
inline void decode_mixed_row(int bits, const ChunkCodes& chunk, int64_t row, int width, float* out) {
    if (bits == 2) decode_row<2>(chunk, row, width, out);
    else decode_row<4>(chunk, row, width, out);
}

// Bits of a forward_panel whose 4-bit codes index the IQ4_NL levels (WeightFormat::value_of).
constexpr int kIq4NlCodes = -4;

// One column panel for Rows activation rows (Bits 0: each group at its own width; kIq4NlCodes:
// codebook values). Per group, with s and z the group's scale and zero:
// sum_r x_r * s * (q_r - z) = s * (sum_r x_r q_r - z * sum_r x_r), so the inner loop only
// multiplies raw codes and the scale and zero are applied once per group. Rows, and the width of
// a full panel, are compile-time constants so the compiler can unroll and vectorize.
template <int Bits, int Rows, int FixedWidth>
void forward_panel(const QuantParams& p, const ChunkCodes& codes, GroupSpan span, const float* x, float* y, int64_t n0,
                   int runtime_width) {
    const int width = FixedWidth > 0 ? FixedWidth : runtime_width;
    float q[kPanel];
    float dot[Rows][kPanel];
    float out[Rows][kPanel] = {};
    for (int64_t g = span.first; g < span.end; ++g) {
        const int64_t r0 = g * p.group_size, r1 = std::min(p.k, r0 + p.group_size);
        float x_sum[Rows] = {};
        std::memset(dot, 0, sizeof dot);
        for (int64_t r = r0; r < r1; ++r) {
            if constexpr (Bits == 0) {
                decode_mixed_row(p.group_width(g), codes, r, width, q);
            } else if constexpr (Bits == kIq4NlCodes) {
                decode_row<4>(codes, r, width, q);
                for (int j = 0; j < width; ++j) q[j] = float(p.value_of(int(q[j])));
            } else {
                decode_row<Bits>(codes, r, width, q);
            }
            for (int i = 0; i < Rows; ++i) {
                const float xv = x[i * p.k + r];
                x_sum[i] += xv;
                for (int j = 0; j < width; ++j) dot[i][j] += xv * q[j];
            }
        }
        const float* scale = &p.scales[size_t(g * p.n + n0)];
        if (p.float_offsets) {  // sum_r x_r * (s * q_r + m) = s * sum_r x_r q_r + m * sum_r x_r
            const float* offset = &p.offsets[size_t(g * p.n + n0)];
            for (int i = 0; i < Rows; ++i)
                for (int j = 0; j < width; ++j) out[i][j] += scale[j] * dot[i][j] + offset[j] * x_sum[i];
            continue;
        }
        const uint16_t* zero = &p.zeros[size_t(g * p.n + n0)];
        for (int i = 0; i < Rows; ++i)
            for (int j = 0; j < width; ++j) out[i][j] += scale[j] * (dot[i][j] - float(zero[j]) * x_sum[i]);
    }
    for (int i = 0; i < Rows; ++i) {
        float* y_row = y + i * p.n + n0;
        if (span.accumulate)
            for (int j = 0; j < width; ++j) y_row[j] += out[i][j];
        else
            std::memcpy(y_row, out[i], sizeof(float) * size_t(width));
    }
}

template <int Bits, int Rows>
void forward_panel(const QuantParams& p, const ChunkCodes& codes, GroupSpan span, const float* x, float* y, int64_t n0,
                   int width) {
    if (width == kPanel) forward_panel<Bits, Rows, kPanel>(p, codes, span, x, y, n0, width);
    else forward_panel<Bits, Rows, 0>(p, codes, span, x, y, n0, width);
}

template <int Bits>
void forward_panel(const QuantParams& p, const ChunkCodes& codes, GroupSpan span, const float* x, int rows, float* y,
                   int64_t n0, int width) {
    switch (rows) {
        case 1: return forward_panel<Bits, 1>(p, codes, span, x, y, n0, width);
        case 2: return forward_panel<Bits, 2>(p, codes, span, x, y, n0, width);
        case 3: return forward_panel<Bits, 3>(p, codes, span, x, y, n0, width);
        default: return forward_panel<Bits, kRows>(p, codes, span, x, y, n0, width);
    }
}

template <int Bits>
void forward_all(const QuantParams& p, const PackedCodes& codes, GroupSpan span, const float* x, int64_t m, float* y,
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
        forward_panel<Bits>(p, chunk_codes, span, x + m0 * p.k, int(std::min<int64_t>(kRows, m - m0)), y + m0 * p.n, n0,
                            int(width));
    };
    // Below this many weight-row visits a dispatch to the pool costs more than it saves.
    constexpr int64_t kMinParallelWork = 1 << 16;
    pool.parallel_for(chunks * row_blocks, task, p.k * p.n * m >= kMinParallelWork);
}

// The gather pass: activations reordered to the layer's storage row order, in a per-thread
// buffer that only grows, so steady-state forwards do not allocate.
const float* gather_rows(const QuantParams& p, const float* x, int64_t m) {
    thread_local std::vector<float> gathered;
    if (gathered.size() < size_t(m * p.k)) gathered.resize(size_t(m * p.k));
    for (int64_t i = 0; i < m; ++i) gather_row(p.row_order.data(), p.k, x + i * p.k, gathered.data() + i * p.k);
    return gathered.data();
}

}  // namespace

void portable_product(const QuantParams& params, const PackedCodes& codes, const Pass& product, bool accumulate,
                      const float* x, int64_t m, float* y, ThreadPool& pool) {
    const GroupSpan span{product.first_group, product.end_group, accumulate};
    if (!params.uniform_bits()) return forward_all<0>(params, codes, span, x, m, y, pool);
    if (params.has_codebook()) return forward_all<kIq4NlCodes>(params, codes, span, x, m, y, pool);
    switch (params.bits) {
        case 2: return forward_all<2>(params, codes, span, x, m, y, pool);
        case 3: return forward_all<3>(params, codes, span, x, m, y, pool);
        case 4: return forward_all<4>(params, codes, span, x, m, y, pool);
        case 5: return forward_all<5>(params, codes, span, x, m, y, pool);
        case 6: return forward_all<6>(params, codes, span, x, m, y, pool);
        case 8: return forward_all<8>(params, codes, span, x, m, y, pool);
    }
}

PortableLayer::PortableLayer(std::vector<Pass> passes, const QuantParams& params, PackedCodes codes,
                             std::unique_ptr<LowRankPass> low_rank, ThreadPool& pool)
    : CpuLayer(BackendKind::Portable, std::move(passes), params, std::move(codes), std::move(low_rank), pool) {
    for (const Pass& pass : this->passes())
        require(pass.kind != PassKind::Product || product_fits(pass, params, params.num_groups()),
                "the portable path cannot run the plan ", passes_text(this->passes()), " of a ", params.name(), " layer");
}

std::string PortableLayer::unsupported_reason(const WeightFormat&) {
    return "";  // the oracle's own loops: every valid format
}

void PortableLayer::forward(const float* x, int64_t m, float* y) const {
    const QuantParams& p = params();
    const float* rows = x;
    bool first_product = true;
    for (const Pass& pass : passes()) {
        switch (pass.kind) {
            case PassKind::Gather: rows = gather_rows(p, x, m); break;
            case PassKind::Product:
                portable_product(p, codes(), pass, !first_product, rows, m, y, pool());
                first_product = false;
                break;
            case PassKind::Outliers: add_outliers(p.outliers_data, p.k, p.n, 0, p.n, rows, m, y); break;
            case PassKind::LowRank: add_low_rank(x, m, y); break;
        }
    }
}

std::string PortableLayer::kernel_name() const {
    return concat(params().kernel_name(), "_gemm_f32_portable_n", PortableTiling::kChunkColumns, "m",
                  PortableTiling::kBatchRows);
}

std::string PortableLayer::kernel_fields() const { return "isa=portable activations=f32"; }

int64_t PortableLayer::metadata_bytes() const {
    const QuantParams& p = params();
    const int64_t groups_by_columns = p.num_groups() * p.n;
    const int64_t zero_bytes = p.float_offsets ? int64_t(sizeof(float)) : p.symmetric ? 0 : int64_t(sizeof(uint16_t));
    return groups_by_columns * (int64_t(sizeof(float)) + zero_bytes);
}

void PortableLayer::evict_metadata() const {
    const QuantParams& p = params();
    evict_from_caches(p.scales);
    evict_from_caches(p.zeros);
    evict_from_caches(p.offsets);
    evict_from_caches(p.outliers_data.rows);
    evict_from_caches(p.outliers_data.values);
}

}  // namespace qjit
