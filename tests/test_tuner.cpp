// The tuner: the search space and its pruning, the timing protocol, and how a layer gets its
// tiling through the C API (timed search, tuning database, context cache, model pick, forced
// tiling, portable path), with the database shared between processes. No timed assertions: times
// are measured only to check properties that hold whatever the machine's speed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <limits>
#include <thread>
#include <vector>

#include "runtime/cpu/candidate_bench.hpp"
#include "runtime/context.hpp"
#include "base/error.hpp"
#include "runtime/cpu/thread_pool.hpp"
#include "test_support.hpp"
#include "tuner/cpu_isa.hpp"
#include "jit/x86/cpu_tiling.hpp"
#include "tuner/hardware_probe.hpp"
#include "tuner/performance_model.hpp"
#include "tuner/search_space.hpp"
#include "tuner/timed_search.hpp"
#include "tuner/tuning_db.hpp"
#include "tuner/tuning_problem.hpp"

namespace fs = std::filesystem;

namespace {

using qjit::test::ContextPtr;
using qjit::test::LinearPtr;
using qjit::test::files_starting;
using qjit::test::read_file;
using qjit::test::write_file;

// Tests that run generated kernels need AVX2 at least, on the CPU and under $QJIT_MAX_ISA.
bool generated_kernels_run() {
    if (qjit::best_isa_up_to(QJIT_ISA_AVX512_VNNI) < QJIT_ISA_AVX2) return false;
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = 1;
    options.tuning_db_path = "";
    options.tuning_budget_ms = 0;
    qjit_context* context = nullptr;
    if (qjit_context_create(&options, &context) != QJIT_OK) return false;
    const bool jit = context->isa >= QJIT_ISA_AVX2;
    qjit_context_destroy(context);
    return jit;
}

#define SKIP_WITHOUT_AVX2()                                                                        \
    do {                                                                                           \
        if (!generated_kernels_run())                                                              \
            GTEST_SKIP() << "no AVX2 (CPU or $QJIT_MAX_ISA): only the portable path runs here"; \
    } while (0)

// A kernel format as the tuner sees it (its tiling is ignored).
qjit::jit::CpuKernelSpec format(qjit_isa isa, qjit::jit::ActivationPath path, int bits, int64_t k, int64_t group) {
    return qjit::jit::cpu_kernel_spec(isa, path, bits, k, group);
}

std::string tiling_of(const qjit::jit::CpuKernelSpec& spec) { return qjit::jit::tiling_text(spec.tiling); }

// ---- 1. the search space ----------------------------------------------------------------------

// enumerate_tilings: every tiling can be generated, and each obeys the rules the header states.
TEST(TunerSearchSpace, EnumeratedTilingsAreValidAndFollowTheRules) {
    using qjit::jit::ActivationPath;
    struct Case {
        qjit_isa isa;
        ActivationPath path;
        int bits;
        int64_t k, group, n, batch;
        int threads;
    };
    const std::vector<Case> cases = {
        {QJIT_ISA_AVX512_VNNI, ActivationPath::Int8, 4, 512, 128, 192, 1, 2},
        {QJIT_ISA_AVX512_VNNI, ActivationPath::Int8, 3, 320, 64, 100, 16, 1},
        {QJIT_ISA_AVX512_VNNI, ActivationPath::F32, 8, 256, 32, 80, 4, 4},
        {QJIT_ISA_AVX512_VNNI, ActivationPath::Int8, 2, 512, 16, 64, 1, 8},
        {QJIT_ISA_AVX2, ActivationPath::Int8, 4, 512, 128, 192, 1, 2},
        {QJIT_ISA_AVX2, ActivationPath::Int8, 3, 320, 64, 100, 16, 1},
        {QJIT_ISA_AVX2, ActivationPath::F32, 8, 256, 32, 80, 4, 4},
        {QJIT_ISA_AVX2, ActivationPath::Int8, 4, 320, 320, 70, 2, 2},  // per column: one group of 10 blocks
    };
    for (const Case& c : cases) {
        const qjit::TuningProblem problem{format(c.isa, c.path, c.bits, c.k, c.group), c.n, c.batch, c.threads};
        SCOPED_TRACE(qjit::kernel_key(problem));
        const std::vector<qjit::jit::CpuKernelSpec> tilings = qjit::enumerate_tilings(problem);
        ASSERT_FALSE(tilings.empty());
        std::map<int, std::set<int>> rows_by_tu;
        std::set<std::string> seen;
        for (const qjit::jit::CpuKernelSpec& spec : tilings) {
            SCOPED_TRACE(tiling_of(spec));
            EXPECT_NO_THROW(qjit::jit::check_spec(spec));
            EXPECT_EQ(spec.rows, spec.tiling.mb);
            EXPECT_TRUE(seen.insert(tiling_of(spec)).second) << "enumerated twice";
            rows_by_tu[spec.tiling.tu].insert(spec.tiling.mb);
            // At batch 1 the widest mb that fits is taken (a one-row call runs the same code
            // whatever mb is); above, mb never exceeds the batch.
            if (c.batch > 1) EXPECT_LE(spec.tiling.mb, c.batch) << "mb above the batch";
            EXPECT_LE(spec.tiling.mb, 16);
            const int64_t panels = (c.n + spec.panel_columns() - 1) / spec.panel_columns();
            if (spec.tiling.ksplit > 1) EXPECT_LE(panels * spec.tiling.ksplit, 4 * c.threads);
            const int64_t blocks_per_group = spec.group_rows() / 32;
            if (spec.tiling.ku > 1) {
                ASSERT_GT(blocks_per_group, 0);
                EXPECT_EQ(blocks_per_group % spec.tiling.ku, 0) << "ku does not divide a group";
            }
        }
        if (c.batch == 1)
            for (const auto& [tu, rows] : rows_by_tu) EXPECT_EQ(rows.size(), 1u) << "tu=" << tu << " has several mb";
    }
}

// ---- 2. pruning ---------------------------------------------------------------------------------

// The model's ranking is sorted, every pruned tiling says why, and nothing is lost or invented.
void expect_well_formed(const qjit::SearchSpace& pruned, const qjit::SearchSpace& all) {
    EXPECT_EQ(all.enumerated, int(all.ranked.size()));
    EXPECT_TRUE(all.pruned.empty());
    EXPECT_EQ(pruned.enumerated, all.enumerated);
    EXPECT_EQ(int(pruned.ranked.size() + pruned.pruned.size()), pruned.enumerated);
    for (const qjit::SearchSpace* space : {&pruned, &all})
        for (size_t i = 1; i < space->ranked.size(); ++i)
            EXPECT_LE(space->ranked[i - 1].model_seconds, space->ranked[i].model_seconds) << "not sorted at " << i;
    for (const auto& p : pruned.pruned) EXPECT_FALSE(p.why.empty()) << tiling_of(p.spec);
}

// With caches far smaller than any real machine's, the budgets must discard something, and the
// split must agree with cache_budget_violation() tiling by tiling.
TEST(TunerPruning, TinyCachesPruneExactlyTheTilingsThatBreakABudget) {
    using qjit::jit::ActivationPath;
    qjit::MachineModel tiny;
    tiny.l1d_bytes = 4 << 10;
    tiny.l2_bytes = 64 << 10;
    const std::vector<qjit::TuningProblem> problems = {
        {format(QJIT_ISA_AVX512_VNNI, ActivationPath::Int8, 4, 4096, 128), 512, 1, 2},
        {format(QJIT_ISA_AVX2, ActivationPath::F32, 8, 8192, 32), 200, 16, 1},
        {format(QJIT_ISA_AVX512_VNNI, ActivationPath::Int8, 3, 2048, 64), 300, 8, 4},
    };
    for (const qjit::TuningProblem& problem : problems) {
        SCOPED_TRACE(qjit::kernel_key(problem));
        const qjit::SearchSpace pruned = qjit::build_search_space(problem, tiny, true);
        const qjit::SearchSpace all = qjit::build_search_space(problem, tiny, false);
        expect_well_formed(pruned, all);
        EXPECT_FALSE(pruned.pruned.empty()) << "a 4 KiB L1d and 64 KiB L2 pruned nothing";
        for (const auto& p : pruned.pruned) {
            const std::optional<std::string> why = qjit::cache_budget_violation(p.spec, problem, tiny);
            EXPECT_TRUE(why.has_value()) << tiling_of(p.spec) << " pruned but fits";
            if (why) EXPECT_EQ(*why, p.why);
        }
        for (const qjit::Candidate& c : pruned.ranked)
            EXPECT_FALSE(qjit::cache_budget_violation(c.spec, problem, tiny).has_value())
                << tiling_of(c.spec) << " kept but breaks a budget";
    }
}

// The slice a budgeted search times a candidate on: whole panels of its width, the same number on
// every thread, enough for the byte and column targets and not a panel per thread more; the
// whole layer when that is no wider.
TEST(TunerSlice, SliceColumnsAreWholePanelsPerThread) {
    using qjit::jit::ActivationPath;
    for (const int threads : {1, 2, 3})
        for (const int64_t k : {int64_t(4096), int64_t(8192), int64_t(28672)})
            for (const int tu : {1, 3, 4, 7, 8}) {
                qjit::jit::CpuKernelSpec spec = format(QJIT_ISA_AVX512_VNNI, ActivationPath::Int8, 4, k, 128);
                spec.tiling.tu = tu;
                const qjit::TuningProblem whole{spec, 28672, 16, threads};
                const int64_t columns = qjit::timing_slice_columns(spec, whole);
                const int64_t panel = spec.panel_columns();
                ASSERT_EQ(columns % (panel * threads), 0) << columns;
                const int64_t panels = columns / panel / threads;
                const int64_t panel_bytes = panel * (k / 2 + k / 128 * 5);
                const int64_t bytes = qjit::kSliceBytesPerThread / 2;  // batch 16: above kSliceFullBytesBatch
                EXPECT_GE(panels * panel, qjit::kSliceColumnsPerThread);
                EXPECT_GE(panels * panel_bytes, bytes);
                EXPECT_TRUE((panels - 1) * panel < qjit::kSliceColumnsPerThread || (panels - 1) * panel_bytes < bytes)
                    << panels << " panels per thread: one fewer would do";
                // At batch 1 the slice holds the whole byte target.
                const int64_t batch_one = qjit::timing_slice_columns(spec, {spec, 1 << 20, 1, threads}) / panel / threads;
                EXPECT_GE(batch_one * panel_bytes, qjit::kSliceBytesPerThread);
                EXPECT_LT(columns, whole.n);
                EXPECT_EQ(qjit::timing_slice_columns(spec, {spec, 200, 1, threads}), 200);  // never wider than the layer
            }
}

// The factor from a slice's time to the whole layer's: the busiest thread's tasks, whole over
// slice, so the whole layer's padding and uneven spread count.
TEST(TunerSlice, TimeFactorCountsTheBusiestThreadsTasks) {
    using qjit::jit::ActivationPath;
    qjit::jit::CpuKernelSpec spec = format(QJIT_ISA_AVX512_VNNI, ActivationPath::Int8, 4, 8192, 128);
    spec.tiling.tu = 3;  // 48-column panels
    const qjit::TuningProblem whole{spec, 28672, 1, 2};
    // 28672 / 48 -> 598 panels, 299 per thread; 960 columns: 20 panels, 10 per thread.
    EXPECT_DOUBLE_EQ(qjit::slice_time_factor(spec, whole, 960), 29.9);
    spec.tiling.tu = 5;  // 80 columns: 359 panels, 180 on the busiest thread; 800 columns: 5 per thread
    EXPECT_DOUBLE_EQ(qjit::slice_time_factor(spec, whole, 800), 36.0);
    spec.tiling.ksplit = 2;  // 718 tasks, 359 on the busiest thread; 10 per thread
    EXPECT_DOUBLE_EQ(qjit::slice_time_factor(spec, whole, 800), 35.9);
    EXPECT_DOUBLE_EQ(qjit::slice_time_factor(spec, whole, whole.n), 1.0);
}

// One synthetic bench serves candidates of different panel widths on slices of different widths,
// in any order (the confirmation rounds interleave them): every run stays inside its buffers
// (checked under ASan) and each slice is whole panels per thread.
TEST(TunerSlice, OneBenchRunsCandidatesOnSlicesOfTheirOwn) {
    SKIP_WITHOUT_AVX2();
    using qjit::jit::ActivationPath;
    const qjit_isa isa = qjit::best_isa_up_to(QJIT_ISA_AVX512_VNNI);
    const qjit::TuningProblem whole{format(isa, ActivationPath::Int8, 3, 2048, 128), 16384, 16, 2};
    std::vector<qjit::Candidate> candidates;
    for (const int tu : {1, 2}) {  // tilings every AVX2 CPU's 16 vector registers hold
        qjit::Candidate c{whole.kernel};
        c.spec.tiling = {tu, 2, 2, 1, 1};
        c.spec.rows = 4;
        candidates.push_back(c);
    }
    int64_t widest = 0;
    std::vector<int64_t> columns;
    for (const qjit::Candidate& c : candidates) {
        columns.push_back(qjit::timing_slice_columns(c.spec, whole));
        EXPECT_LT(columns.back(), whole.n);
        EXPECT_EQ(columns.back() % (c.spec.panel_columns() * whole.threads), 0);
        widest = std::max(widest, columns.back());
    }
    qjit::ThreadPool pool(2);
    qjit::CandidateBench bench(whole, candidates, widest, pool);
    std::vector<qjit::CandidateRun> runs;
    for (size_t i = 0; i < candidates.size(); ++i) runs.push_back(bench.make_run(candidates[i].spec, columns[i]));
    for (int round = 0; round < 2; ++round)
        for (const qjit::CandidateRun& run : runs) {
            run.prepare();
            run.run();
        }
}

// ---- 3. the timing protocol, on injected timings ----------------------------------------------
// Each fake candidate "takes" the seconds it is given, and a fake clock advances by them, so the
// protocol's decisions (medians, extra rounds, budgets, order) are checked exactly. Whether pruning
// keeps the measured best on this machine is a measurement: bench/bench_pruning reports it.

struct FakeCandidates {
    std::vector<std::string> structures;
    std::vector<double> seconds;  // what one call of candidate i takes
    std::vector<int> calls;
    std::vector<size_t> order;    // candidates in the order they were screened
    double now = 0;               // the fake clock, in seconds

