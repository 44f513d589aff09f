// Planning reads from a read-throughput curve, and measuring and keeping that curve.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "runtime/flash/read_planner.hpp"
#include "runtime/flash/read_tuning.hpp"
#include "test_support.hpp"
#include "tuner/tuning_db.hpp"

namespace fs = std::filesystem;

namespace qjit {
namespace {

ReadCurve curve_of(const std::string& text) { return ReadCurve::parse(text); }

// Every extent lies inside its read; reads ascend, are disjoint and (with check_limit, for extents
// that are disjoint or identical) within the limit unless one extent alone is bigger.
void expect_plan_covers(std::span<const Extent> extents, const ReadPlan& plan, const ReadPlanOptions& options,
                        bool check_limit = true) {
    ASSERT_EQ(plan.read_of_extent.size(), extents.size());
    ASSERT_EQ(plan.offset_in_read.size(), extents.size());
    for (size_t i = 0; i < extents.size(); ++i) {
        const int32_t r = plan.read_of_extent[i];
        ASSERT_GE(r, 0);
        ASSERT_LT(size_t(r), plan.reads.size());
        const PlannedRead& read = plan.reads[size_t(r)];
        EXPECT_EQ(read.offset + plan.offset_in_read[i], extents[i].offset) << i;
        EXPECT_GE(plan.offset_in_read[i], 0) << i;
        EXPECT_LE(plan.offset_in_read[i] + extents[i].length, read.length) << i;
    }
    int64_t largest_extent = 0;
    for (const Extent& e : extents) largest_extent = std::max(largest_extent, e.length);
    for (size_t r = 0; r < plan.reads.size(); ++r) {
        if (r > 0) EXPECT_GE(plan.reads[r].offset, plan.reads[r - 1].offset + plan.reads[r - 1].length) << r;
        // Overlapping extents must share a read (reads are disjoint), whatever its length.
        if (check_limit) EXPECT_LE(plan.reads[r].length, std::max(options.max_read_bytes, largest_extent)) << r;
    }
    EXPECT_GE(plan.queue_depth, 1);
    EXPECT_LE(plan.queue_depth, std::max<int>(1, int(plan.reads.size())));
}

TEST(ReadPlanner, CurveTextRoundTrips) {
    ReadCurve curve;
    curve.points = {{4096, 1, 0.21}, {4096, 8, 1.0 / 3.0}, {1048576, 1, 2.5}, {1048576, 8, 6.125e-3}};
    const std::string text = curve.to_text();
    EXPECT_EQ(text.substr(0, 12), "4096x1=0.21;");
    const ReadCurve back = ReadCurve::parse(text);
    ASSERT_EQ(back.points.size(), curve.points.size());
    for (size_t i = 0; i < curve.points.size(); ++i) {
        EXPECT_EQ(back.points[i].chunk_bytes, curve.points[i].chunk_bytes);
        EXPECT_EQ(back.points[i].queue_depth, curve.points[i].queue_depth);
        EXPECT_EQ(back.points[i].gbps, curve.points[i].gbps);  // every digit
    }
    EXPECT_EQ(back.to_text(), text);
    EXPECT_TRUE(ReadCurve::parse("").empty());
    EXPECT_EQ(ReadCurve().to_text(), "");
}

TEST(ReadPlanner, MalformedCurveTextIsCorruptData) {
    for (const char* text : {"4096x1", "4096x1=", "4096=1x0.5", "x1=0.5", "4096x=0.5", "4096x1=0.5;", ";4096x1=0.5",
                             "4096x1=0.5;;8192x1=1", "4096x1=abc", "4096x1=0.5 ", " 4096x1=0.5", "4096x1=0",
                             "4096x1=-1", "4096x0=1", "-4096x1=1", "0x1=1", "4096x1=nan", "4096x1=inf",
                             "4096x1=0.5;4096x1=0.6", "4096y1=0.5", "4096x1x2=0.5", "40 96x1=0.5"}) {
        try {
            ReadCurve::parse(text);
            ADD_FAILURE() << "'" << text << "' parsed";
        } catch (const Error& e) {
            EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA) << text;
        }
    }
}

TEST(ReadPlanner, InterpolatesLogLinearlyAndClamps) {
    const ReadCurve curve = curve_of("4096x1=1;65536x1=3;4096x8=2;65536x8=10");
    EXPECT_EQ(curve.gbps(4096, 1), 1.0);
    EXPECT_EQ(curve.gbps(65536, 8), 10.0);
    EXPECT_DOUBLE_EQ(curve.gbps(16384, 1), 2.0);   // halfway in log2: 12, 14, 16
    EXPECT_DOUBLE_EQ(curve.gbps(8192, 8), 4.0);    // a quarter of the way
    EXPECT_EQ(curve.gbps(512, 1), 1.0);             // clamped below
    EXPECT_EQ(curve.gbps(1 << 30, 8), 10.0);        // and above
    EXPECT_DOUBLE_EQ(curve.gbps(16384, 4), 2.0);   // depth 4 reads as the measured depth 1
    EXPECT_DOUBLE_EQ(curve.gbps(16384, 64), 6.0);  // depth 64 as 8
    EXPECT_DOUBLE_EQ(curve.gbps(4096, 0), 1.0);    // below every depth: the smallest
    EXPECT_EQ(ReadCurve().gbps(4096, 1), 0.0);
}

TEST(ReadPlanner, BestQueueDepth) {
    const ReadCurve curve = curve_of("4096x1=1;4096x4=3;4096x16=3;1048576x1=5;1048576x4=4;1048576x16=2");
    EXPECT_EQ(curve.best_queue_depth(4096), 4);  // a tie with 16 keeps the smaller
    EXPECT_EQ(curve.best_queue_depth(1048576), 1);
    EXPECT_EQ(ReadCurve().best_queue_depth(4096), 32);
}

TEST(ReadPlanner, EmptyInputPlansNothing) {
    const ReadPlan plan = plan_reads({}, ReadCurve());
    EXPECT_TRUE(plan.reads.empty());
    EXPECT_TRUE(plan.read_of_extent.empty());
    EXPECT_EQ(plan.bytes(), 0);
    EXPECT_GE(plan.queue_depth, 1);
}

TEST(ReadPlanner, TouchingExtentsMergeAndDuplicatesShareARead) {
    const std::vector<Extent> extents = {{8192, 4096}, {0, 4096}, {4096, 4096}, {0, 4096}, {20480, 4096}};
    const ReadPlan plan = plan_reads(extents, ReadCurve());
    ASSERT_EQ(plan.reads.size(), 2u);
    EXPECT_EQ(plan.reads[0].offset, 0);
    EXPECT_EQ(plan.reads[0].length, 12288);
    EXPECT_EQ(plan.reads[1].offset, 20480);
    EXPECT_EQ(plan.bytes(), 16384);
    EXPECT_EQ(plan.read_of_extent, (std::vector<int32_t>{0, 0, 0, 0, 1}));
    EXPECT_EQ(plan.offset_in_read, (std::vector<int64_t>{8192, 0, 4096, 0, 0}));
    EXPECT_EQ(plan.queue_depth, 2);  // 32 for an empty curve, capped by the reads

    ReadPlanOptions apart;
    apart.coalesce = false;
    const ReadPlan separate = plan_reads(extents, ReadCurve(), apart);
    EXPECT_EQ(separate.reads.size(), 4u);  // the duplicate still shares its read
    expect_plan_covers(extents, separate, apart);
}

TEST(ReadPlanner, GapMergesOnlyWhenSmallReadsAreSlow) {
    const std::vector<Extent> extents = {{0, 4096}, {8192, 4096}};
    // Small reads slow: one 12 KiB read (about 0.48 GB/s) beats two 4 KiB ones at 0.1 GB/s.
    const ReadPlan slow = plan_reads(extents, curve_of("4096x1=0.1;1048576x1=2"));
    ASSERT_EQ(slow.reads.size(), 1u);
    EXPECT_EQ(slow.reads[0].length, 12288);
    EXPECT_EQ(slow.offset_in_read[1], 8192);
    EXPECT_EQ(slow.bytes(), 12288);
    // Flat throughput: the gap costs time and saves nothing.
    const ReadPlan flat = plan_reads(extents, curve_of("4096x1=2;1048576x1=2"));
    EXPECT_EQ(flat.reads.size(), 2u);
    EXPECT_EQ(flat.bytes(), 8192);
    // Nor with an empty curve, nor when coalescing is off.
    EXPECT_EQ(plan_reads(extents, ReadCurve()).reads.size(), 2u);
    ReadPlanOptions apart;
    apart.coalesce = false;
    EXPECT_EQ(plan_reads(extents, curve_of("4096x1=0.1;1048576x1=2"), apart).reads.size(), 2u);
}

TEST(ReadPlanner, MaxReadBytesIsRespected) {
    std::vector<Extent> extents;
    for (int i = 0; i < 64; ++i) extents.push_back({int64_t(i) * 65536, 65536});
    extents.push_back({int64_t(100) << 20, int64_t(3) << 20});  // bigger than the limit: alone
    ReadPlanOptions options;
    options.max_read_bytes = 256 << 10;
    const ReadPlan plan = plan_reads(extents, curve_of("4096x1=0.1;1048576x1=2"), options);
    EXPECT_EQ(plan.reads.size(), 17u);
    for (size_t r = 0; r + 1 < plan.reads.size(); ++r) EXPECT_EQ(plan.reads[r].length, 256 << 10) << r;
    EXPECT_EQ(plan.reads.back().length, int64_t(3) << 20);
    expect_plan_covers(extents, plan, options);
}

TEST(ReadPlanner, EveryExtentLiesInItsReadForRandomExtents) {
    std::mt19937 rng(7);
    const std::vector<ReadCurve> curves = {ReadCurve(), curve_of("4096x1=0.05;65536x1=0.8;1048576x1=2;4096x16=0.4;1048576x16=3"),
                                           curve_of("4096x4=3;1048576x4=3")};
    for (int round = 0; round < 200; ++round) {
        // Even rounds: records, disjoint (one per 32-block slot, some slots full so they touch);
        // odd rounds: ranges that may overlap.
        const bool records = round % 2 == 0;
        std::vector<Extent> extents(1 + rng() % 100);
        for (size_t i = 0; i < extents.size(); ++i) {
            if (records)
                extents[i] = {int64_t(i) * 32 * 4096 + int64_t(rng() % 2) * 4096 * int64_t(rng() % 16),
                              int64_t(rng() % 3 == 0 ? 32 : 1 + rng() % 16) * 4096};
            else
                extents[i] = {int64_t(rng() % 2048) * 4096, int64_t(1 + rng() % 24) * 4096};
            if (records && extents[i].offset + extents[i].length > int64_t(i + 1) * 32 * 4096)
                extents[i].offset = int64_t(i) * 32 * 4096;
        }
        std::shuffle(extents.begin(), extents.end(), rng);
        if (round % 3 == 0) extents.push_back(extents[rng() % extents.size()]);  // a duplicate
        ReadPlanOptions options;
        options.max_read_bytes = int64_t(4096) << (rng() % 10);
        options.coalesce = round % 5 != 0;
        const ReadCurve& curve = curves[size_t(round) % curves.size()];
        SCOPED_TRACE(::testing::Message() << "round " << round << " curve " << curve.to_text());
        expect_plan_covers(extents, plan_reads(extents, curve, options), options, records);
    }
}

TEST(ReadPlanner, BadExtentsAreInvalidArguments) {
    for (const Extent e : {Extent{0, 0}, Extent{-4096, 4096}, Extent{0, -1}}) {
        try {
            plan_reads(std::span(&e, 1), ReadCurve());
            ADD_FAILURE() << "planned";
        } catch (const Error& error) {
            EXPECT_EQ(error.status(), QJIT_ERROR_INVALID_ARGUMENT);
        }
    }
}

TEST(ReadTuning, MeasuresEveryChunkAndDepthOfMemoryStorage) {
    auto storage = make_memory_storage(std::string(size_t(1) << 20, 'w'), 4096);
    ReadCurveMeasurement m;
    m.chunk_bytes = {4096, 65536, 1 << 20, 4 << 20};  // the last is larger than the storage
    m.queue_depths = {1, 8};
    m.bytes_per_point = 1 << 20;
    m.seconds_per_point = 0.01;
    const ReadCurve curve = measure_read_curve(*storage, m);
    ASSERT_EQ(curve.points.size(), 6u);
    for (const ReadCurvePoint& p : curve.points) {
        EXPECT_LE(p.chunk_bytes, 1 << 20);
        EXPECT_TRUE(p.queue_depth == 1 || p.queue_depth == 8);
        EXPECT_GT(p.gbps, 0.0);
        EXPECT_TRUE(std::isfinite(p.gbps));
    }
    EXPECT_GT(storage->counters().reads, 0);
    EXPECT_NO_THROW(ReadCurve::parse(curve.to_text()));
}

class ReadTuningTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::string pattern = (fs::read_symlink("/proc/self/exe").parent_path() / "read_tuning_XXXXXX").string();
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
        dir_ = pattern;
        path_ = (dir_ / "weights.bin").string();
        test::write_file(path_, std::string(size_t(1) << 20, 'w'));
    }
    void TearDown() override { fs::remove_all(dir_); }

    fs::path dir_;
    std::string path_;
};

