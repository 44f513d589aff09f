// qjit_parallel_for: the caller's loops on a context's threads. Every index exactly once, in ranges
// of at least the grain, on one thread and on several; bad arguments named; a nested call and a
// call from two threads at once finish.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "qjit/qjit.h"
#include "test_support.hpp"

namespace qjit {
namespace {

struct Seen {
    std::vector<std::atomic<int>> hits;
    std::mutex mutex;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    explicit Seen(int64_t count) : hits(size_t(count)) {}
};

void record(void* user, int64_t begin, int64_t end) {
    Seen& seen = *static_cast<Seen*>(user);
    for (int64_t i = begin; i < end; ++i) seen.hits[size_t(i)].fetch_add(1);
    std::lock_guard lock(seen.mutex);
    seen.ranges.emplace_back(begin, end);
}

TEST(ParallelFor, EveryIndexOnceInRangesOfAtLeastTheGrain) {
    for (int threads : {1, 2, 3}) {
        const test::ContextPtr context = test::make_test_context(threads);
        for (int64_t count : {1, 7, 64, 1000, 4097})
            for (int64_t grain : {1, 5, 64, 5000}) {
                Seen seen(count);
                ASSERT_EQ(qjit_parallel_for(context.get(), count, grain, record, &seen), QJIT_OK) << qjit_last_error();
                for (int64_t i = 0; i < count; ++i)
                    ASSERT_EQ(seen.hits[size_t(i)].load(), 1) << "index " << i << " of " << count << ", grain " << grain;
                for (const auto& [begin, end] : seen.ranges) {
                    EXPECT_LT(begin, end);
                    if (end != count) EXPECT_GE(end - begin, grain) << begin << ".." << end;
                }
                EXPECT_LE(int64_t(seen.ranges.size()), 4 * threads) << "a few ranges per thread";
            }
    }
}

TEST(ParallelFor, ZeroCountCallsNothingAndBadArgumentsAreNamed) {
    const test::ContextPtr context = test::make_test_context(2);
    Seen seen(1);
    EXPECT_EQ(qjit_parallel_for(context.get(), 0, 1, record, &seen), QJIT_OK);
    EXPECT_TRUE(seen.ranges.empty());
    const struct {
        qjit_context* context;
        int64_t count, grain;
        qjit_range_fn fn;
        const char* named;
    } bad[] = {{nullptr, 1, 1, record, "context is NULL"},
               {context.get(), 1, 1, nullptr, "fn is NULL"},
               {context.get(), -1, 1, record, "count is -1"},
               {context.get(), 1, 0, record, "grain is 0"}};
    for (const auto& b : bad) {
        EXPECT_EQ(qjit_parallel_for(b.context, b.count, b.grain, b.fn, &seen), QJIT_ERROR_INVALID_ARGUMENT) << b.named;
        EXPECT_NE(std::string(qjit_last_error()).find(b.named), std::string::npos) << qjit_last_error();
    }
}

// A range that calls qjit_parallel_for on the same context: the inner loop runs on its caller.
struct Nested {
    qjit_context* context;
    Seen* inner;
};

TEST(ParallelFor, ANestedCallRunsOnItsCaller) {
    const test::ContextPtr context = test::make_test_context(2);
    Seen inner(100 * 10);
    Nested nested{context.get(), &inner};
    const qjit_range_fn outer = [](void* user, int64_t begin, int64_t end) {
        const Nested& n = *static_cast<Nested*>(user);
        for (int64_t i = begin; i < end; ++i) {
            struct Slice {
                Seen* seen;
                int64_t base;
            } slice{n.inner, i * 10};
            const qjit_range_fn fill = [](void* user, int64_t b, int64_t e) {
                const Slice& s = *static_cast<Slice*>(user);
                for (int64_t j = b; j < e; ++j) s.seen->hits[size_t(s.base + j)].fetch_add(1);
            };
            ASSERT_EQ(qjit_parallel_for(n.context, 10, 1, fill, &slice), QJIT_OK);
        }
    };
    ASSERT_EQ(qjit_parallel_for(context.get(), 100, 1, outer, &nested), QJIT_OK) << qjit_last_error();
    for (size_t i = 0; i < inner.hits.size(); ++i) ASSERT_EQ(inner.hits[i].load(), 1) << i;
}

TEST(ParallelFor, TwoCallersAtOnceBothFinish) {
    const test::ContextPtr context = test::make_test_context(2);
    Seen a(50000), b(50000);
    std::thread other([&] { EXPECT_EQ(qjit_parallel_for(context.get(), 50000, 100, record, &a), QJIT_OK); });
    EXPECT_EQ(qjit_parallel_for(context.get(), 50000, 100, record, &b), QJIT_OK);
    other.join();
    for (size_t i = 0; i < a.hits.size(); ++i) ASSERT_TRUE(a.hits[i].load() == 1 && b.hits[i].load() == 1) << i;
}

}  // namespace
}  // namespace qjit
