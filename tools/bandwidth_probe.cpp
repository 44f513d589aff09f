#include "tools/bandwidth_probe.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

namespace qjit_tools {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kPageBytes = 4096;
// Independent partial sums: 32 x 8 bytes is four 64-byte vectors (or eight 32-byte ones) of
// accumulators, so the compiler emits one wide load and add per vector with no long dependency
// chain. Integer adds reassociate freely, so it vectorizes without -ffast-math.
constexpr size_t kLanes = 32;

uint64_t sum_words(const uint64_t* words, size_t count) {
    uint64_t lanes[kLanes] = {};
    size_t i = 0;
    for (; i + kLanes <= count; i += kLanes)
        for (size_t j = 0; j < kLanes; ++j) lanes[j] += words[i + j];
    uint64_t total = 0;
    for (; i < count; ++i) total += words[i];
    for (uint64_t lane : lanes) total += lane;
    return total;
}

}  // namespace

BandwidthProbe::BandwidthProbe(size_t buffer_bytes) {
    const size_t bytes = std::max(kPageBytes, buffer_bytes / kPageBytes * kPageBytes);
    words_ = static_cast<uint64_t*>(std::aligned_alloc(kPageBytes, bytes));
    if (!words_) throw std::bad_alloc();
    num_words_ = bytes / sizeof(uint64_t);
    for (size_t i = 0; i < num_words_; ++i) words_[i] = i;  // touches (and so maps) every page
}

BandwidthProbe::~BandwidthProbe() { std::free(words_); }

double BandwidthProbe::measure(int threads, size_t sweep_bytes) {
    threads = std::max(1, threads);
    size_t window = sweep_bytes == 0 ? num_words_ : std::min(num_words_, sweep_bytes / sizeof(uint64_t));
    window = std::max(window, size_t(threads));
    if (next_window_ + window > num_words_) next_window_ = 0;
    const uint64_t* base = words_ + next_window_;
    next_window_ += window;

    std::vector<uint64_t> sums(size_t(threads), 0);
    std::vector<Clock::time_point> finished(static_cast<size_t>(threads));
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    const size_t slice = window / size_t(threads);
    auto read_slice = [&](int t) {
        const size_t begin = size_t(t) * slice;
        const size_t end = t + 1 == threads ? window : begin + slice;
        sums[size_t(t)] = sum_words(base + begin, end - begin);
        finished[size_t(t)] = Clock::now();
    };

    // Helpers wait at a start line, so thread creation is not part of the measured time; the
    // calling thread reads slice 0 itself.
    std::vector<std::thread> helpers;
    for (int t = 1; t < threads; ++t)
        helpers.emplace_back([&, t] {
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            read_slice(t);
        });
    while (ready.load() < threads - 1) std::this_thread::yield();
    const Clock::time_point start = Clock::now();
    go.store(true, std::memory_order_release);
    read_slice(0);
    for (std::thread& helper : helpers) helper.join();

    const Clock::time_point end = *std::max_element(finished.begin(), finished.end());
    for (uint64_t sum : sums) checksum_ += sum;
    const double seconds = std::chrono::duration<double>(end - start).count();
    return double(window * sizeof(uint64_t)) / seconds / 1e9;
}

double BandwidthProbe::median(int threads, int repeats, size_t sweep_bytes) {
    std::vector<double> samples;
    for (int i = 0; i < std::max(1, repeats); ++i) samples.push_back(measure(threads, sweep_bytes));
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    return samples[samples.size() / 2];
}

}  // namespace qjit_tools