TEST_F(ReadTuningTest, DeviceKeyNamesABlockDeviceOrAFileSystem) {
    const std::string key = storage_device_key(path_);
    EXPECT_TRUE(key.rfind("block ", 0) == 0 || key.rfind("fs ", 0) == 0) << key;
    EXPECT_EQ(storage_device_key(dir_.string()), key);  // the same device
    try {
        storage_device_key((dir_ / "missing").string());
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_IO);
        EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
    }
}

TEST_F(ReadTuningTest, CurveIsMeasuredOnceThenFound) {
    auto storage = make_memory_storage(test::read_file(path_), 4096);
    TuningDb db((dir_ / "tuning.yaml").string());
    EXPECT_TRUE(read_curve_for(path_, *storage, db, false).empty());  // nothing stored, nothing measured
    EXPECT_EQ(storage->counters().reads, 0);

    const ReadCurve measured = read_curve_for(path_, *storage, db, true);
    ASSERT_FALSE(measured.empty());
    const int64_t reads = storage->counters().reads;
    EXPECT_GT(reads, 0);
    ASSERT_EQ(db.records().size(), 1u);
    EXPECT_EQ(db.records()[0].fingerprint, storage_device_key(path_));
    EXPECT_EQ(db.records()[0].kernel_key, "read_curve");
    EXPECT_GT(db.records()[0].gbps, 0.0);

    TuningDb reopened((dir_ / "tuning.yaml").string());
    EXPECT_EQ(read_curve_for(path_, *storage, reopened, false).to_text(), measured.to_text());
    EXPECT_EQ(read_curve_for(path_, *storage, reopened, true).to_text(), measured.to_text());
    EXPECT_EQ(storage->counters().reads, reads);  // found, not measured again
}

}  // namespace
}  // namespace qjit
