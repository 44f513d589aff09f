#include "tuner/cuda_search.hpp"
#include "base/error.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace qjit {

using jit::cuda::CudaKernelSpec;
using jit::cuda::CudaTiling;
using jit::cuda::KernelKind;

namespace {

// Rough device constants for ranking only (timing decides): bytes a streaming SM wants in flight
// to cover memory latency (Little's law at ~600 ns and ~25 GB/s per SM), and warps per SM.
constexpr double kBytesInFlightPerSm = 16 * 1024;
constexpr int kWarpsPerSm = 48;

double weight_bytes(const CudaKernelSpec& f, int64_t n) {
    return double(jit::cuda::padded_k(f.format.k)) * double(n) * f.format.bits / 8;
}

// Warps of a GEMM tiling resident on one SM: its blocks are limited by shared memory and by
// registers (the accumulators plus about 90 for fragments, addresses and decoding, which is what
// ptxas reports for the 64- and 128-accumulator tiles).
double resident_gemm_warps(const CudaKernelSpec& spec, const GpuProperties& device) {
    const CudaTiling& t = spec.tiling;
    const double per_sm = double(std::max(device.shared_memory_per_sm, device.shared_memory_per_block_optin + 1024));
    const double by_shared = std::floor(per_sm / std::max(1, jit::cuda::shared_memory_bytes(spec)));
    const double registers = std::min(255.0, jit::cuda::gemm_warp_tile(t).accumulators() * 1.15 + 90);
    const double by_registers = std::floor(65536.0 / (registers * 32 * t.warps));
    return std::max(1.0, std::min(by_shared, by_registers)) * t.warps;
}

// The GEMM's predicted time in bytes of weight traffic (a constant factor from seconds): the
// larger of the weights' stream and the block's work, over the share of the SMs its grid fills.
// The work is the tensor-core products, each widened by the shared-memory fragment loads a warp
// issues per product (a taller or wider warp tile shares its fragments more), plus decoding every
// weight once per row block, and stretched where few warps per SM are left to hide latency. The
// rates are an H200's per byte of memory bandwidth (18 bytes per SM and cycle): about 113 mma.sync
// flops (2048 per SM and cycle) and 5.5 decoded weights (some 40 instructions per 32-code block,
// 128 lanes' instructions per SM and cycle).
double gemm_cost(const CudaKernelSpec& spec, int64_t n, const GpuProperties& device) {
    constexpr double kFlopsPerByte = 113, kWeightsDecodedPerByte = 5.5;
    const CudaTiling& t = spec.tiling;
    const double k = double(jit::cuda::padded_k(spec.format.k)), columns = double(jit::cuda::padded_n(n));
    const double tiles_n = columns / t.block_n;
    const double tiles_m = double((spec.rows + t.block_m - 1) / t.block_m);
    const double blocks = tiles_n * tiles_m * t.split_k;
    const double sms = std::max(1, device.sm_count);
    const double fill = blocks / (std::ceil(blocks / sms) * sms);
    const jit::cuda::GemmWarpTile warp = jit::cuda::gemm_warp_tile(t);
    const double fragment_loads = (warp.rows + warp.columns) / 16.0, products = double(warp.rows / 16 * (warp.columns / 8));
    const double math = 2 * tiles_m * t.block_m * columns * k * (1 + fragment_loads / products) / kFlopsPerByte;
    const double decode = columns * k * tiles_m / kWeightsDecodedPerByte;
    const double stages_factor = 1 + 0.5 / t.stages;       // shallow pipelines expose latency
    const double split_cost = 1 + 0.1 * (t.split_k - 1);  // atomics, the zeroing and the cast
    const double latency_factor = 1 + 2 / resident_gemm_warps(spec, device);
    return std::max(weight_bytes(spec, n), math + decode) / fill * stages_factor * split_cost * latency_factor;
}

// Predicted seconds, up to a constant factor: weight traffic over the usable bandwidth, the
// fraction of the device the launch keeps busy, and the latency the loads in flight can hide.
double predicted_cost(const CudaKernelSpec& spec, int64_t n, const GpuProperties& device) {
    const CudaTiling& t = spec.tiling;
    const double sms = std::max(1, device.sm_count);
    if (t.kind == KernelKind::Gemv) {
        const double warps = double((n + t.columns_per_warp - 1) / t.columns_per_warp);
        const double warps_per_sm = std::min<double>(kWarpsPerSm, warps / sms);
        const double in_flight = warps_per_sm * 32 * 16.0 * jit::cuda::chunk_blocks(spec.format.bits) * spec.format.bits / 4 *
                                 t.chunks_in_flight * t.columns_per_warp;
        const double hidden = std::min(1.0, in_flight / kBytesInFlightPerSm);
        const double busy = std::min(1.0, warps / (sms * 8));
        // Fewer warps per block spread the tail better; two columns per warp was the timed search's
        // pick on all five Llama-2 shapes at 4 bits and one row (H100, 2026-11-22).
        const double columns_cost = t.columns_per_warp == 2 ? 1.0 : 1.05;
        return weight_bytes(spec, n) / (hidden * busy) * (1 + 0.02 * t.warps) * columns_cost;
    }
    if (t.kind == KernelKind::Mma) {
        const double blocks = double(jit::cuda::padded_n(n) / (8 * t.n_tiles)) * t.split_k;
        const double warps = blocks * t.warps;
        const double warps_per_sm = std::min<double>(kWarpsPerSm, warps / sms);
        const double in_flight = warps_per_sm * t.n_tiles * spec.format.bits * 128.0 * t.chunks_in_flight;
        const double hidden = std::min(1.0, in_flight / kBytesInFlightPerSm);
        const double busy = std::min(1.0, warps / (sms * 8));
        const double row_tiles = double((spec.rows + 15) / 16);
        // Activation fragments are re-read per 8-column tile: more tiles per block share them.
        const double activation_cost = 1 + 0.15 * row_tiles / t.n_tiles;
        const double split_cost = 1 + 0.05 * (t.split_k - 1);
        const double latency_cost = t.chunks_in_flight > 1 ? 1.0 : 1.1;  // loads overlapped with math
        return weight_bytes(spec, n) / (hidden * busy) * activation_cost * split_cost * latency_cost *
               (1 + 0.01 * t.warps);
    }
    return gemm_cost(spec, n, device);
}

}  // namespace

