// Runs a layer on generated x86 kernels: owns the kernels (one per activation-row count up to
// the tiling's), the scales and zero points repacked per panel, and the parallel schedule.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jit/x86/cpu_kernel.hpp"
#include "jit/x86/jit_generator.hpp"
#include "format/packed_codes.hpp"
#include "format/quantized_matrix.hpp"
#include "runtime/cpu/thread_pool.hpp"

namespace qjit {

class JitExecutor {
public:
    // spec.rows must equal spec.tiling.rows; codes must be packed with spec.panel_columns().
    // dump_dir: where to write each kernel's machine code ("" for nowhere).
    JitExecutor(const jit::CpuKernelSpec& spec, const QuantParams& params, const std::string& dump_dir);

    void forward(const QuantParams& params, const PackedCodes& codes, const float* x, int64_t m, float* y,
                 ThreadPool& pool) const;

    const jit::CpuKernelSpec& spec() const { return spec_; }
    // Milliseconds the constructor spent generating machine code (not repacking metadata).
    double emission_ms() const { return emission_ms_; }
    // Bytes of the repacked scales and zero points a forward streams.
    int64_t metadata_bytes() const { return int64_t(scales_.size() + zeros_.size()); }
    const jit::JitGenerator& kernel(int rows) const { return *kernels_[size_t(rows - 1)]; }
    // The repacked scales and zero points (zero points empty when symmetric).
    const std::vector<uint8_t>& packed_scales() const { return scales_; }
    const std::vector<uint8_t>& packed_zeros() const { return zeros_; }

    // A contiguous range of groups one task covers, in the kernels' argument terms.
    struct GroupRange {
        int64_t first;        // first group
        int64_t first_block;  // its first 32-row block
        int64_t full_groups;  // whole groups from there
        int64_t tail_blocks;  // then a shorter last group of this many 32-row blocks (0: none)
    };

private:
    jit::CpuKernelSpec spec_;
    double emission_ms_ = 0;
    std::vector<GroupRange> group_ranges_;  // one per part of the K split
    std::vector<std::unique_ptr<jit::JitGenerator>> kernels_;  // [rows - 1]
    std::vector<uint8_t> scales_;  // [panel][group][panel_columns], fp16 or fp32
    std::vector<uint8_t> zeros_;   // [panel][group][panel_columns] (asymmetric only)
};

}  // namespace qjit
