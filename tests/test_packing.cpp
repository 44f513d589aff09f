// Packing round trips are bit-exact for every bit width and panel width, including K not a
// multiple of 32 and N not a multiple of the panel.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "format/packed_codes.hpp"

namespace qjit {
namespace {

class PackingTest : public ::testing::TestWithParam<int> {};

TEST_P(PackingTest, RoundTripIsBitExact) {
    const int bits = GetParam();
    std::mt19937 rng(static_cast<uint32_t>(bits));
    for (const int panel : {8, 24, 64})
    for (const auto& [k, n] : {std::pair<int64_t, int64_t>{1, 1}, {7, 3}, {31, 5}, {32, 1}, {33, 17}, {172, 64},
                               {1000, 7}}) {
        std::vector<uint8_t> codes(size_t(k * n));
        for (uint8_t& c : codes) c = uint8_t(rng() & ((1u << bits) - 1u));
        const PackedCodes packed = pack_codes(codes.data(), bits, k, n, panel);
        EXPECT_EQ(packed.words.size(), size_t((k + 31) / 32 * bits * ((n + panel - 1) / panel * panel)))
            << "no wasted bits beyond the last block and panel";
        EXPECT_EQ(unpack_codes(packed), codes) << "k=" << k << " n=" << n;
    }
}

TEST_P(PackingTest, EveryCodeValueSurvivesInEveryRowPosition) {
    const int bits = GetParam();
    const int64_t k = 64, n = 1 << bits;  // column c holds code c in every row
    std::vector<uint8_t> codes(size_t(k * n));
    for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < n; ++c) codes[size_t(r * n + c)] = uint8_t(c);
    EXPECT_EQ(unpack_codes(pack_codes(codes.data(), bits, k, n, 16)), codes);
}

// A column's 32-row block packed on its own is the words pack_codes puts there, at every width.
TEST(PackingColumnBlock, EqualsPackCodes) {
    std::mt19937 rng(5);
    for (const int bits : {2, 3, 4, 8}) {
        std::vector<uint8_t> codes(32);
        for (uint8_t& c : codes) c = uint8_t(rng() % (1u << bits));
        const PackedCodes packed = pack_codes(codes.data(), bits, 32, 1, 8);
        uint32_t words[8] = {};
        pack_column_block(codes.data(), bits, words);
        for (int w = 0; w < bits; ++w) EXPECT_EQ(words[w], packed.words[size_t(w * 8)]) << bits << " bits, word " << w;
    }
}

TEST(PackingTest3Bit, UsesTwoBitPlaneAndOneBitPlaneInQuadOrder) {
    // Row 17 of the first block is row 1 of 2-bit word 1 (byte 1, field 0: bit 8) and row 17 of
    // the 1-bit word 2 (byte 1, field 4: bit 12). A panel of 8 columns: word w of column 0 is at 8 * w.
    std::vector<uint8_t> codes(32, 0);
    codes[17] = 0b110;
    const PackedCodes packed = pack_codes(codes.data(), 3, 32, 1, 8);
    ASSERT_EQ(packed.words.size(), 3u * 8u);
    EXPECT_EQ(packed.words[0], 0u);
    EXPECT_EQ(packed.words[8], 0b10u << 8);
    EXPECT_EQ(packed.words[16], 1u << 12);
}

INSTANTIATE_TEST_SUITE_P(Bits, PackingTest, ::testing::Values(2, 3, 4, 8),
                         [](const auto& info) { return "bits" + std::to_string(info.param); });

}  // namespace
}  // namespace qjit
