// Attention plans (runtime/ops/attention_plan.hpp): every family and row count against the
// textbook formula, the rows changing no bit, and qjit_attention_tune's choice (the model's pick
// untimed, a timed choice under each cap, stored in and read back from the tuning database, used by
// the context's later calls) and its bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "runtime/context.hpp"
#include "runtime/ops/attention_kernels.hpp"
#include "runtime/ops/attention_plan.hpp"
#include "runtime/ops/causal_attention.hpp"
#include "tests/attention_problem.hpp"
#include "tests/test_support.hpp"

namespace {

using qjit::SimdFamily;
using qjit::ops::AttentionPlan;
using qjit::test::family_caps;
using qjit::test::kCacheTypes;
using qjit::test::family_of;
using qjit::test::make_test_context;
using qjit::test::Problem;


// A context under `cap` tuning with `budget_ms` against the database at `db` ("" for none).
qjit::test::ContextPtr tuning_context(qjit_isa cap, double budget_ms, const std::string& db = "") {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = 2;
    options.max_isa = cap;
    options.tuning_db_path = db.c_str();
    options.tuning_budget_ms = budget_ms;
    qjit_context* context = nullptr;
    EXPECT_EQ(qjit_context_create(&options, &context), QJIT_OK) << qjit_last_error();
    return qjit::test::ContextPtr(context);
}

// The outputs of the queries at positions pos0 .. pos0 + count - 1 under `plan`.
std::vector<float> attend_with(qjit_context& context, const AttentionPlan& plan, const Problem& p, int pos0, int count) {
    std::vector<float> out(size_t(count) * p.q_dim());
    const qjit_kv_cache view = p.cache();
    qjit::ops::causal_attention(context, plan, p.shape, view, p.q.data() + size_t(pos0) * p.q_dim(), pos0, count,
                                out.data());
    return out;
}

// Every row count of every family this CPU runs (8 queries a key/value head, so tasks of 1 to 8
// rows all occur, with remainders) matches the formula, and within a family the row counts and
// single positions agree bit for bit.
TEST(AttentionPlans, EveryFamilyAndRowCountMatchesTheFormulaAndRowsChangeNoBit) {
    for (const qjit_kv_type type : kCacheTypes) {
        const Problem p({40, 16, 2}, 45, 23, type);
        for (qjit_isa cap : family_caps()) {
            const auto context = make_test_context(1, cap);
            const SimdFamily family = qjit::simd_family(cap);
            std::vector<float> first;
            for (int rows = 1; rows <= qjit::ops::max_attention_rows(family); ++rows) {
                const AttentionPlan plan{family, rows};
                SCOPED_TRACE(qjit::ops::plan_kernel_name(plan) + std::string(type == QJIT_KV_F32 ? " f32" : " rounded"));
                const std::vector<float> out = attend_with(*context, plan, p, 0, p.positions);
                double worst = 0.0;
                for (int t = 0; t < p.positions; ++t) {
                    const std::vector<double> expected = p.reference(t);
                    for (size_t i = 0; i < expected.size(); ++i)
                        worst = std::max(worst, std::fabs(out[size_t(t) * p.q_dim() + i] - expected[i]));
                }
                EXPECT_LT(worst, 2e-5);
                if (first.empty()) first = out;
                EXPECT_EQ(std::memcmp(out.data(), first.data(), out.size() * sizeof(float)), 0);
                const std::vector<float> last = attend_with(*context, plan, p, p.positions - 1, 1);
                EXPECT_EQ(std::memcmp(last.data(), first.data() + (p.positions - 1) * p.q_dim(),
                                      last.size() * sizeof(float)),
                          0);
            }
        }
    }
}

TEST(AttentionPlans, TextRoundTripsAndBadKnobsAreNamed) {
    for (const AttentionPlan plan : {AttentionPlan{SimdFamily::Portable, 1}, AttentionPlan{SimdFamily::Avx2, 4},
                                     AttentionPlan{SimdFamily::Avx512, 8}}) {
        const AttentionPlan back = qjit::ops::parse_plan(qjit::ops::plan_text(plan));
        EXPECT_EQ(back.family, plan.family);
        EXPECT_EQ(back.rows, plan.rows);
    }
    EXPECT_EQ(qjit::ops::plan_text({SimdFamily::Avx2, 3}), "family=avx2,rows=3");
    EXPECT_STREQ(qjit::ops::plan_kernel_name({SimdFamily::Avx512, 8}), "attention_avx512_r8");
    for (const char* bad : {"", "family=avx2", "rows=4", "family=sse4,rows=4", "family=avx2,rows=8",
                            "family=avx2,rows=0", "family=avx2,rows=4,prefetch=2", "family=avx512,rows=12"}) {
        try {
            qjit::ops::parse_plan(bad);
            ADD_FAILURE() << "accepted \"" << bad << "\"";
        } catch (const qjit::Error& e) {
            EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT);
            EXPECT_NE(std::string(e.what()).find("attention plan"), std::string::npos) << e.what();
        }
    }
}