    FakeCandidates(std::vector<std::string> structures_, std::vector<double> seconds_)
        : structures(std::move(structures_)), seconds(std::move(seconds_)), calls(seconds.size(), 0) {}
    // Distinct structures, one per candidate.
    explicit FakeCandidates(std::vector<double> seconds_) : FakeCandidates({}, std::move(seconds_)) {
        for (size_t i = 0; i < seconds.size(); ++i) structures.push_back("block" + std::to_string(i));
    }
    // Calls that start in [slow_from, slow_until) take slow_factor times as long: a machine that
    // slows down for a while.
    double slow_from = 0, slow_until = 0, slow_factor = 3;
    qjit::MakeTimedCall make_call() {
        return [this](size_t i) -> qjit::TimedCall {
            order.push_back(i);
            return [this, i] {
                ++calls[i];
                const double taken = seconds[i] * (now >= slow_from && now < slow_until ? slow_factor : 1.0);
                now += taken;
                return taken;
            };
        };
    }
    qjit::SecondsClock clock() {
        return [this] { return now; };
    }
    qjit::SearchResult search(double budget_seconds = std::numeric_limits<double>::infinity()) {
        return qjit::timed_search(structures, make_call(), budget_seconds, clock());
    }
    int screened() const {
        int n = 0;
        for (int c : calls) n += c > 0;
        return n;
    }
};

// measure(): one warm-up call that is not a sample, then the median of the repeats.
TEST(TunerMeasure, MedianOfTheRepeatsWithoutTheWarmUp) {
    const std::vector<double> times = {100, 4.1, 4.0, 4.05};  // within kUnstableSpread of each other
    size_t call = 0;
    const qjit::Measurement m = qjit::measure([&] { return times.at(call++); }, 3);
    EXPECT_EQ(call, 4u);
    EXPECT_EQ(m.samples, 3);
    EXPECT_EQ(m.median_seconds, 4.05);
    EXPECT_TRUE(m.stable);
}

// measure(): an unstable spread takes another round of repeats, until it settles.
TEST(TunerMeasure, UnstableSamplesTakeAnotherRound) {
    const std::vector<double> times = {9, 1, 2, 3, 2, 2, 2, 2, 2, 2};
    size_t call = 0;
    const qjit::Measurement m = qjit::measure([&] { return times.at(call++); }, 3);
    EXPECT_EQ(m.samples, 6);  // [1 2 3] spreads 100 %; [1 2 2 2 2 3] has no interquartile spread
    EXPECT_EQ(m.median_seconds, 2);
    EXPECT_TRUE(m.stable);
    size_t noisy_call = 0;
    const qjit::Measurement noisy = qjit::measure([&] { return noisy_call++ % 2 ? 1.0 : 3.0; }, 3);
    EXPECT_EQ(noisy.samples, 3 * qjit::kMaxRounds);  // never settles: stops after kMaxRounds
    EXPECT_FALSE(noisy.stable);
}

// The host timer prepares before every call, the warm-up included, and times only the run.
TEST(TunerMeasure, HostCallsArePreparedEveryTime) {
    int prepared = 0, ran = 0;
    qjit::CandidateRun run;
    run.prepare = [&] { ++prepared; };
    run.run = [&] {
        EXPECT_EQ(prepared, ran + 1) << "run without a prepare before it";
        ++ran;
    };
    const qjit::Measurement m = qjit::measure(qjit::timed_on_host(run), 5);
    EXPECT_EQ(prepared, ran);
    EXPECT_EQ(ran, 1 + m.samples);
    EXPECT_GE(m.median_seconds, 0.0);
}

// An exhaustive search times every candidate and finds the fastest, whatever the model's order.
TEST(TunerMeasure, ExhaustiveSearchFindsTheFastest) {
    FakeCandidates fake({3e-3, 3e-3, 0.5e-3, 3e-3, 3e-3, 3e-3});
    const qjit::SearchResult result = fake.search();
    EXPECT_EQ(result.best, 2u);
    EXPECT_EQ(result.timed, 6);
    EXPECT_EQ(result.considered, 6);
    EXPECT_EQ(fake.screened(), 6);
    EXPECT_EQ(result.measured.median_seconds, 0.5e-3);
    EXPECT_DOUBLE_EQ(result.seconds, fake.now);
}

// Budgeted: one candidate per structure first, then the other candidates of the two fastest
// structures only. Structure "c" screened slowest, so its fast variant is never timed.
TEST(TunerMeasure, StructuresFirstThenVariantsOfTheFastest) {
    FakeCandidates fake({"a", "b", "c", "a", "b", "c"}, {3e-3, 2e-3, 5e-3, 1e-3, 2.5e-3, 0.5e-3});
    const qjit::SearchResult result = fake.search(10.0);
    EXPECT_EQ(result.best, 5u);  // c's variant: with budget to spare every structure is refined
    EXPECT_EQ(result.timed, 6);
    // Representatives in model order (a, b, c), then variants by structure speed: b's, a's, c's.
    const std::vector<size_t> expected = {0, 1, 2, 4, 3, 5};
    EXPECT_EQ(fake.order, expected);
}

// Screening times its candidates in interleaved rounds: a slow spell of the machine as long as
// one candidate's three slowed calls slows a call or two of several candidates, not every call of
// one. (Screened one after another, candidate 1's three calls all fell in the spell: 2.7 ms
// against the others' 1 ms, and the four finalists were the others.)
TEST(TunerMeasure, ASlowSpellDuringScreeningSlowsEveryCandidateAlike) {
    FakeCandidates fake({1e-3, 0.9e-3, 1e-3, 1e-3, 1e-3, 1e-3});
    fake.slow_from = 4.9e-3;  // after the first candidate's screening and the second's warm-up
    fake.slow_until = 12.9e-3;  // as long as three of its slowed calls
    const qjit::SearchResult result = fake.search();
    EXPECT_EQ(result.best, 1u);
    EXPECT_EQ(result.measured.median_seconds, 0.9e-3);
}

// At most half of the finalists are of one structure while another structure can take a place:
// four fast variants of "a" leave the confirmation a place for "b", which confirms faster.
TEST(TunerMeasure, VariantsOfOneStructureLeaveRivalsAPlaceInTheConfirmation) {
    FakeCandidates fake({"a", "b", "a", "a", "a"}, {0.90e-3, 0.95e-3, 0.91e-3, 0.92e-3, 0.93e-3});
    (void)fake.search();
    EXPECT_GT(fake.calls[1], 4) << "b was screened (a warm-up and three calls) but never confirmed";
    EXPECT_EQ(fake.calls[4], 4) << "a's fourth variant took b's place";
    FakeCandidates alone({"a", "a", "a", "a", "a"}, {0.90e-3, 0.95e-3, 0.91e-3, 0.92e-3, 0.93e-3});
    (void)alone.search();
    EXPECT_GT(alone.calls[3], 4) << "with no rival, every place goes to the structure's variants";
}

// A budget too small for even one screening still times one candidate, and returns it.
TEST(TunerMeasure, TinyBudgetStillTimesOneCandidate) {
    FakeCandidates fake({1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3});
    const qjit::SearchResult result = fake.search(1e-3);
    EXPECT_EQ(result.timed, 1);
    EXPECT_EQ(result.considered, 6);
    EXPECT_EQ(result.best, 0u);
    EXPECT_EQ(fake.screened(), 1);
}

// Screening stops where the next screening would overrun its share of the budget, and the
// confirmation rounds stop where the next would overrun the budget: 1 ms calls, 21 ms budget, a
// screening is 4 calls (warm-up + 3): two screenings fit the structure share (8.4 ms), then the
// two finalists are warmed (2 ms) and confirmed in 2 ms rounds up to 20 ms.
TEST(TunerMeasure, BudgetIsKept) {
    FakeCandidates fake(std::vector<double>(10, 1e-3));
    const qjit::SearchResult result = fake.search(21e-3);
    EXPECT_EQ(result.timed, 2);
    EXPECT_EQ(fake.screened(), 2);
    EXPECT_NEAR(result.seconds, 20e-3, 1e-9);
    EXPECT_EQ(fake.calls[0], 4 + 1 + 5);  // screening, warm-up, five confirmation rounds
}

// ---- 4, 5, 6. layers through the C API ---------------------------------------------------------

struct Shape {
    int bits = 4;
    int group = 128;
    int64_t k = 256, n = 64;
};

struct Tuning {
    qjit_tiling_source source = QJIT_TILING_PORTABLE;
    std::string kernel_key, tiling, warning;
    double tuning_ms = 0, measured_us = 0;
    int timed = 0, ranked = 0;
};

Tuning tuning_of(const qjit_linear* layer) {
    qjit_linear_tuning t{};
    EXPECT_EQ(qjit_linear_get_tuning(layer, &t), QJIT_OK) << qjit_last_error();
    return {t.source, t.kernel_key, t.tiling, t.warning, t.tuning_ms, t.measured_us, t.candidates_timed,
            t.candidates_ranked};
}

const char* source_name(qjit_tiling_source s) {
    switch (s) {
        case QJIT_TILING_PORTABLE: return "PORTABLE";
        case QJIT_TILING_FORCED: return "FORCED";
        case QJIT_TILING_DATABASE: return "DATABASE";
        case QJIT_TILING_CONTEXT: return "CONTEXT";
        case QJIT_TILING_SEARCHED: return "SEARCHED";
        case QJIT_TILING_MODEL: return "MODEL";
        default: return "?";
    }
}

#define EXPECT_SOURCE(tuning, expected)                                                          \
    EXPECT_EQ((tuning).source, (expected)) << "source " << source_name((tuning).source) << ", expected " \
                                           << source_name(expected) << "; warning: " << (tuning).warning

struct Options {
    std::string db;           // "": no database
    double budget_ms = 0;     // 0: the model's pick
    qjit_tuning_mode mode = QJIT_TUNING_DEFAULT;
    const char* tiling = nullptr;
    qjit_isa max_isa = QJIT_ISA_AUTO;
    int threads = 2;
};

ContextPtr tuner_context(const Options& o) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = o.threads;
    options.max_isa = o.max_isa;
    options.tiling = o.tiling;
    options.tuning_db_path = o.db.c_str();
    options.tuning_budget_ms = o.budget_ms;
    options.tuning_mode = o.mode;
    qjit_context* context = nullptr;
    EXPECT_EQ(qjit_context_create(&options, &context), QJIT_OK) << qjit_last_error();
    return ContextPtr(context);
}

