// A memory read-bandwidth probe: a streaming sum over a large buffer with T threads. The
// benchmarks run it next to each kernel measurement, because on a shared machine the bandwidth a
// plain read reaches drifts from minute to minute; a kernel's GB/s means something only next to it.
// The sum uses the widest loads the CPU has (probe_loops.hpp), as the kernels do.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tools/probe_loops.hpp"

namespace qjit_tools {

class BandwidthProbe {
public:
    static constexpr size_t kDefaultBufferBytes = size_t(1) << 30;  // 1 GiB: far beyond any cache
    static constexpr size_t kPeakWindowBytes = size_t(256) << 20;    // peak()'s smaller window
    static constexpr int kPeakSweeps = 5;

    // Allocates the buffer and writes every page, so no measurement pays for page faults. `loop`
    // is for comparisons and tests; the default is the widest.
    explicit BandwidthProbe(size_t buffer_bytes = kDefaultBufferBytes, ReadLoop loop = best_read_loop());
    ~BandwidthProbe();
    BandwidthProbe(const BandwidthProbe&) = delete;
    BandwidthProbe& operator=(const BandwidthProbe&) = delete;

    size_t buffer_bytes() const { return num_words_ * sizeof(uint64_t); }

    // The loads the default probe reads with ("avx512", "avx2", "sse2"), and those this one does.
    static const char* load_width_name() { return best_read_loop().name; }
    const char* load_width() const { return loop_.name; }

    // One streaming read of sweep_bytes (0: the whole buffer), split into `threads` contiguous
    // slices, one per thread. Returns GB/s (1e9 bytes per second), timed from the moment all
    // threads are released until the last one finishes. Successive calls read successive windows
    // of the buffer, so a window is never still in cache from the call before.
    double measure(int threads, size_t sweep_bytes = 0);

    // The median of `repeats` calls to measure().
    double median(int threads, int repeats, size_t sweep_bytes = 0);

    // The machine's streaming-read peak: the best of `sweeps` rounds over two windows
    // (kPeakWindowBytes and the whole buffer; one if they are the same). Best, not median: noise
    // only ever slows a read down, and this is the floor a kernel's GB/s is held against.
    double peak(int threads, int sweeps = kPeakSweeps);

private:
    ReadLoop loop_;
    uint64_t* words_ = nullptr;
    size_t num_words_ = 0;
    size_t next_window_ = 0;  // first word of the next sweep
    uint64_t checksum_ = 0;   // keeps the sums observable so the reads cannot be optimized away
};

}  // namespace qjit_tools