// Untimed (budget 0), the widest family under the cap at 4 rows; timed, any family under the cap,
// and the context's calls then give the bits of the named plan, a prompt and its positions one by
// one alike.
TEST(AttentionTune, TheChoiceStaysUnderTheCapAndTheContextRunsIt) {
    const qjit_attention_shape shape{64, 9, 3};
    const Problem p(shape, 70, 5);
    for (qjit_isa cap : family_caps()) {
        const char* name = nullptr;
        const auto untimed = tuning_context(cap, 0);
        ASSERT_EQ(qjit_attention_tune(untimed.get(), &shape, QJIT_KV_F32, &name), QJIT_OK) << qjit_last_error();
        EXPECT_EQ(std::string(name), "attention_" + family_of(cap) + "_r4");

        const auto timed = tuning_context(cap, 100);
        ASSERT_EQ(qjit_attention_tune(timed.get(), &shape, QJIT_KV_F32, &name), QJIT_OK) << qjit_last_error();
        const std::string chosen(name);
        const auto& plans = timed->attention_plans.chosen;
        ASSERT_EQ(plans.size(), 1u);
        const AttentionPlan plan = plans.begin()->second;
        EXPECT_EQ(chosen, qjit::ops::plan_kernel_name(plan));
        EXPECT_LE(int(plan.family), int(qjit::simd_family(cap))) << chosen;

        const std::vector<float> expected = attend_with(*timed, plan, p, 0, p.positions);
        const std::vector<float> whole = p.attend(timed.get(), 0, p.positions);
        std::vector<float> stepped;
        for (int t = 0; t < p.positions; ++t) {
            const std::vector<float> step = p.attend(timed.get(), t, 1);
            stepped.insert(stepped.end(), step.begin(), step.end());
        }
        const size_t bytes = whole.size() * sizeof(float);
        EXPECT_EQ(std::memcmp(whole.data(), expected.data(), bytes), 0) << chosen;
        EXPECT_EQ(std::memcmp(stepped.data(), expected.data(), bytes), 0) << chosen;
    }
}

// A timed choice is stored under its shape, cache type, cap and threads, and a new context reads it
// back without timing.
TEST(AttentionTune, TheChoiceIsStoredInTheDatabaseAndReadBack) {
    const std::string db = ::testing::TempDir() + "attention_tune_db.yaml";
    std::remove(db.c_str());
    const qjit_attention_shape shape{80, 8, 2};
    const char* stored = nullptr;
    {
        const auto context = tuning_context(QJIT_ISA_AUTO, 100, db);
        ASSERT_EQ(qjit_attention_tune(context.get(), &shape, QJIT_KV_F16, &stored), QJIT_OK) << qjit_last_error();
    }
    std::ifstream in(db);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_NE(text.str().find("attention_f16 head=80 heads=8/2"), std::string::npos) << text.str();
    EXPECT_NE(text.str().find(std::string("family=")), std::string::npos);

    // A budget too small to time anything still returns the stored choice.
    const auto again = tuning_context(QJIT_ISA_AUTO, 0.001, db);
    const char* read = nullptr;
    ASSERT_EQ(qjit_attention_tune(again.get(), &shape, QJIT_KV_F16, &read), QJIT_OK) << qjit_last_error();
    EXPECT_STREQ(read, stored);
    std::remove(db.c_str());
}

TEST(AttentionTune, BadArgumentsAreRefusedByName) {
    const auto context = make_test_context(1);
    const qjit_attention_shape good{64, 4, 2}, uneven{64, 5, 2}, huge{512, 4, 4};
    EXPECT_EQ(qjit_attention_tune(nullptr, &good, QJIT_KV_F32, nullptr), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_attention_tune(context.get(), nullptr, QJIT_KV_F32, nullptr), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_attention_tune(context.get(), &good, qjit_kv_type(7), nullptr), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("type"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(qjit_attention_tune(context.get(), &uneven, QJIT_KV_F32, nullptr), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(qjit_last_error()).find("evenly"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(qjit_attention_tune(context.get(), &huge, QJIT_KV_F32, nullptr), QJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(qjit_attention_tune(context.get(), &good, QJIT_KV_F32, nullptr), QJIT_OK);
}

}  // namespace
