#include "tuner/performance_model.hpp"

#include <algorithm>
#include <cmath>

#include "jit/x86/gemm_emitter.hpp"
#include "base/error.hpp"
#include "format/code_planes.hpp"
#include "format/packed_codes.hpp"

namespace qjit {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t activation_bytes(const jit::CpuKernelSpec& spec) { return spec.path == jit::ActivationPath::Int8 ? 1 : 4; }

// Bytes of one 32-row block of a panel (mixed widths: the average block).
int64_t code_block_bytes(const jit::CpuKernelSpec& spec) {
    return column_words(spec.format) * 4 * spec.panel_columns() / std::max<int64_t>(1, spec.padded_k() / 32);
}

// Rows of K one task covers: the K range of one part of the split.
int64_t k_part_rows(const jit::CpuKernelSpec& spec) { return ceil_div(spec.padded_k(), spec.tiling.ksplit); }

// Vector instructions per 32-row block and column vector, for one row tile of `rows` rows.
double block_instructions(const jit::CpuKernelSpec& spec, int64_t rows) {
    const bool embedded = jit::embedded_broadcast(spec);
    if (spec.path == jit::ActivationPath::Int8) {
        // 8 quads: a shift and a mask (two planes: the low plane's, then the high plane's shift merged
        // in by one vpternlogd on AVX-512, or a mask and an or on AVX2), one dot product per row.
        const double two_planes = spec.isa.avx512 ? 4.0 : 5.0;
        const double unpack = spec.format.bits == 8 ? 0.0 : jit::merges_code_planes(spec) ? two_planes : 2.0;
        const double dot = spec.vnni() ? 1.0 : 3.0;
        const double broadcast = embedded ? 0.0 : 1.0;
        return 8.0 * (unpack + double(rows) * (dot + broadcast));
    }
    // 32 rows: unpack and convert each to fp32, one FMA per row.
    const double unpack = code_planes(spec.format.bits).size() > 1 ? 4.0 : 2.5;
    const double broadcast = embedded ? 0.0 : 1.0;
    return 32.0 * (unpack + double(rows) * (1.0 + broadcast));
}

}  // namespace

MachineModel MachineModel::of(const CpuInfo& cpu) {
    MachineModel machine;
    if (cpu.l1d.present()) machine.l1d_bytes = int64_t(cpu.l1d.size_bytes);
    if (cpu.l2.present()) machine.l2_bytes = int64_t(cpu.l2.size_bytes);
    return machine;
}

std::optional<std::string> cache_budget_violation(const jit::CpuKernelSpec& spec, const TuningProblem& problem,
                                                  const MachineModel& machine) {
    const int64_t prefetched = int64_t(spec.tiling.prefetch) * code_block_bytes(spec);
    if (prefetched > machine.l1d_bytes / 2)
        return concat("prefetches ", prefetched, " bytes ahead; half of L1d is ", machine.l1d_bytes / 2);
    const int64_t tile_rows = std::min<int64_t>(spec.tiling.mb, problem.batch);
    const int64_t x_bytes = tile_rows * k_part_rows(spec) * activation_bytes(spec);
    if (x_bytes > machine.l2_bytes / 2)
        return concat("a row tile's activations take ", x_bytes, " bytes; half of L2 is ", machine.l2_bytes / 2);
    if (problem.batch > spec.tiling.mb) {
        const int64_t panel_bytes = k_part_rows(spec) / 32 * code_block_bytes(spec);
        if (panel_bytes > machine.l2_bytes / 2)
            return concat("row tiles re-read a panel of ", panel_bytes, " bytes; half of L2 is ", machine.l2_bytes / 2);
    }
    return std::nullopt;
}