std::vector<float> weights_of(const Shape& s, uint32_t seed = 7) {
    return qjit::test::random_floats(size_t(s.k * s.n), seed);
}

LinearPtr make_layer(qjit_context* context, const Shape& s, uint32_t seed = 7) {
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.bits = s.bits;
    config.group_size = s.group;
    const std::vector<float> w = weights_of(s, seed);
    qjit_linear* layer = nullptr;
    EXPECT_EQ(qjit_linear_create_from_f32(context, &config, s.k, s.n, w.data(), QJIT_LAYOUT_K_BY_N, &layer), QJIT_OK)
        << qjit_last_error();
    return LinearPtr(layer);
}

// The kernel key a layer of this shape gets with these threads and ISA cap: from a layer made in a
// context without database or timing.
std::string key_for(const Shape& s, int threads = 2) {
    ContextPtr context = tuner_context({.threads = threads});
    LinearPtr layer = make_layer(context.get(), s);
    return layer ? tuning_of(layer.get()).kernel_key : std::string();
}

std::vector<qjit::TuningRecord> records_of(const qjit::TuningDb& db, const std::string& fingerprint) {
    std::vector<qjit::TuningRecord> mine;
    for (const qjit::TuningRecord& r : db.records())
        if (r.fingerprint == fingerprint) mine.push_back(r);
    return mine;
}

