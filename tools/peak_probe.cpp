#include "tools/peak_probe.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "tools/start_line.hpp"

namespace qjit_tools {

namespace {

DotLoop best_dot_loop() {
    const std::vector<DotLoop> loops = supported_dot_loops();
    if (loops.empty()) throw std::runtime_error("int8 peak probe: this CPU has no AVX2");
    return loops.front();
}

// Small bytes: no pair of products saturates in the AVX2 loop, and no lane overflows in a run.
constexpr uint32_t kA = 0x04030201, kB = 0xfe01ff02;  // b's bytes: 2, -1, 1, -2

}  // namespace

PeakProbe::PeakProbe() : PeakProbe(best_dot_loop()) {}

PeakProbe::PeakProbe(DotLoop loop)
    : loop_(loop), iterations_(std::max<int64_t>(1, kMacsPerRun / loop.macs_per_iteration)) {}

double PeakProbe::measure(int threads) {
    threads = std::max(1, threads);
    std::vector<int64_t> sums(size_t(threads), 0);
    const double seconds =
        time_from_start_line(threads, [&](int t) { sums[size_t(t)] = loop_.run(iterations_, kA, kB); });
    for (int64_t sum : sums) checksum_ += sum;
    return double(threads) * double(iterations_) * double(loop_.macs_per_iteration) / seconds;
}

double PeakProbe::peak(int threads, int runs) {
    double best = 0;
    for (int i = 0; i < std::max(1, runs); ++i) best = std::max(best, measure(threads));
    return best;
}

}  // namespace qjit_tools