std::vector<CudaTiling> enumerate_cuda_tilings(const CudaKernelSpec& spec) {
    std::vector<CudaTiling> tilings;
    CudaKernelSpec candidate = spec;
    auto keep = [&](const CudaTiling& t) {
        candidate.tiling = t;
        if (jit::cuda::is_valid(candidate)) tilings.push_back(t);
    };
    if (jit::cuda::kind_serves(KernelKind::Mma, spec.rows))
        for (int warps : {1, 2, 4, 8})
            for (int tiles : {1, 2, 4})
                for (int inflight : {1, 2})
                    for (int split : {1, 2, 4, 8}) {
                        CudaTiling t;
                        t.kind = KernelKind::Mma;
                        t.warps = warps, t.n_tiles = tiles, t.chunks_in_flight = inflight, t.split_k = split;
                        keep(t);
                    }
    if (jit::cuda::kind_serves(KernelKind::Gemv, spec.rows)) {
        // The mixed-format GEMV has no loads-in-flight knob: one value of it, not three copies.
        const bool mixed = jit::cuda::needs_mixed_kernel(spec.format);
        for (int warps : {2, 4, 8})
            for (int cols : {1, 2, 4})
                for (int inflight : {1, 2, 4}) {
                    if (mixed && inflight != CudaTiling{}.chunks_in_flight) continue;
                    CudaTiling t;
                    t.kind = KernelKind::Gemv;
                    t.warps = warps, t.columns_per_warp = cols, t.chunks_in_flight = inflight;
                    keep(t);
                }
        return tilings;
    }
    for (int bm : {16, 32, 64, 128, 256}) {
        if (bm > spec.rows) continue;
        for (auto [bn, bk] : {std::pair{128, 128}, {256, 64}, {64, 256}, {128, 64}, {64, 128}, {256, 128}})
            for (int warps : {4, 8})
                for (int warps_m : {1, 2, 4})
                    for (int stages = 2; stages <= 5; ++stages)
                        for (int split : {1, 2, 4}) {
                            CudaTiling t;
                            t.kind = KernelKind::Gemm;
                            t.block_m = bm, t.block_n = bn, t.block_k = bk, t.warps = warps, t.warps_m = warps_m;
                            t.stages = stages, t.split_k = split;
                            keep(t);
                        }
    }
    return tilings;
}

std::string cuda_kernel_key(const CudaKernelSpec& format, int64_t n) {
    TextStream out;
    out << jit::cuda::kernel_family_name(format) << " K=" << format.format.k << " N=" << n << " m=" << format.rows;
    return out.str();
}

std::vector<CudaTiling> ranked_cuda_tilings(const CudaKernelSpec& format, int64_t n,
                                            const GpuProperties& device) {
    std::vector<std::pair<double, CudaTiling>> scored;
    CudaKernelSpec spec = format;
    for (const CudaTiling& t : enumerate_cuda_tilings(format)) {
        spec.tiling = t;
        if (!jit::cuda::fits_device(spec, device.shared_memory_per_block_optin)) continue;
        scored.emplace_back(predicted_cost(spec, n, device), t);
    }
    // Kinds are ranked by measurement, not by the model (whose costs are comparable only within a
    // kind). On an H100 (2026-11-22, bench_cuda, Llama-2 7B/70B shapes, 2/3/4/8 bits) the mma kernel
    // was the fastest timed kind in nearly every cell from 2 to 32 rows and for 3-bit at one row;
    // the gemv's time grew about linearly with its rows. At one row and 4 or 8 bits the gemv was
    // faster on every shape timed: 9.7-20.1 us against the mma's 10.5-23.5 on that H100, and
    // 23.4 / 11.0 / 57.0 us against 28.9 / 13.9 / 89.3 on Llama-2-70B's layers on an H200
    // (2026-11-26). A budget that times only the first candidate (a cold cubin cache) runs it.
    const bool gemv_first = format.rows == 1 && format.format.bits >= 4;
    auto kind_order = [&](const CudaTiling& t) {
        if (t.kind == KernelKind::Gemv) return gemv_first ? 0 : 1;
        return t.kind == KernelKind::Mma ? (gemv_first ? 1 : 0) : 2;
    };
    std::stable_sort(scored.begin(), scored.end(), [&](const auto& a, const auto& b) {
        if (kind_order(a.second) != kind_order(b.second)) return kind_order(a.second) < kind_order(b.second);
        return a.first < b.first;
    });
    std::vector<CudaTiling> ranked;
    for (const auto& [cost, t] : scored) ranked.push_back(t);
    return ranked;
}

std::string cuda_tiling_structure(const CudaTiling& t) {
    TextStream out;
    if (t.kind == KernelKind::Gemv)
        out << "gemv cols=" << t.columns_per_warp << " warps=" << t.warps;
    else if (t.kind == KernelKind::Mma)
        out << "mma tiles=" << t.n_tiles << " warps=" << t.warps;
    else
        out << "gemm " << t.block_m << "x" << t.block_n << "x" << t.block_k << " warps=" << t.warps << "x" << t.warps_m;
    return out.str();
}

}  // namespace qjit
