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
    const double tiles_n = double(jit::cuda::padded_n(n) / t.block_n);
    const double tiles_m = double((spec.rows + t.block_m - 1) / t.block_m);
    const double blocks = tiles_n * tiles_m * t.split_k;
    const double waves = std::ceil(blocks / sms);
    const double fill = blocks / (waves * sms);
    const double stages_factor = 1 + 0.5 / t.stages;         // shallow pipelines expose latency
    const double split_cost = 1 + 0.1 * (t.split_k - 1);    // atomics and the cast
    const double waste = double(tiles_m * t.block_m) / double(spec.rows);  // padded rows multiplied
    return weight_bytes(spec, n) * tiles_m / fill * stages_factor * split_cost * std::sqrt(waste);
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
    for (int bm : {16, 32, 64}) {
        if (bm > spec.rows) continue;
        for (auto [bn, bk] : {std::pair{128, 128}, {256, 64}, {64, 256}, {128, 64}, {64, 128}, {256, 128}})
            for (int warps : {4, 8})
                for (int stages = 2; stages <= 5; ++stages)
                    for (int split : {1, 2, 4}) {
                        CudaTiling t;
                        t.kind = KernelKind::Gemm;
                        t.block_m = bm, t.block_n = bn, t.block_k = bk, t.warps = warps, t.stages = stages;
                        t.split_k = split;
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
        out << "gemm " << t.block_m << "x" << t.block_n << "x" << t.block_k << " warps=" << t.warps;
    return out.str();
}

}  // namespace qjit