bool is_tiling_text(const std::string& text) {
    static const std::regex form("tu=[1-9][0-9]*,mb=[1-9][0-9]*,prefetch=[0-9]+,ku=[1-9][0-9]*,ksplit=[1-9][0-9]*");
    return std::regex_match(text, form);
}

// y = x W against the layer's own dequantized weights, in double, within 2 % of sum |x| |w| (the
// int8 activation path's error is well under 1 % of that for uniform activations).
void expect_matches_dequantized(qjit_linear* layer, const Shape& s, int64_t m, uint32_t seed) {
    std::vector<float> w(size_t(s.k * s.n));
    ASSERT_EQ(qjit_linear_dequantize(layer, w.data()), QJIT_OK) << qjit_last_error();
    const std::vector<float> x = qjit::test::random_floats(size_t(m * s.k), seed);
    std::vector<float> y(size_t(m * s.n), NAN);
    ASSERT_EQ(qjit_linear_forward(layer, x.data(), m, y.data()), QJIT_OK) << qjit_last_error();
    int reported = 0;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t c = 0; c < s.n; ++c) {
            double expected = 0, magnitude = 0;
            for (int64_t r = 0; r < s.k; ++r) {
                const double xw = double(x[size_t(i * s.k + r)]) * double(w[size_t(r * s.n + c)]);
                expected += xw;
                magnitude += std::fabs(xw);
            }
            const double got = y[size_t(i * s.n + c)];
            if (!(std::fabs(got - expected) <= 2e-2 * magnitude + 1e-6) && reported++ < 5)
                ADD_FAILURE() << "row " << i << " column " << c << ": got " << got << ", reference " << expected
                              << " (sum |x||w| " << magnitude << ")";
        }
}

