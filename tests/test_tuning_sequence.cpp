// The one tuning sequence every backend's tiling goes through (tuner/tuning_sequence.hpp), on a
// fake backend whose candidates take injected times: forced, context hit, database hit, records
// a backend cannot use, the model's pick, the timed search and what it stores, and each mode.
// The CPU and CUDA layers run the same code over their own targets.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "tuner/tuning_sequence.hpp"

namespace qjit {
namespace {

// Tilings "t0".."t5", ranked in that order; t3 is the fastest; "bad" parses nowhere.
class FakeTarget final : public TuningTarget {
public:
    std::vector<double> seconds = {4e-3, 3e-3, 5e-3, 1e-3, 6e-3, 2e-3};
    int ranked_pruned = 0, ranked_all = 0, forced = 0;
    std::vector<int> calls = std::vector<int>(6, 0);
    double now = 0;

    std::string kernel_key() const override { return "fake_q4g128 K=64 N=64 m=1"; }
    std::string fingerprint() const override { return "fake machine"; }
    std::vector<RankedTiling> rank(bool prune) override {
        ++(prune ? ranked_pruned : ranked_all);
        std::vector<RankedTiling> ranked;
        for (size_t i = 0; i < seconds.size(); ++i) ranked.push_back({"t" + std::to_string(i), "s" + std::to_string(i)});
        return ranked;
    }
    std::string accept(const std::string& text) override {
        if (text.size() != 2 || text[0] != 't' || text[1] < '0' || text[1] > '5')
            fail(QJIT_ERROR_INVALID_ARGUMENT, "no such tiling: ", text);
        return text;
    }
    std::string complete_forced(const std::string& text) override {
        ++forced;
        return accept(text);
    }
    TimedCall timed_call(const RankedTiling& candidate) override {
        const size_t i = size_t(candidate.text[1] - '0');
        return [this, i] {
            ++calls[i];
            now += seconds[i];
            return seconds[i];
        };
    }
    double weight_bytes(const std::string&) override { return 1e6; }
    SecondsClock clock() {
        return [this] { return now; };
    }
    int timed_candidates() const {
        int n = 0;
        for (int c : calls) n += c > 0;
        return n;
    }
};

class TuningSequence : public ::testing::Test {
protected:
    void SetUp() override {
        path_ = std::filesystem::path(::testing::TempDir()) /
                ("qjit_tuning_sequence_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
                 ".yaml");
        std::filesystem::remove(path_);
        memory_.db_path = path_.string();
    }
    void TearDown() override {
        std::filesystem::remove(path_);
        std::filesystem::remove(path_.string() + ".lock");  // the database's lock file stays by design
    }

    TuningOutcome tune_with(const TuningPolicy& policy, TuningMemory& memory) {
        return tune(target_, policy, memory, target_.clock());
    }
    // Neither the context nor the database holds a choice.
    void expect_nothing_remembered() const {
        EXPECT_TRUE(memory_.tuned.empty());
        EXPECT_FALSE(std::filesystem::exists(path_));
    }
    TuningRecord stored(const std::string& tiling) const {
        TuningRecord r;
        r.fingerprint = "fake machine";
        r.kernel_key = target_.kernel_key();
        r.tiling = tiling;
        r.time_us = 77;
        r.date = "2026-01-01T00:00:00Z";
        return r;
    }

    std::filesystem::path path_;
    TuningMemory memory_;
    FakeTarget target_;
    const TuningPolicy searching_{"", QJIT_TUNING_DEFAULT, 1000, true};
};

TEST_F(TuningSequence, MissSearchesStoresAndTheContextRemembers) {
    const TuningOutcome first = tune_with(searching_, memory_);
    EXPECT_EQ(first.source, QJIT_TILING_SEARCHED) << first.warning;
    EXPECT_EQ(first.tiling, "t3");
    EXPECT_EQ(first.kernel_key, "fake_q4g128 K=64 N=64 m=1");
    EXPECT_EQ(first.measured_us, 1e3);
    EXPECT_EQ(first.timed, 6);
    EXPECT_EQ(first.ranked, 6);
    EXPECT_EQ(target_.ranked_pruned, 1);
    const std::optional<TuningRecord> record = TuningDb(path_.string()).find("fake machine", first.kernel_key);
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->tiling, "t3");
    EXPECT_EQ(record->time_us, 1e3);
    EXPECT_DOUBLE_EQ(record->gbps, 1.0);  // 1 MB in 1 ms

    const std::vector<int> calls = target_.calls;
    const TuningOutcome second = tune_with(searching_, memory_);
    EXPECT_EQ(second.source, QJIT_TILING_CONTEXT);
    EXPECT_EQ(second.tiling, "t3");
    EXPECT_EQ(target_.calls, calls) << "a context hit timed something";

