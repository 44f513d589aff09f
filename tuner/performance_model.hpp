// A performance model of the generated CPU kernels, in the spirit of QIGen's: hard budgets that
// say a tiling cannot be fast (its working sets overflow the caches), and a roofline estimate of
// one call's time that ranks the tilings that pass. The model only orders candidates; the tuner
// times the best of them for real.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tuner/hardware_probe.hpp"
#include "tuner/tuning_problem.hpp"

namespace qjit {

// What the model knows of the machine. Bandwidth and throughput are typical figures per core of
// current x86 servers, not measured: they set where a kernel turns from memory- to compute-bound,
// which the ranking needs; the timed search corrects the rest.
struct MachineModel {
    int64_t l1d_bytes = 48 << 10;
    int64_t l2_bytes = 2 << 20;
    double dram_gbps_per_thread = 12.0;  // streaming reads one core sustains
    double dram_gbps_total = 200.0;      // the socket's limit
    double l2_gbps_per_thread = 150.0;
    double vector_ops_per_ns = 3.5;      // per core: vector instructions that retire per ns in these loops
    double call_overhead_ns = 150.0;     // one kernel call: arguments, prologue, output tile copy

    static MachineModel of(const CpuInfo& cpu);
};

// Why `spec` breaks a cache budget for `problem`, or nothing when it fits:
//  - the codes prefetched ahead fit in half of L1d (else they are evicted before use);
//  - the activation rows of one call (a row tile over its K range) fit in half of L2, since every
//    panel reads them again;
//  - when the batch takes several row tiles, a panel's K range fits in half of L2, so the tiles
//    after the first re-read it from L2 and not from memory.
std::optional<std::string> cache_budget_violation(const jit::CpuKernelSpec& spec, const TuningProblem& problem,
                                                  const MachineModel& machine);

// Estimated seconds of one forward: the larger of the memory time (weights of the padded panels)
// and the core time (vector instructions, plus activations re-read from L2 when a row tile
// overflows L1d), plus a quarter of the smaller (the overlap is imperfect), scaled by the load
// imbalance of panels x K parts over the threads, plus per-call overheads and the
// reduction of K-split partial sums. No prefetch, or a distance far from 3 KiB ahead, costs a few
// percent (a prior from timings on Zen 5 and Xeon machines, not physics).
double estimate_seconds(const jit::CpuKernelSpec& spec, const TuningProblem& problem, const MachineModel& machine);

}  // namespace qjit