// A temporary directory holding the tuning database; its parent folder is created by the first store.
class TunerDbTest : public ::testing::Test {
protected:
    void SetUp() override {
        char pattern[] = "/tmp/qjit_tuner_XXXXXX";
        ASSERT_NE(::mkdtemp(pattern), nullptr);
        dir_ = pattern;
        db_ = (dir_ / "db" / "tuning.yaml").string();
        fingerprint_ = qjit::probe_cpu().fingerprint;
    }
    void TearDown() override { fs::remove_all(dir_); }

    qjit::TuningRecord record(const std::string& fingerprint, const std::string& key, const std::string& tiling) const {
        qjit::TuningRecord r;
        r.fingerprint = fingerprint;
        r.kernel_key = key;
        r.tiling = tiling;
        r.time_us = 123.5;
        r.gbps = 1.5;
        r.date = "2024-05-01T12:00:00Z";
        return r;
    }

    fs::path dir_;
    std::string db_;
    std::string fingerprint_;
};

class TunerLayerTuning : public TunerDbTest {};

// (a) A database miss times candidates and stores the winner under this machine's fingerprint.
TEST_F(TunerLayerTuning, MissSearchesAndStoresTheWinner) {
    SKIP_WITHOUT_AVX2();
    const Shape shape;
    ContextPtr context = tuner_context({.db = db_, .budget_ms = 50});
    ASSERT_TRUE(context);
    LinearPtr layer = make_layer(context.get(), shape);
    ASSERT_TRUE(layer);
    const Tuning t = tuning_of(layer.get());
    EXPECT_SOURCE(t, QJIT_TILING_SEARCHED);
    EXPECT_GE(t.timed, 1);
    EXPECT_GE(t.ranked, t.timed);
    EXPECT_GT(t.measured_us, 0.0);
    EXPECT_GT(t.tuning_ms, 0.0);
    EXPECT_TRUE(t.warning.empty()) << t.warning;
    EXPECT_TRUE(is_tiling_text(t.tiling)) << t.tiling;
    EXPECT_NE(t.kernel_key.find(" K=256 N=64 m=1 threads=2"), std::string::npos) << t.kernel_key;
    EXPECT_EQ(t.kernel_key, key_for(shape));

    const char* description = nullptr;
    ASSERT_EQ(qjit_linear_describe(layer.get(), &description), QJIT_OK);
    EXPECT_NE(std::string(description).find("tiling=" + t.tiling), std::string::npos) << description;

    qjit::TuningDb db(db_);
    EXPECT_TRUE(db.warning().empty()) << db.warning();
    EXPECT_EQ(db.records().size(), 1u);
    const std::optional<qjit::TuningRecord> stored = db.find(fingerprint_, t.kernel_key);
    ASSERT_TRUE(stored) << read_file(db_);
    EXPECT_EQ(stored->tiling, t.tiling);
    EXPECT_DOUBLE_EQ(stored->time_us, t.measured_us);
    EXPECT_GT(stored->gbps, 0.0);
}

// (b) A new context finds the record (nothing timed); a second layer of the key uses the context's choice.
TEST_F(TunerLayerTuning, HitInDatabaseThenInContext) {
    SKIP_WITHOUT_AVX2();
    const Shape shape;
    std::string searched_tiling;
    {
        ContextPtr first = tuner_context({.db = db_, .budget_ms = 50});
        LinearPtr layer = make_layer(first.get(), shape);
        ASSERT_TRUE(layer);
        const Tuning t = tuning_of(layer.get());
        EXPECT_SOURCE(t, QJIT_TILING_SEARCHED);
        searched_tiling = t.tiling;
    }
    ContextPtr second = tuner_context({.db = db_, .budget_ms = 50});
    LinearPtr hit = make_layer(second.get(), shape, 8);
    ASSERT_TRUE(hit);
    const Tuning t = tuning_of(hit.get());
    EXPECT_SOURCE(t, QJIT_TILING_DATABASE);
    EXPECT_EQ(t.timed, 0);
    EXPECT_EQ(t.tiling, searched_tiling);
    EXPECT_GT(t.measured_us, 0.0);  // the record's time

    LinearPtr again = make_layer(second.get(), shape, 9);
    ASSERT_TRUE(again);
    const Tuning t2 = tuning_of(again.get());
    EXPECT_SOURCE(t2, QJIT_TILING_CONTEXT);
    EXPECT_EQ(t2.timed, 0);
    EXPECT_EQ(t2.tiling, searched_tiling);
    EXPECT_EQ(t2.kernel_key, t.kernel_key);
}

// (c) Another machine's record for the same key is not used, and is kept when this one's is added.
TEST_F(TunerLayerTuning, OtherHardwaresRecordIsIgnoredAndKept) {
    SKIP_WITHOUT_AVX2();
    const Shape shape;
    const std::string key = key_for(shape);
    ASSERT_FALSE(key.empty());
    const std::string other = "OtherVendor-avx2-0123456789abcdef";
    ASSERT_NE(other, fingerprint_);
    qjit::TuningDb(db_).store(record(other, key, "tu=1,mb=1,prefetch=0,ku=1,ksplit=1"));

    ContextPtr context = tuner_context({.db = db_, .budget_ms = 50});
    LinearPtr layer = make_layer(context.get(), shape);
    ASSERT_TRUE(layer);
    const Tuning t = tuning_of(layer.get());
    EXPECT_SOURCE(t, QJIT_TILING_SEARCHED);
    EXPECT_GE(t.timed, 1);

    qjit::TuningDb db(db_);
    EXPECT_EQ(db.records().size(), 2u) << read_file(db_);
    const std::optional<qjit::TuningRecord> theirs = db.find(other, key);
    ASSERT_TRUE(theirs);
    EXPECT_EQ(theirs->tiling, "tu=1,mb=1,prefetch=0,ku=1,ksplit=1");
    const std::optional<qjit::TuningRecord> mine = db.find(fingerprint_, key);
    ASSERT_TRUE(mine);
    EXPECT_EQ(mine->tiling, t.tiling);
}

