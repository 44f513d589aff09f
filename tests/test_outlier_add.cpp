// The vectorised outlier term (runtime/cpu/outlier_add.hpp) against a plain loop: columns with no
// outliers, with fewer than a vector and with several vectors of them, odd and even counts; one
// row, and row counts below, at and above a chunk of 16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/outlier_add.hpp"
#include "test_support.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {
namespace {

struct Outliers {
    std::vector<int64_t> column_start;
    std::vector<int32_t> rows;
    std::vector<float> values;
    OutlierColumns view() const { return {column_start.data(), rows.data(), values.data()}; }
};

// Column c gets counts[c % counts.size()] outliers at distinct random rows of k.
Outliers random_outliers(int64_t k, int64_t n, const std::vector<int>& counts, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(-4.f, 4.f);
    Outliers o;
    o.column_start.push_back(0);
    for (int64_t c = 0; c < n; ++c) {
        std::vector<int32_t> order(static_cast<size_t>(k));
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        const int count = counts[size_t(c) % counts.size()];
        for (int e = 0; e < count; ++e) o.rows.push_back(order[size_t(e)]), o.values.push_back(value(rng));
        o.column_start.push_back(int64_t(o.rows.size()));
    }
    return o;
}

// y[i][c] + the term, summed in double.
std::vector<float> expected_sum(const Outliers& o, const std::vector<float>& x, int64_t m, int64_t k, int64_t n,
                                const std::vector<float>& y) {
    std::vector<float> out = y;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t c = 0; c < n; ++c) {
            double sum = 0;
            for (int64_t e = o.column_start[size_t(c)]; e < o.column_start[size_t(c + 1)]; ++e)
                sum += double(x[size_t(i * k + o.rows[size_t(e)])]) * o.values[size_t(e)];
            out[size_t(i * n + c)] += float(sum);
        }
    return out;
}

// The executor calls these only where its generated kernels run.
#define REQUIRE_AVX2() \
    if (!cpu_supports(QJIT_ISA_AVX2)) GTEST_SKIP() << "no AVX2: the generated kernels do not run here"

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    int reported = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs(got[i] - want[i]) <= 1e-4f * (1 + std::fabs(want[i]))) && reported++ < 5)
            ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
}

TEST(OutlierAdd, OneRowMatchesAPlainLoop) {
    REQUIRE_AVX2();
    const int64_t k = 300, n = 37;
    // 0, fewer than 8, exactly 8 and 16, and more than two vectors of either width.
    const Outliers o = random_outliers(k, n, {0, 3, 8, 16, 1, 0, 35, 9, 17}, 1);
    const std::vector<float> x = test::random_floats(size_t(k), 2);
    const std::vector<float> y0 = test::random_floats(size_t(n), 3);
    const std::vector<float> want = expected_sum(o, x, 1, k, n, y0);
    std::vector<float> y = y0;
    add_outliers_one_row(o.view(), x.data(), 0, 20, y.data());  // two calls: column ranges
    add_outliers_one_row(o.view(), x.data(), 20, n, y.data());
    expect_near_all(y, want, "one row");
}

TEST(OutlierAdd, TransposedRowsMatchAPlainLoop) {
    REQUIRE_AVX2();
    const int64_t k = 129, n = 23;
    const Outliers o = random_outliers(k, n, {5, 0, 12, 1, 40}, 4);
    for (const int64_t m : {2, 5, 16, 17, 40}) {
        const std::vector<float> x = test::random_floats(size_t(m * k), uint32_t(m));
        const std::vector<float> y0 = test::random_floats(size_t(m * n), uint32_t(m + 100));
        const std::vector<float> want = expected_sum(o, x, m, k, n, y0);
        std::vector<float> buffer;
        ThreadPool pool(2);
        const float* xt = transpose_for_outliers(x.data(), m, k, buffer, pool);
        std::vector<float> y = y0;
        // Rows in two tiles, as the executor's row tiles call it: [0, split) and [split, m).
        const int64_t split = m / 3 + 1;
        add_outliers_transposed(o.view(), xt, m, split, 0, n, y.data(), n);
        add_outliers_transposed(o.view(), xt + split, m, m - split, 0, n, y.data() + split * n, n);
        expect_near_all(y, want, "m=" + std::to_string(m));
    }
}

TEST(OutlierAdd, TransposeOnThePoolIsExact) {
    const int64_t k = 1000, m = 21;  // enough to be spread over the pool, K not a multiple of a block
    const std::vector<float> x = test::random_floats(size_t(m * k), 7);
    std::vector<float> buffer(5, 1.f);
    ThreadPool pool(2);
    const float* xt = transpose_for_outliers(x.data(), m, k, buffer, pool);
    for (int64_t r = 0; r < k; ++r)
        for (int64_t i = 0; i < m; ++i) ASSERT_EQ(xt[r * m + i], x[size_t(i * k + r)]) << "row " << i << ", k " << r;
    for (int64_t i = 0; i < kOutlierRowChunk; ++i) EXPECT_EQ(xt[m * k + i], 0.f) << "padding " << i;
}

}  // namespace
}  // namespace qjit
