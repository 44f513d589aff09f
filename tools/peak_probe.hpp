// A peak of the machine's arithmetic: T threads each running a register-resident loop of
// independent multiply-adds (probe_loops.hpp): by default the u8 x s8 dot products of the int8
// kernels with the widest such instruction the CPU has; given a loop of fp32 multiply-adds
// (supported_fma_loops), the FMA peak. Measured in the same run as the kernels it is held against, not taken from a data sheet:
// a VM's cores, clocks and neighbours are not the data sheet's.
#pragma once

#include <cstdint>

#include "tools/probe_loops.hpp"

namespace qjit_tools {

class PeakProbe {
public:
    static constexpr int kPeakRuns = 5;
    // Multiply-adds per thread and run: about 20 ms for one core at 64 x 2 per cycle.
    static constexpr int64_t kMacsPerRun = int64_t(1) << 33;

    // False without AVX2 (no u8 x s8 instruction): then the probe measures nothing.
    static bool available() { return !supported_dot_loops().empty(); }

    // Throws std::runtime_error unless available(). `loop` is for comparisons and tests.
    PeakProbe();
    explicit PeakProbe(DotLoop loop);

    const char* instruction() const { return loop_.name; }

    // One run on `threads` threads: multiply-adds per second (MAC/s), timed from the release
    // of all threads until the last one finishes.
    double measure(int threads);

    // The best of `runs` calls to measure(): noise only ever slows the loop down.
    double peak(int threads, int runs = kPeakRuns);

    // The sum of every run's accumulators: the result the loops are kept for.
    int64_t checksum() const { return checksum_; }

private:
    DotLoop loop_;
    int64_t iterations_;
    int64_t checksum_ = 0;
};

}  // namespace qjit_tools
