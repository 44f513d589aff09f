// Runs products on generated x86 kernels: owns the kernels (one per activation-row count up to
// the tiling's, and the prompt tile's kernels: one per part of a panel, for row tiles taller than
// the tiling's, jit::prompt_tile), the scales and zero points in the panel layout (format/panel_metadata.hpp), and
// the parallel schedule: the gather, the products and the outliers of a plan fused into one
// dispatch. A layer's JIT backend (runtime/cpu/jit_layer.hpp) runs on one; the tuner times
// candidates on others. Which formats it runs is the generator's answer (jit::unsupported_reason,
// jit/x86/cpu_kernel.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jit/x86/cpu_kernel.hpp"
#include "jit/x86/jit_generator.hpp"
#include "format/packed_codes.hpp"
#include "format/panel_metadata.hpp"
#include "format/quantized_matrix.hpp"
#include "runtime/cpu/activation_prologue.hpp"
#include "runtime/cpu/thread_pool.hpp"
#include "runtime/layer_passes.hpp"

namespace qjit {

// The plan of a layer of `format` on the kernels of `spec`: its gather, then its products split
// as the tiling's K-split asks (groups of 16 rows split in pairs: they share a 32-row block).
std::vector<Pass> jit_forward_plan(const jit::CpuKernelSpec& spec, const WeightFormat& format);

// Runs `tasks` product tasks of one dispatch (of one layer or of several, consecutive tasks
// consecutive panels) on the pool: in runs of consecutive tasks, each about 64 KB of codes times
// rows (`cost` is all tasks' codes bytes times rows), at most 8 runs a thread; on the calling
// thread alone below 2^18 multiply-adds in all. A claim passes a cache line between cores, which
// on a 2-core VM cost more than a one-row panel product: with a claim per task every AVX2 layer
// ran slower on 2 threads than on 1.
template <typename RunTask>
void run_product_tasks(ThreadPool& pool, int64_t tasks, int64_t cost, int64_t multiply_adds, const RunTask& run_task) {
    constexpr int64_t kMinParallelWork = int64_t(1) << 18, kRunCost = int64_t(1) << 16, kRunsPerThread = 8;
    const int64_t task_cost = std::max<int64_t>(1, cost / std::max<int64_t>(1, tasks));
    const int64_t grain = multiply_adds >= kMinParallelWork ? (kRunCost + task_cost - 1) / task_cost : tasks;
    pool.parallel_ranges(tasks, grain, kRunsPerThread, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) run_task(t);
    });
}

// params' scales and zero points in the panel layout of spec's kernels, panels packed in parallel
// on `pool` (null: on the calling thread).
PanelMetadata packed_metadata(const jit::CpuKernelSpec& spec, const QuantParams& params, ThreadPool* pool);

// `codes` (packed at spec's panel width, without slots) as spec's kernels read them: with params'
// metadata in their slots (format/inline_metadata.hpp) where the kernels read it inline, else as
// they are.
PackedCodes kernel_codes(const jit::CpuKernelSpec& spec, const QuantParams& params, PackedCodes codes,
                         ThreadPool* pool = nullptr);

class JitExecutor {
public:
    // spec.rows must equal spec.tiling.mb; codes must be packed with spec.panel_columns().
    // `passes`: the layer's plan (runtime/layer_passes.hpp) over spec.num_groups() groups; its
    // gather is fused into the activation prologue, its products run as one parallel dispatch and
    // its outliers are added in the task of a panel's first K part.
    // dump_dir: where to write each kernel's machine code ("" for nowhere). pool: where the
    // metadata is repacked, panels in parallel (null: on the calling thread); none is where the
    // kernels read it inline, from the slots of the codes they are given. only_batch: when
    // positive, kernels are generated only for the row counts a forward of that many rows meets
    // (the tuner's candidates), and a forward of any other m is refused.
    JitExecutor(const jit::CpuKernelSpec& spec, const QuantParams& params, const std::vector<Pass>& passes,
                const std::string& dump_dir, ThreadPool* pool = nullptr, int64_t only_batch = 0);
    // The same with the metadata in the panel layout already (a pack file's, mapped): sized for
    // metadata_layout() (panel_metadata_sizes), which is checked; empty where the kernels read it
    // inline (spec.inline_metadata: from the codes' slots).
    JitExecutor(const jit::CpuKernelSpec& spec, const QuantParams& params, const std::vector<Pass>& passes,
                const std::string& dump_dir, PanelMetadata metadata, int64_t only_batch = 0);