double estimate_seconds(const jit::CpuKernelSpec& spec, const TuningProblem& problem, const MachineModel& machine) {
    const int64_t lanes = spec.lanes(), panel = spec.panel_columns();
    const int64_t panels = ceil_div(problem.n, panel), padded_n = panels * panel;
    const int64_t blocks = spec.padded_k() / 32, groups = spec.num_groups();
    const int64_t splits = spec.tiling.ksplit, tasks = panels * splits;
    const int64_t tile_rows = std::min<int64_t>(spec.tiling.mb, problem.batch);
    const int64_t row_tiles = ceil_div(problem.batch, spec.tiling.mb);
    const double threads = double(problem.threads);

    // Memory: weights stream once from DRAM; activations come from L2 for every panel and row
    // tile when a tile's K range overflows L1d.
    const double scale_bytes = spec.format.second_order_scales() ? 0.25
                               : spec.format.super_block_scales()
                                   ? double(PanelMetadataLayout{spec.format}.code_bytes(4)) / 4
                                   : double(spec.format.scale_bytes());
    const double zero_bytes =
        spec.format.super_block_scales()
            ? (spec.format.float_offsets && !PanelMetadataLayout{spec.format}.mins_in_scale_bytes() ? scale_bytes : 0.0)
            : double(spec.format.zero_point_bytes());
    const double weight_bytes =
        double(blocks * code_block_bytes(spec) * panels) + double(groups * padded_n) * (scale_bytes + zero_bytes);
    const double dram_gbps = std::min(machine.dram_gbps_total, machine.dram_gbps_per_thread * threads);
    double memory_seconds = weight_bytes / (dram_gbps * 1e9);
    const double x_tile_bytes = double(tile_rows * k_part_rows(spec) * activation_bytes(spec));
    const double l2_seconds = x_tile_bytes > double(machine.l1d_bytes) / 2
                                  ? double(tasks * row_tiles) * x_tile_bytes / (machine.l2_gbps_per_thread * 1e9 * threads)
                                  : 0.0;

    // Prior on the prefetch distance (bytes of codes ahead): best about 3 KiB ahead.
    const double ahead = double(spec.tiling.prefetch * code_block_bytes(spec));
    const double prefetch_factor = ahead == 0 ? 1.06 : 1.0 + 0.02 * std::abs(std::log2(ahead / 3072.0));
    memory_seconds *= prefetch_factor;

    // Compute: vector instructions of every block, column vector and row tile, group epilogues,
    // and loop overhead that k-unroll divides.
    const double column_vectors = double(padded_n / lanes);
    double instructions = 0.0;
    for (int64_t tile = 0; tile < row_tiles; ++tile) {
        const int64_t rows = std::min<int64_t>(spec.tiling.mb, problem.batch - tile * spec.tiling.mb);
        instructions += double(blocks) * column_vectors * block_instructions(spec, rows);
    }
    instructions += double(groups) * column_vectors * double(problem.batch) * 4.0;
    instructions += double(blocks * tasks * row_tiles) * 3.0 / spec.tiling.ku;
    // Activations that come from L2 feed the same pipeline as the instructions.
    const double compute_seconds = instructions / (machine.vector_ops_per_ns * 1e9 * threads) + l2_seconds;

    // Tasks are spread dynamically: the busiest thread runs ceil(tasks / threads) of them.
    const double imbalance = double(ceil_div(tasks, problem.threads)) * threads / double(tasks);
    const double overhead_seconds =
        double(ceil_div(tasks, problem.threads) * row_tiles) * machine.call_overhead_ns * 1e-9;
    const double reduce_seconds =
        splits > 1 ? double(splits * problem.batch * problem.n * 4 * 2) / (machine.l2_gbps_per_thread * 1e9) : 0.0;
    // Memory and compute overlap, but not perfectly: a quarter of the smaller one shows.
    const double core_seconds = std::max(memory_seconds, compute_seconds) + 0.25 * std::min(memory_seconds, compute_seconds);
    return core_seconds * imbalance + overhead_seconds + reduce_seconds;
}

}  // namespace qjit
