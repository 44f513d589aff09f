// Timing work on several threads at once, for the probes: helper threads wait at a start line, so
// thread creation is not part of the measured time.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace qjit_tools {

// Runs body(t) for every t in [0, threads), each on its own thread (the calling thread runs t = 0),
// all released together. Returns the seconds from the release until the last one finished.
template <typename Body>
double time_from_start_line(int threads, Body&& body) {
    using Clock = std::chrono::steady_clock;
    threads = std::max(1, threads);
    std::vector<Clock::time_point> finished(static_cast<size_t>(threads));
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    auto run = [&](int t) {
        body(t);
        finished[size_t(t)] = Clock::now();
    };
    std::vector<std::thread> helpers;
    for (int t = 1; t < threads; ++t)
        helpers.emplace_back([&, t] {
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            run(t);
        });
    while (ready.load() < threads - 1) std::this_thread::yield();
    const Clock::time_point start = Clock::now();
    go.store(true, std::memory_order_release);
    run(0);
    for (std::thread& helper : helpers) helper.join();
    const Clock::time_point end = *std::max_element(finished.begin(), finished.end());
    return std::chrono::duration<double>(end - start).count();
}

}  // namespace qjit_tools
