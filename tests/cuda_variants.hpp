// The generated CUDA kernel variants the tests cover: bits x group x symmetry x tile shape x
// pipeline stages for the GEMM, its prefill tiles (128 and 256 rows, warps in a grid), bits x group x symmetry x rows for the GEMV, plus sweeps of the
// remaining knobs (activation type, fp32 scales, tile height, warps, GEMV columns and loads in
// flight) on fewer formats; float offsets in place of zero points at every width, and super-block
// scales at groups of 32 (every_super_block_cuda_format, for K a multiple of 256). Shared by the
// NVRTC compile tests, the host emulation and the device tests.
#pragma once

#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "jit/cuda/cuda_tiling.hpp"

namespace qjit::test {

struct CudaFormat {
    int bits;
    int group;  // 0: per column
    bool symmetric;
    bool float_offsets = false;  // W = scale * code + offset (GGUF Q4_1, Q5_1); asymmetric only
    int scale_code_bits = 0;     // > 0: super-block scales with codes of this width (GGUF Q4_K, Q5_K)
};

inline std::vector<CudaFormat> every_cuda_format() {
    std::vector<CudaFormat> formats;
    for (int bits : {2, 3, 4, 5, 6, 8})
        for (int group : {32, 64, 128, 0})
            for (bool symmetric : {false, true}) formats.push_back({bits, group, symmetric});
    for (int bits : {2, 3, 4, 5, 6, 8})
        for (int group : {32, 128, 0}) formats.push_back({bits, group, false, true});
    return formats;
}

// Super-block scales at every width, groups of 32 (K a multiple of 256): with float offsets and
// 6-bit codes (GGUF's Q4_K and Q5_K at 4 and 5 bits), and symmetric with signed 8-bit codes.
inline std::vector<CudaFormat> every_super_block_cuda_format() {
    std::vector<CudaFormat> formats;
    for (int bits : {2, 3, 4, 5, 6, 8}) {
        formats.push_back({bits, 32, false, true, 6});
        formats.push_back({bits, 32, true, false, 8});
    }
    return formats;
}

// The spec of `format` for K rows (group 0: one group of all K rows).
inline jit::cuda::CudaKernelSpec cuda_spec(const CudaFormat& format, int64_t k, int arch) {
    jit::cuda::CudaKernelSpec spec;
    spec.format.k = k;
    spec.format.bits = format.bits;
    spec.format.group_size = format.group == 0 ? k : format.group;
    spec.format.symmetric = format.symmetric;
    spec.format.float_offsets = format.float_offsets;
    spec.format.scale_type = format.scale_code_bits > 0 ? ScaleType::SuperBlock : ScaleType::F16;
    spec.format.scale_code_bits = format.scale_code_bits;
    spec.arch = arch;
    return spec;
}

// Variants of one format that fit sm_<arch>'s shared memory (`skipped` counts those that do not).
inline std::vector<jit::cuda::CudaKernelSpec> cuda_variants(const CudaFormat& format, int64_t k, int arch,
                                                            int* skipped = nullptr) {
    using namespace jit::cuda;
    std::vector<CudaKernelSpec> variants;
    auto add = [&](CudaKernelSpec spec) {
        if (!is_valid(spec)) return;
        if (!fits_device(spec, published_shared_memory_optin(arch))) {
            if (skipped) ++*skipped;
            return;
        }
        variants.push_back(spec);
    };
    const CudaKernelSpec base = cuda_spec(format, k, arch);
    for (int rows : {1, 2, 4, 8}) {
        CudaKernelSpec spec = base;
        spec.rows = rows;
        add(spec);
    }
    // The mma kernel at batches of one to four row tiles, one warp (no reduction) to eight.
    for (int rows : {1, 8, 16, 33, 64})
        for (auto [warps, tiles] : {std::pair{1, 1}, {4, 2}, {8, 4}}) {
            CudaKernelSpec spec = base;
            spec.rows = rows;
            spec.tiling.kind = KernelKind::Mma;
            spec.tiling.warps = warps, spec.tiling.n_tiles = tiles, spec.tiling.chunks_in_flight = 1 + rows % 2;
            add(spec);
        }
    for (auto [bn, bk] : {std::pair{128, 128}, {256, 64}, {64, 256}})
        for (int stages = 2; stages <= 5; ++stages) {
            CudaKernelSpec spec = base;
            spec.rows = 64;
            spec.tiling.kind = KernelKind::Gemm;
            spec.tiling.block_m = 64, spec.tiling.block_n = bn, spec.tiling.block_k = bk, spec.tiling.stages = stages;
            spec.tiling.warps = bn / 8 % 16 == 0 ? 8 : 4;  // at least 16 columns per warp
            add(spec);
        }
    // Prefill tiles: 128 and 256 rows, the block's warps in a grid (rows x columns); K steps of 64,
    // or of 128 in two stages where 64 rows of codes are not whole 16-byte copies (3 and 5 bits).
    for (auto [bm, warps_m, bn] : {std::tuple{128, 2, 128}, {256, 4, 128}, {64, 2, 256}}) {
        CudaKernelSpec spec = base;
        spec.rows = bm;
        spec.tiling.kind = KernelKind::Gemm;
        spec.tiling.block_m = bm, spec.tiling.warps_m = warps_m, spec.tiling.block_n = bn, spec.tiling.warps = 8;
        const bool whole_copies = 64 * format.bits % 128 == 0;
        spec.tiling.block_k = whole_copies ? 64 : 128, spec.tiling.stages = whole_copies ? 3 : 2;
        add(spec);
    }
    // The other knobs, on the group-128 asymmetric formats of each width and its super-block format
    // with float offsets (whose scale type is its own).
    const bool super_block = format.scale_code_bits > 0;
    if ((format.group == 128 || super_block) && !format.symmetric) {
        for (ActivationType type : {ActivationType::F16, ActivationType::BF16})
            for (bool f16_scales : {true, false}) {
                if (super_block && !f16_scales) continue;
                CudaKernelSpec spec = base;
                spec.activations = type, spec.rows = 8;
                if (!super_block) spec.format.scale_type = f16_scales ? ScaleType::F16 : ScaleType::F32;
                for (int cols : {1, 2, 4})
                    for (int inflight : {1, 2, 4}) {
                        spec.tiling.columns_per_warp = cols, spec.tiling.chunks_in_flight = inflight;
                        add(spec);
                    }
                spec.tiling = {};
                spec.tiling.kind = KernelKind::Mma;
                for (int rows : {4, 24}) {
                    spec.rows = rows;
                    add(spec);
                }
                spec.tiling = {};
                spec.tiling.kind = KernelKind::Gemm;
                for (int bm : {16, 32}) {
                    spec.rows = bm, spec.tiling.block_m = bm, spec.tiling.warps = 4;
                    add(spec);
                }
            }
    }
    return variants;
}

// A fixed, deterministic sample of `variants`: the first variant of each combination of kernel
// kind, activation type, scale type (super-block too), symmetry, float offsets and per-column grouping
// they contain, and the first GEMM of each prefill tile (warps in a grid). What CI compiles; the
// sweep compiles them all.
inline std::vector<jit::cuda::CudaKernelSpec> sample_of(const std::vector<jit::cuda::CudaKernelSpec>& variants) {
    std::set<std::tuple<jit::cuda::KernelKind, jit::cuda::ActivationType, bool, bool, bool, bool, bool>> seen;
    std::set<std::pair<int, int>> prefill_tiles_seen;  // block_m, warps_m
    std::vector<jit::cuda::CudaKernelSpec> sample;
    for (const jit::cuda::CudaKernelSpec& spec : variants) {
        const bool prefill_tile = spec.tiling.kind == jit::cuda::KernelKind::Gemm && spec.tiling.warps_m > 1;
        if (seen.insert({spec.tiling.kind, spec.activations, spec.format.f16_scales(), spec.format.symmetric,
                         spec.format.float_offsets, spec.format.super_block_scales(), spec.per_column()})
                .second ||
            (prefill_tile && prefill_tiles_seen.insert({spec.tiling.block_m, spec.tiling.warps_m}).second))
            sample.push_back(spec);
    }
    return sample;
}

}  // namespace qjit::test