// (d) A damaged database never fails a layer: it is set aside, reported, and replaced by a valid one.
TEST_F(TunerLayerTuning, CorruptDatabaseIsSetAsideAndReported) {
    SKIP_WITHOUT_AVX2();
    const Shape shape;
    fs::create_directories(fs::path(db_).parent_path());
    write_file(db_,
               "# qjit tuning database\n\x01\x02 not yaml at all: [\n---\nschema: 1\nqjit_version: \"0.1.0\"\n"
               "fingerprint: \"" + fingerprint_ + "\"\nkernel: \"truncated");

    ContextPtr context = tuner_context({.db = db_, .budget_ms = 50});
    LinearPtr layer = make_layer(context.get(), shape);
    ASSERT_TRUE(layer) << qjit_last_error();
    const Tuning t = tuning_of(layer.get());
    EXPECT_SOURCE(t, QJIT_TILING_SEARCHED);
    EXPECT_FALSE(t.warning.empty());
    const bool names_problem = t.warning.find(db_) != std::string::npos ||
                               t.warning.find("damaged") != std::string::npos ||
                               t.warning.find("corrupt") != std::string::npos;
    EXPECT_TRUE(names_problem) << t.warning;

    EXPECT_EQ(files_starting(fs::path(db_).parent_path(), fs::path(db_).filename().string() + ".corrupt-").size(), 1u);

    qjit::TuningDb db(db_);
    EXPECT_TRUE(db.warning().empty()) << db.warning();
    const std::optional<qjit::TuningRecord> stored = db.find(fingerprint_, t.kernel_key);
    ASSERT_TRUE(stored) << read_file(db_);
    EXPECT_EQ(stored->tiling, t.tiling);
}

// (e) Budget 0 takes the model's pick, untimed, and writes nothing.
TEST_F(TunerLayerTuning, ZeroBudgetTakesTheModelsPickAndWritesNothing) {
    SKIP_WITHOUT_AVX2();
    ContextPtr context = tuner_context({.db = db_, .budget_ms = 0});
    LinearPtr layer = make_layer(context.get(), Shape{});
    ASSERT_TRUE(layer);
    const Tuning t = tuning_of(layer.get());
    EXPECT_SOURCE(t, QJIT_TILING_MODEL);
    EXPECT_EQ(t.timed, 0);
    EXPECT_EQ(t.measured_us, 0.0);
    EXPECT_TRUE(is_tiling_text(t.tiling)) << t.tiling;
    EXPECT_FALSE(fs::exists(db_));
}

// (f) RETUNE searches despite a record, and replaces it.
TEST_F(TunerLayerTuning, RetuneSearchesDespiteARecord) {
    SKIP_WITHOUT_AVX2();
    const Shape shape;
    const std::string key = key_for(shape);
    qjit::TuningDb(db_).store(record(fingerprint_, key, "tu=1,mb=1,prefetch=0,ku=1,ksplit=1"));
    {  // the record is good: DEFAULT uses it
        ContextPtr context = tuner_context({.db = db_, .budget_ms = 50});
        LinearPtr layer = make_layer(context.get(), shape);
        ASSERT_TRUE(layer);
        EXPECT_SOURCE(tuning_of(layer.get()), QJIT_TILING_DATABASE);
    }
    ContextPtr context = tuner_context({.db = db_, .budget_ms = 50, .mode = QJIT_TUNING_RETUNE});
    LinearPtr layer = make_layer(context.get(), shape);
    ASSERT_TRUE(layer);
    const Tuning t = tuning_of(layer.get());
    EXPECT_SOURCE(t, QJIT_TILING_SEARCHED);
    EXPECT_GE(t.timed, 1);
    qjit::TuningDb db(db_);
    const std::optional<qjit::TuningRecord> stored = db.find(fingerprint_, key);
    ASSERT_TRUE(stored);
    EXPECT_EQ(stored->tiling, t.tiling);
    EXPECT_NE(stored->date, "2024-05-01T12:00:00Z") << "the record was not replaced";
}

// (g) options.tiling is used as given (knobs left out come from the model), and never stored.
TEST_F(TunerLayerTuning, ForcedTilingIsUsedAsGiven) {
    SKIP_WITHOUT_AVX2();
    const std::string forced = "tu=2,mb=2,prefetch=8,ku=1,ksplit=2";  // fits AVX2's 16 registers too
    {
        ContextPtr context = tuner_context({.db = db_, .budget_ms = 50, .tiling = forced.c_str()});
        LinearPtr layer = make_layer(context.get(), Shape{});
        ASSERT_TRUE(layer);
        const Tuning t = tuning_of(layer.get());
        EXPECT_SOURCE(t, QJIT_TILING_FORCED);
        EXPECT_EQ(t.tiling, forced);
        EXPECT_EQ(t.timed, 0);
        const char* description = nullptr;
        ASSERT_EQ(qjit_linear_describe(layer.get(), &description), QJIT_OK);
        EXPECT_NE(std::string(description).find("tiling=" + forced), std::string::npos) << description;
    }
    // A partial tiling: the knobs left out come from the model's pick.
    ContextPtr partial = tuner_context({.db = db_, .tiling = "prefetch=2,ksplit=1"});
    LinearPtr layer = make_layer(partial.get(), Shape{});
    ASSERT_TRUE(layer);
    const Tuning t = tuning_of(layer.get());
    EXPECT_SOURCE(t, QJIT_TILING_FORCED);
    EXPECT_NE(t.tiling.find(",prefetch=2,"), std::string::npos) << t.tiling;
    EXPECT_NE(t.tiling.find(",ksplit=1"), std::string::npos) << t.tiling;
    EXPECT_TRUE(is_tiling_text(t.tiling)) << t.tiling;
    EXPECT_FALSE(fs::exists(db_)) << "a forced tiling was stored";

    // Only tu given: the other knobs come from the best candidate with that tu, so its registers fit.
    ContextPtr only_tu = tuner_context({.db = db_, .tiling = "tu=3"});
    LinearPtr wide = make_layer(only_tu.get(), Shape{});
    ASSERT_TRUE(wide) << qjit_last_error();
    EXPECT_EQ(tuning_of(wide.get()).tiling.rfind("tu=3,", 0), 0u) << tuning_of(wide.get()).tiling;

    ContextPtr bad = tuner_context({.db = db_, .tiling = "tu=3,warp=2"});
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    const std::vector<float> w = weights_of(Shape{});
    qjit_linear* raw = nullptr;
    EXPECT_STATUS(qjit_linear_create_from_f32(bad.get(), &config, 256, 64, w.data(), QJIT_LAYOUT_K_BY_N, &raw),
                  QJIT_ERROR_INVALID_ARGUMENT, "warp");
    EXPECT_EQ(raw, nullptr);
}