    // prepare_activations, one parallel dispatch of every product task, then add_partials.
    void forward(const QuantParams& params, const PackedCodes& codes, const float* x, int64_t m, float* y,
                 ThreadPool& pool) const;

    JitExecutor(const JitExecutor&) = delete;
    JitExecutor& operator=(const JitExecutor&) = delete;

    // The halves of a forward, for a caller that runs the products of several layers in one
    // dispatch (runtime/moe_forward.hpp). The row order the prologue gathers by (null: none):
    const int32_t* activation_row_order(const QuantParams& params) const {
        return gathers_ ? params.row_order.data() : nullptr;
    }
    // Tasks of one forward's product dispatch: column panels x K parts.
    int64_t product_tasks() const { return panels_ * k_parts(); }
    // Bytes of codes one forward's products read (each row tile reads them again from cache).
    int64_t code_bytes(const PackedCodes& codes) const { return codes.panel_words() * 4 * panels_; }
    int64_t k_parts() const { return int64_t(group_ranges_.size()); }
    // Product task `task` over m prepared rows: part 0 writes y, part i > 0 writes its own
    // partial outputs at partials + (i - 1) * m * N (summed into y by add_partials).
    void run_product_task(const QuantParams& params, const PackedCodes& codes, const PreparedActivations& act,
                          int64_t m, float* y, float* partials, int64_t task) const;
    // y (m x N) += the partial outputs of K parts 1.. in part order; nothing without a K split.
    void add_partials(float* y, const float* partials, int64_t m, int64_t n) const;

    const jit::CpuKernelSpec& spec() const { return spec_; }
    // Milliseconds the constructor spent generating machine code (not repacking metadata).
    double emission_ms() const { return emission_ms_; }
    // Bytes of the repacked scales and zero points (and outliers) a forward streams.
    int64_t metadata_bytes() const;
    const jit::JitGenerator& kernel(int rows) const { return *kernels_[size_t(rows - 1)]; }
    // Rows of the prompt tiles that run on parts of a panel (0: none; forwards of fewer rows, and a
    // forward's last rows short of a tile, run on the kernels above).
    int64_t prompt_rows() const { return prompt_rows_; }
    // The scales and zero points as the kernels read them, and their layout.
    const PanelMetadata& metadata() const { return metadata_; }
    PanelMetadataLayout metadata_layout() const { return jit::metadata_layout(spec_); }
    // Flushes what metadata_bytes() counts from every cache (cold timing).
    void evict_metadata() const;

    // A contiguous range of groups one task covers, in the kernels' argument terms.
    struct GroupRange {
        int64_t first;        // first group
        int64_t first_block;  // its first 32-row block
        int64_t full_groups;  // whole groups from there
        int64_t tail_blocks;  // then a shorter last group of this many 32-row blocks (0: none)
    };

private:
    // y[i * ldy + c] += the outlier term of columns [n0, n0 + width) for the m prepared rows
    // (runtime/cpu/outlier_add.hpp).
    void add_panel_outliers(const PreparedActivations& act, int64_t m, int64_t n0, int64_t width, float* y,
                            int64_t ldy) const;

    jit::CpuKernelSpec spec_;
    double emission_ms_ = 0;
    std::vector<GroupRange> group_ranges_;  // one per product pass
    int64_t panels_ = 0;                    // column panels of the layer
    bool gathers_ = false;                  // the plan has a gather pass
    std::vector<std::unique_ptr<jit::JitGenerator>> kernels_;  // [rows - 1]; null where not generated
    std::vector<std::unique_ptr<jit::JitGenerator>> prompt_kernels_;  // the parts of a panel, in column order
    int64_t prompt_rows_ = 0;  // rows of a prompt tile (0: no prompt kernels)
    int64_t only_batch_ = 0;
    PanelMetadata metadata_;           // scales and zero points in the kernels' panel layout
    std::vector<uint8_t> group_bits_;  // mixed widths: [groups] (padding groups take the last width)
    SparseOutliers outliers_;          // rows in the original order, so the term reads x as given
    std::vector<float> outlier_values_;  // fp32
};

}  // namespace qjit