    TuningMemory other_context;
    other_context.db_path = path_.string();
    const TuningOutcome third = tune_with(searching_, other_context);
    EXPECT_EQ(third.source, QJIT_TILING_DATABASE);
    EXPECT_EQ(third.tiling, "t3");
    EXPECT_EQ(third.measured_us, 1e3);
    EXPECT_EQ(target_.calls, calls) << "a database hit timed something";
}

TEST_F(TuningSequence, ForcedIsCompletedByTheTargetAndNeverStored) {
    const TuningOutcome outcome = tune_with({"t4", QJIT_TUNING_DEFAULT, 1000, true}, memory_);
    EXPECT_EQ(outcome.source, QJIT_TILING_FORCED);
    EXPECT_EQ(outcome.tiling, "t4");
    EXPECT_EQ(target_.forced, 1);
    EXPECT_EQ(target_.timed_candidates(), 0);
    expect_nothing_remembered();
    EXPECT_THROW(tune_with({"bad", QJIT_TUNING_DEFAULT, 1000, true}, memory_), Error);
}

TEST_F(TuningSequence, ZeroBudgetOrNoSearchTakesTheModelsPick) {
    for (const TuningPolicy& policy :
         {TuningPolicy{"", QJIT_TUNING_DEFAULT, 0, true}, TuningPolicy{"", QJIT_TUNING_DEFAULT, 1000, false}}) {
        const TuningOutcome outcome = tune_with(policy, memory_);
        EXPECT_EQ(outcome.source, QJIT_TILING_MODEL);
        EXPECT_EQ(outcome.tiling, "t0");
        EXPECT_EQ(outcome.measured_us, 0);
    }
    EXPECT_EQ(target_.timed_candidates(), 0);
    expect_nothing_remembered();
}

TEST_F(TuningSequence, RecordTheTargetCannotUseIsReportedAndSearchedPast) {
    TuningDb(path_.string()).store(stored("bad"));
    const TuningOutcome outcome = tune_with(searching_, memory_);
    EXPECT_EQ(outcome.source, QJIT_TILING_SEARCHED);
    EXPECT_EQ(outcome.tiling, "t3");
    EXPECT_NE(outcome.warning.find("ignored: no such tiling: bad"), std::string::npos) << outcome.warning;
}

TEST_F(TuningSequence, OtherMachinesRecordIsNotUsed) {
    TuningRecord theirs = stored("t5");
    theirs.fingerprint = "another machine";
    TuningDb(path_.string()).store(theirs);
    EXPECT_EQ(tune_with(searching_, memory_).source, QJIT_TILING_SEARCHED);
    EXPECT_EQ(TuningDb(path_.string()).records().size(), 2u);  // theirs kept beside ours
}

TEST_F(TuningSequence, RetuneSearchesDespiteARecordAndReplacesIt) {
    TuningDb(path_.string()).store(stored("t5"));
    const TuningOutcome outcome = tune_with({"", QJIT_TUNING_RETUNE, 1000, true}, memory_);
    EXPECT_EQ(outcome.source, QJIT_TILING_SEARCHED);
    EXPECT_EQ(outcome.tiling, "t3");
    EXPECT_EQ(TuningDb(path_.string()).find("fake machine", outcome.kernel_key)->tiling, "t3");
}

TEST_F(TuningSequence, ExhaustiveRanksWithoutPruningAndTimesEverything) {
    TuningDb(path_.string()).store(stored("t5"));
    const TuningOutcome outcome = tune_with({"", QJIT_TUNING_EXHAUSTIVE, 0, true}, memory_);
    EXPECT_EQ(outcome.source, QJIT_TILING_SEARCHED);
    EXPECT_EQ(outcome.tiling, "t3");
    EXPECT_EQ(target_.ranked_all, 1);
    EXPECT_EQ(target_.ranked_pruned, 0);
    EXPECT_EQ(target_.timed_candidates(), 6);
}

TEST_F(TuningSequence, UnwritableDatabaseWarnsAndStillChooses) {
    memory_.db_path = "/proc/qjit-cannot-write-here/tuning.yaml";
    const TuningOutcome outcome = tune_with(searching_, memory_);
    EXPECT_EQ(outcome.source, QJIT_TILING_SEARCHED);
    EXPECT_EQ(outcome.tiling, "t3");
    EXPECT_NE(outcome.warning.find("not stored"), std::string::npos) << outcome.warning;
    EXPECT_EQ(tune_with(searching_, memory_).source, QJIT_TILING_CONTEXT);  // remembered all the same
}

TEST(TuningSourceName, EverySourceHasAName) {
    for (qjit_tiling_source s : {QJIT_TILING_PORTABLE, QJIT_TILING_FORCED, QJIT_TILING_DATABASE, QJIT_TILING_CONTEXT,
                                 QJIT_TILING_SEARCHED, QJIT_TILING_MODEL})
        EXPECT_STRNE(tiling_source_name(s), "unknown");
}

}  // namespace
}  // namespace qjit