// (h) Whatever the tiling's source, the layer computes x W (K not a multiple of 32, batch 1 and 3).
TEST_F(TunerLayerTuning, EverySourceComputesTheSameProduct) {
    const Shape shape{4, 128, 300, 70};
    const bool avx2 = generated_kernels_run();
    std::set<qjit_tiling_source> seen;
    auto check = [&](qjit_linear* layer, qjit_tiling_source expected) {
        const Tuning t = tuning_of(layer);
        EXPECT_SOURCE(t, expected);
        seen.insert(t.source);
        SCOPED_TRACE(std::string(source_name(t.source)) + " " + t.tiling);
        expect_matches_dequantized(layer, shape, 1, 21);
        expect_matches_dequantized(layer, shape, 3, 22);
    };
    {
        ContextPtr portable = tuner_context({.db = db_, .budget_ms = 30, .max_isa = QJIT_ISA_PORTABLE});
        LinearPtr layer = make_layer(portable.get(), shape);
        ASSERT_TRUE(layer);
        check(layer.get(), QJIT_TILING_PORTABLE);
    }
    if (!avx2) return;
    {
        ContextPtr context = tuner_context({.db = db_, .budget_ms = 30});
        LinearPtr searched = make_layer(context.get(), shape, 1);
        ASSERT_TRUE(searched);
        check(searched.get(), QJIT_TILING_SEARCHED);
        LinearPtr cached = make_layer(context.get(), shape, 2);
        ASSERT_TRUE(cached);
        check(cached.get(), QJIT_TILING_CONTEXT);
    }
    {
        ContextPtr context = tuner_context({.db = db_, .budget_ms = 30});
        LinearPtr hit = make_layer(context.get(), shape, 3);
        ASSERT_TRUE(hit);
        check(hit.get(), QJIT_TILING_DATABASE);
    }
    {
        ContextPtr context = tuner_context({.budget_ms = 0});
        LinearPtr model = make_layer(context.get(), shape, 4);
        ASSERT_TRUE(model);
        check(model.get(), QJIT_TILING_MODEL);
    }
    {
        ContextPtr context = tuner_context({.tiling = "tu=2,mb=2,prefetch=4,ku=1,ksplit=2"});
        LinearPtr forced = make_layer(context.get(), shape, 5);
        ASSERT_TRUE(forced);
        check(forced.get(), QJIT_TILING_FORCED);
    }
    EXPECT_EQ(seen.size(), 6u);
}

// (i) A portable context runs no generated kernel: no key, no tiling, nothing stored.
TEST_F(TunerLayerTuning, PortableContextHasNoKernelKey) {
    ContextPtr context = tuner_context({.db = db_, .budget_ms = 50, .max_isa = QJIT_ISA_PORTABLE});
    LinearPtr layer = make_layer(context.get(), Shape{});
    ASSERT_TRUE(layer);
    const Tuning t = tuning_of(layer.get());
    EXPECT_SOURCE(t, QJIT_TILING_PORTABLE);
    EXPECT_EQ(t.kernel_key, "");
    EXPECT_EQ(t.tiling, "");
    EXPECT_EQ(t.timed, 0);
    EXPECT_FALSE(fs::exists(db_));
}

// ---- 5. the C API around tuning ---------------------------------------------------------------

class TunerCApi : public TunerDbTest {};

TEST_F(TunerCApi, DatabaseCallsNeedADatabase) {
    ContextPtr context = tuner_context({});
    const char* text = nullptr;
    EXPECT_STATUS(qjit_tuning_db_list(context.get(), &text), QJIT_ERROR_INVALID_ARGUMENT, "tuning database");
    EXPECT_STATUS(qjit_tuning_db_export(context.get(), (dir_ / "out.yaml").c_str()), QJIT_ERROR_INVALID_ARGUMENT,
                  "tuning database");
    EXPECT_STATUS(qjit_tuning_db_import(context.get(), (dir_ / "in.yaml").c_str()), QJIT_ERROR_INVALID_ARGUMENT,
                  "tuning database");
    EXPECT_STATUS(qjit_tuning_db_list(nullptr, &text), QJIT_ERROR_INVALID_ARGUMENT, "context");
}

// list shows the record marked as this machine's; export then import carries it to another database.
TEST_F(TunerCApi, ListExportImport) {
    SKIP_WITHOUT_AVX2();
    ContextPtr context = tuner_context({.db = db_, .budget_ms = 30});
    LinearPtr layer = make_layer(context.get(), Shape{});
    ASSERT_TRUE(layer);
    const Tuning t = tuning_of(layer.get());
    EXPECT_SOURCE(t, QJIT_TILING_SEARCHED);

    const char* text = nullptr;
    ASSERT_EQ(qjit_tuning_db_list(context.get(), &text), QJIT_OK) << qjit_last_error();
    const std::string listing = text;
    EXPECT_NE(listing.find(t.kernel_key), std::string::npos) << listing;
    EXPECT_NE(listing.find('*'), std::string::npos) << listing;
    EXPECT_NE(listing.find(t.tiling), std::string::npos) << listing;

    const std::string exported = (dir_ / "exported.yaml").string();
    ASSERT_EQ(qjit_tuning_db_export(context.get(), exported.c_str()), QJIT_OK) << qjit_last_error();
    ASSERT_TRUE(fs::exists(exported));

    const std::string other_db = (dir_ / "other" / "tuning.yaml").string();
    ContextPtr fresh = tuner_context({.db = other_db, .budget_ms = 30});
    ASSERT_EQ(qjit_tuning_db_list(fresh.get(), &text), QJIT_OK) << qjit_last_error();
    EXPECT_EQ(std::string(text).find(t.kernel_key), std::string::npos) << "a fresh database lists the record";
    ASSERT_EQ(qjit_tuning_db_import(fresh.get(), exported.c_str()), QJIT_OK) << qjit_last_error();
    ASSERT_EQ(qjit_tuning_db_list(fresh.get(), &text), QJIT_OK) << qjit_last_error();
    EXPECT_NE(std::string(text).find(t.kernel_key), std::string::npos) << text;

    qjit::TuningDb db(other_db);
    const std::optional<qjit::TuningRecord> imported = db.find(fingerprint_, t.kernel_key);
    ASSERT_TRUE(imported) << read_file(other_db);
    EXPECT_EQ(imported->tiling, t.tiling);

    // The imported record now serves layers of the fresh context without a search.
    LinearPtr hit = make_layer(fresh.get(), Shape{});
    ASSERT_TRUE(hit);
    EXPECT_SOURCE(tuning_of(hit.get()), QJIT_TILING_DATABASE);

    EXPECT_STATUS(qjit_tuning_db_import(fresh.get(), (dir_ / "missing.yaml").c_str()), QJIT_ERROR_IO, "missing.yaml");
}

