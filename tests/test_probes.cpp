// The benchmarks' probes (tools/): every read loop and dot-product loop this CPU runs computes the
// right sum, and the probes return usable figures. Correctness only: no timing is asserted, and
// each loop the CPU lacks is left out, so the tests pass on any x86-64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "tools/bandwidth_probe.hpp"
#include "tools/peak_probe.hpp"
#include "tools/probe_loops.hpp"

namespace qjit_tools {
namespace {

TEST(Probes, ReadLoopsAreListedWidestFirstEndingWithSse2) {
    const std::vector<ReadLoop> loops = supported_read_loops();
    ASSERT_FALSE(loops.empty());
    EXPECT_STREQ(loops.back().name, "sse2");
    EXPECT_STREQ(BandwidthProbe::load_width_name(), loops.front().name);
    std::set<std::string> names;
    for (const ReadLoop& loop : loops) EXPECT_TRUE(names.insert(loop.name).second) << loop.name;
}

// Lengths around the vector widths and the unrolled step (8 vectors), from starts that are not
// aligned to any vector.
TEST(Probes, EveryReadLoopSumsEveryWord) {
    std::vector<uint64_t> words(5000);
    for (size_t i = 0; i < words.size(); ++i) words[i] = i * 0x9e3779b97f4a7c15ull + 12345;  // wraps: so does the sum
    const size_t lengths[] = {0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 4093};
    for (const ReadLoop& loop : supported_read_loops())
        for (size_t start : {0, 1, 3, 8})
            for (size_t length : lengths) {
                uint64_t expected = 0;
                for (size_t i = start; i < start + length; ++i) expected += words[i];
                EXPECT_EQ(loop.sum(words.data() + start, length), expected)
                    << loop.name << ", start " << start << ", length " << length;
            }
}

int32_t dot4(uint32_t a, uint32_t b) {
    int32_t sum = 0;
    for (int byte = 0; byte < 4; ++byte)
        sum += int32_t(uint8_t(a >> (8 * byte))) * int32_t(int8_t(uint8_t(b >> (8 * byte))));
    return sum;
}

// Every lane of every accumulator gains dot4(a, b) per iteration; macs_per_iteration / 4 lanes.
// The operands keep each pair of products within int16, where the AVX2 loop saturates.
TEST(Probes, EveryDotLoopMultipliesUnsignedBySignedBytes) {
    const std::pair<uint32_t, uint32_t> operands[] = {
        {0x01010101, 0x01010101},
        {0x04030201, 0xfe01ff02},  // b: 2, -1, 1, -2
        {0x03c801ff, 0xf9640580},  // a: 255, 1, 200, 3; b: -128, 5, 100, -7
    };
    for (const DotLoop& loop : supported_dot_loops()) {
        EXPECT_GT(loop.macs_per_iteration, 0) << loop.name;
        EXPECT_EQ(loop.macs_per_iteration % 4, 0) << loop.name;
        for (const auto& [a, b] : operands)
            for (int64_t iterations : {0, 1, 7, 1000}) {
                const int64_t expected = loop.macs_per_iteration / 4 * iterations * dot4(a, b);
                EXPECT_EQ(loop.run(iterations, a, b), expected)
                    << loop.name << ", a " << std::hex << a << ", b " << b << std::dec << ", " << iterations << " iterations";
            }
    }
}

// Chain j starts at seed % 2 + j and steps a = a / 2 + 1: after one step each of its lanes holds
// 1 + (seed % 2 + j) / 2, exactly, so the loops' sums are known; the SSE2 loop is always there.
TEST(Probes, EveryFmaLoopRunsItsChains) {
    const std::vector<DotLoop> loops = supported_fma_loops();
    ASSERT_FALSE(loops.empty());
    EXPECT_NE(std::string(loops.back().name).find("SSE2"), std::string::npos) << loops.back().name;
    for (const DotLoop& loop : loops) {
        const int64_t chains = 12, lanes = loop.macs_per_iteration / chains;
        EXPECT_EQ(loop.macs_per_iteration % chains, 0) << loop.name;
        for (uint32_t seed : {0u, 1u}) {
            double per_lane = 0;
            for (int64_t j = 0; j < chains; ++j) per_lane += 1.0 + double(seed % 2 + j) / 2.0;
            EXPECT_EQ(loop.run(1, seed, 0), int64_t(per_lane * double(lanes))) << loop.name << ", seed " << seed;
            EXPECT_EQ(loop.run(0, seed, 0), int64_t(double(lanes) * (chains * (seed % 2) + 66))) << loop.name;
        }
    }
}

TEST(Probes, BandwidthProbeGivesFinitePositiveFiguresWithEveryReadLoop) {
    for (const ReadLoop& loop : supported_read_loops()) {
        BandwidthProbe probe(size_t(32) << 20, loop);  // small: this checks the arithmetic, not the machine
        EXPECT_STREQ(probe.load_width(), loop.name);
        for (int threads : {1, 2}) {
            for (double gbps : {probe.measure(threads), probe.measure(threads, size_t(8) << 20),
                                probe.median(threads, 3), probe.peak(threads, 2)}) {
                EXPECT_TRUE(std::isfinite(gbps)) << loop.name << ", " << threads << " threads";
                EXPECT_GT(gbps, 0) << loop.name << ", " << threads << " threads";
            }
        }
    }
}

TEST(Probes, PeakProbeGivesFinitePositiveFiguresWithEveryDotLoop) {
    const std::vector<DotLoop> loops = supported_dot_loops();
    EXPECT_EQ(PeakProbe::available(), !loops.empty());
    for (const DotLoop& loop : loops) {
        PeakProbe probe(loop);
        EXPECT_STREQ(probe.instruction(), loop.name);
        for (int threads : {1, 2}) {
            const double macs_per_second = probe.peak(threads, 1);
            EXPECT_TRUE(std::isfinite(macs_per_second)) << loop.name << ", " << threads << " threads";
            EXPECT_GT(macs_per_second, 0) << loop.name << ", " << threads << " threads";
        }
        EXPECT_NE(probe.checksum(), 0) << loop.name;  // the runs' sums were kept
    }
    if (!loops.empty()) EXPECT_STREQ(PeakProbe().instruction(), loops.front().name);
}

}  // namespace
}  // namespace qjit_tools
