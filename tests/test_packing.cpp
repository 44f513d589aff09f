// Packing round trips are bit-exact for every bit width and panel width, including K not a
// multiple of 32 and N not a multiple of the panel, with and without metadata slots.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "format/inline_metadata.hpp"
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

// Metadata slots after each group: the codes read back as they were, each slot holds its group's
// metadata of its panel (then zeros), and taking the slots out gives the words back. K leaves a
// short last group; N a partial panel; fp16 scales with byte zero points, and fp32 scales alone.
TEST_P(PackingTest, MetadataSlotsKeepCodesAndMetadata) {
    const int bits = GetParam();
    std::mt19937 rng(static_cast<uint32_t>(bits) + 40);
    for (const bool symmetric : {false, true}) {
        const int64_t k = 200, n = 37, group = 64, panel = 16, groups = 4;  // 7 blocks: the last group has 1
        std::vector<uint8_t> codes(size_t(k * n));
        for (uint8_t& c : codes) c = uint8_t(rng() & ((1u << bits) - 1u));
        const PackedCodes plain = pack_codes(codes.data(), bits, k, n, panel);
        WeightFormat format{.k = k, .n = n, .bits = bits, .group_size = group, .symmetric = symmetric,
                            .scale_type = symmetric ? ScaleType::F32 : ScaleType::F16};
        const PanelMetadataLayout layout{format, panel, groups};
        const PanelMetadataSizes sizes = panel_metadata_sizes(format, layout);
        PanelMetadata metadata;
        metadata.scales.assign(sizes.scale_bytes, 0);
        metadata.zeros.assign(sizes.zero_bytes, 0);
        for (size_t i = 0; i < metadata.scales.size(); ++i) metadata.scales[i] = uint8_t(rng() | 1);
        for (size_t i = 0; i < metadata.zeros.size(); ++i) metadata.zeros[i] = uint8_t(rng() | 1);
        const int64_t slot_bytes = 96;
        ASSERT_GE(slot_bytes, inline_metadata_bytes(layout));
        const PackedCodes slotted = with_metadata_slots(plain, metadata, layout, group / 32, slot_bytes);
        SCOPED_TRACE(symmetric ? "fp32 scales" : "fp16 scales and zero points");
        ASSERT_EQ(slotted.slot_groups(), groups);
        EXPECT_EQ(slotted.panel_words(), plain.panel_words() + groups * slot_bytes / 4);
        EXPECT_EQ(slotted.block_offset(2), 2 * bits * panel + slot_bytes / 4) << "block 2 starts the second group";
        EXPECT_EQ(slotted.slot_offset(3), 7 * bits * panel + 3 * slot_bytes / 4) << "the short last group's slot";
        EXPECT_EQ(unpack_codes(slotted), codes);
        for (int64_t row : {int64_t(0), int64_t(63), int64_t(64), k - 1})
            for (int64_t column : {int64_t(0), int64_t(17), n - 1})
                EXPECT_EQ(slotted.code(row, column), codes[size_t(row * n + column)]) << row << ", " << column;
        const PanelMetadata back = metadata_from_slots(slotted, layout);
        EXPECT_EQ(back.scales, metadata.scales);
        EXPECT_EQ(back.zeros, metadata.zeros);
        EXPECT_EQ(without_metadata_slots(slotted).words, plain.words);
        // The padding after the metadata is zero.
        const uint8_t* slot = reinterpret_cast<const uint8_t*>(slotted.words.data() + slotted.slot_offset(1));
        for (int64_t b = inline_metadata_bytes(layout); b < slot_bytes; ++b) EXPECT_EQ(slot[b], 0) << b;
    }
}

INSTANTIATE_TEST_SUITE_P(Bits, PackingTest, ::testing::Values(2, 3, 4, 8),
                         [](const auto& info) { return "bits" + std::to_string(info.param); });

}  // namespace
}  // namespace qjit