TEST_F(TunerCApi, BenchmarkChecksArgumentsAndReportsAPositiveMedian) {
    ContextPtr context = tuner_context({});
    LinearPtr layer = make_layer(context.get(), Shape{});
    ASSERT_TRUE(layer);
    double us = -1;
    EXPECT_STATUS(qjit_linear_benchmark(layer.get(), 0, 3, 0, &us), QJIT_ERROR_INVALID_ARGUMENT, "m");
    EXPECT_STATUS(qjit_linear_benchmark(layer.get(), 1, 0, 0, &us), QJIT_ERROR_INVALID_ARGUMENT, "repeats");
    EXPECT_STATUS(qjit_linear_benchmark(layer.get(), 1, 3, 0, nullptr), QJIT_ERROR_INVALID_ARGUMENT, "median_us");
    EXPECT_STATUS(qjit_linear_benchmark(nullptr, 1, 3, 0, &us), QJIT_ERROR_INVALID_ARGUMENT, "layer");
    for (int cold : {0, 1})
        for (int64_t m : {1, 3}) {
            us = -1;
            ASSERT_EQ(qjit_linear_benchmark(layer.get(), m, 3, cold, &us), QJIT_OK) << qjit_last_error();
            EXPECT_GT(us, 0.0) << "cold " << cold << " m " << m;
            EXPECT_TRUE(std::isfinite(us));
        }
}

TEST_F(TunerCApi, DescribeNamesTheFingerprintAndDatabase) {
    ContextPtr context = tuner_context({.db = db_});
    const char* description = nullptr;
    ASSERT_EQ(qjit_context_describe(context.get(), &description), QJIT_OK) << qjit_last_error();
    ASSERT_NE(description, nullptr);
    const std::string text = description;
    EXPECT_FALSE(text.empty());
    EXPECT_NE(text.find(fingerprint_), std::string::npos) << text;
    EXPECT_NE(text.find(db_), std::string::npos) << text;
    EXPECT_STATUS(qjit_context_describe(nullptr, &description), QJIT_ERROR_INVALID_ARGUMENT, "context");
}

TEST_F(TunerCApi, BadTuningOptionsAreRejected) {
    auto create = [](void (*edit)(qjit_context_options&)) {
        qjit_context_options options;
        qjit_context_options_init(&options);
        options.tuning_db_path = "";
        edit(options);
        qjit_context* context = reinterpret_cast<qjit_context*>(0x1);
        const qjit_status status = qjit_context_create(&options, &context);
        if (status == QJIT_OK) qjit_context_destroy(context);
        else EXPECT_EQ(context, nullptr);
        return status;
    };
    EXPECT_STATUS(create([](qjit_context_options& o) { o.tuning_mode = qjit_tuning_mode(7); }),
                  QJIT_ERROR_INVALID_ARGUMENT, "tuning_mode");
    EXPECT_STATUS(create([](qjit_context_options& o) { o.tuning_batch = -1; }), QJIT_ERROR_INVALID_ARGUMENT,
                  "tuning_batch");
    EXPECT_STATUS(create([](qjit_context_options& o) { o.tuning_budget_ms = NAN; }), QJIT_ERROR_INVALID_ARGUMENT,
                  "tuning_budget_ms");
    EXPECT_EQ(create([](qjit_context_options& o) { o.tuning_mode = QJIT_TUNING_EXHAUSTIVE; }), QJIT_OK);
    EXPECT_EQ(create([](qjit_context_options& o) { o.tuning_batch = 16; }), QJIT_OK);
}

// tuning_batch picks the bucket the key names (the next power of two).
TEST_F(TunerCApi, TuningBatchNamesItsBucket) {
    SKIP_WITHOUT_AVX2();
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = 2;
    options.tuning_db_path = "";
    options.tuning_budget_ms = 0;
    options.tuning_batch = 5;
    qjit_context* raw = nullptr;
    ASSERT_EQ(qjit_context_create(&options, &raw), QJIT_OK) << qjit_last_error();
    ContextPtr context(raw);
    LinearPtr layer = make_layer(context.get(), Shape{});
    ASSERT_TRUE(layer);
    const Tuning t = tuning_of(layer.get());
    EXPECT_NE(t.kernel_key.find(" m=8 "), std::string::npos) << t.kernel_key;
    expect_matches_dequantized(layer.get(), Shape{}, 5, 3);
}

// ---- 6. processes sharing a database -------------------------------------------------------------

class TunerSharedDb : public TunerDbTest {};

// Two processes tuning different shapes at once into one database leave both records.
TEST_F(TunerSharedDb, ConcurrentProcessesKeepBothRecords) {
    SKIP_WITHOUT_AVX2();
    const Shape a{4, 128, 256, 64}, b{4, 128, 256, 96};
    const std::string key_a = key_for(a), key_b = key_for(b);
    ASSERT_NE(key_a, key_b);
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    auto spawn = [&](const Shape& shape) {
        const pid_t pid = ::fork();
        if (pid == 0) {
            int status = 1;
            char go = 0;
            ::close(ready[1]);
            if (::read(ready[0], &go, 1) == 1) {  // start together
                ContextPtr context = tuner_context({.db = db_, .budget_ms = 30});
                LinearPtr layer = context ? make_layer(context.get(), shape) : LinearPtr();
                if (layer && tuning_of(layer.get()).source == QJIT_TILING_SEARCHED) status = 0;
            }
            ::_exit(status);
        }
        return pid;
    };
    const pid_t first = spawn(a);
    const pid_t second = spawn(b);
    ::close(ready[0]);
    ASSERT_EQ(::write(ready[1], "gg", 2), 2);
    ::close(ready[1]);
    for (pid_t pid : {first, second}) {
        ASSERT_GT(pid, 0);
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid << " status " << status;
    }
    qjit::TuningDb db(db_);
    EXPECT_TRUE(db.warning().empty()) << db.warning();
    const std::vector<qjit::TuningRecord> mine = records_of(db, fingerprint_);
    EXPECT_EQ(mine.size(), 2u) << read_file(db_);
    EXPECT_TRUE(db.find(fingerprint_, key_a)) << read_file(db_);
    EXPECT_TRUE(db.find(fingerprint_, key_b)) << read_file(db_);
}

}  // namespace
