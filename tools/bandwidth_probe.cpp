#include "tools/bandwidth_probe.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <vector>

#include <sys/mman.h>

#include "tools/start_line.hpp"

namespace qjit_tools {

namespace {

// The buffer is offered as transparent huge pages, as qjit's packed weights are
// (base/page_allocator.hpp): with 4 KiB pages the probe pays TLB misses the kernels do not and
// reads slower than they do.
constexpr size_t kPageBytes = size_t(2) << 20;
constexpr size_t kLineWords = 64 / sizeof(uint64_t);  // slices start on cache lines

}  // namespace

BandwidthProbe::BandwidthProbe(size_t buffer_bytes, ReadLoop loop) : loop_(loop) {
    const size_t bytes = std::max(kPageBytes, buffer_bytes / kPageBytes * kPageBytes);
    words_ = static_cast<uint64_t*>(std::aligned_alloc(kPageBytes, bytes));
    if (!words_) throw std::bad_alloc();
    madvise(words_, bytes, MADV_HUGEPAGE);  // a hint: where huge pages are off this does nothing
    num_words_ = bytes / sizeof(uint64_t);
    for (size_t i = 0; i < num_words_; ++i) words_[i] = i;  // touches (and so maps) every page
}

BandwidthProbe::~BandwidthProbe() { std::free(words_); }

double BandwidthProbe::measure(int threads, size_t sweep_bytes) {
    threads = std::max(1, threads);
    size_t window = sweep_bytes == 0 ? num_words_ : std::min(num_words_, sweep_bytes / sizeof(uint64_t));
    window = std::max(window / kLineWords * kLineWords, size_t(threads));
    if (next_window_ + window > num_words_) next_window_ = 0;
    const uint64_t* base = words_ + next_window_;
    next_window_ += window;

    std::vector<uint64_t> sums(size_t(threads), 0);
    const size_t slice = window / size_t(threads) / kLineWords * kLineWords;
    const double seconds = time_from_start_line(threads, [&](int t) {
        const size_t begin = size_t(t) * slice;
        const size_t end = t + 1 == threads ? window : begin + slice;
        sums[size_t(t)] = loop_.sum(base + begin, end - begin);
    });
    for (uint64_t sum : sums) checksum_ += sum;
    return double(window * sizeof(uint64_t)) / seconds / 1e9;
}

double BandwidthProbe::median(int threads, int repeats, size_t sweep_bytes) {
    std::vector<double> samples;
    for (int i = 0; i < std::max(1, repeats); ++i) samples.push_back(measure(threads, sweep_bytes));
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    return samples[samples.size() / 2];
}

double BandwidthProbe::peak(int threads, int sweeps) {
    const bool two_windows = kPeakWindowBytes < buffer_bytes();
    double best = 0;
    for (int i = 0; i < std::max(1, sweeps); ++i) {
        if (two_windows) best = std::max(best, measure(threads, kPeakWindowBytes));
        best = std::max(best, measure(threads, 0));
    }
    return best;
}

}  // namespace qjit_tools
