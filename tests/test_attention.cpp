// The blocked causal attention (models/attention.hpp) against a plain double-precision reference on
// odd shapes, and its promises: results independent of the threads and of how queries are batched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "models/attention.hpp"
#include "base/float_vectors.hpp"

namespace {

using qjit_models::AttentionHeads;
using qjit_models::kKeyBlock;
using qjit_models::KeyValueCache;

struct Problem {
    AttentionHeads heads;
    int positions = 0;  // filled cache positions
    size_t key_row = 0;
    std::vector<float> keys, values, q;  // q: one query row per position

    Problem(AttentionHeads h, int filled, uint32_t seed) : heads(h), positions(filled) {
        key_row = size_t((filled + kKeyBlock - 1) / kKeyBlock * kKeyBlock);
        const size_t kv_dim = size_t(h.n_kv_heads * h.head_size), q_dim = size_t(h.n_heads * h.head_size);
        std::mt19937 rng(seed);
        std::normal_distribution<float> normal(0.0f, 1.5f);
        keys.assign(kv_dim * key_row, 0.0f);
        for (size_t i = 0; i < kv_dim; ++i)
            for (int s = 0; s < filled; ++s) keys[i * key_row + size_t(s)] = normal(rng);
        values.resize(size_t(filled) * kv_dim);
        for (float& v : values) v = normal(rng);
        q.resize(size_t(filled) * q_dim);
        for (float& v : q) v = normal(rng);
    }
    KeyValueCache cache() const { return {keys.data(), key_row, values.data()}; }
    size_t q_dim() const { return size_t(heads.n_heads * heads.head_size); }

    // Attention of the query at `t` (position t) in doubles, the textbook way.
    std::vector<double> reference(int t) const {
        const int hs = heads.head_size, kv_mul = heads.n_heads / heads.n_kv_heads;
        const size_t kv_dim = size_t(heads.n_kv_heads * hs);
        std::vector<double> out(q_dim());
        for (int h = 0; h < heads.n_heads; ++h) {
            const size_t kv = size_t(h / kv_mul) * size_t(hs);
            std::vector<double> score(size_t(t) + 1);
            double most = -1e300, sum = 0.0;
            for (int s = 0; s <= t; ++s) {
                double dot = 0.0;
                for (int i = 0; i < hs; ++i)
                    dot += double(q[size_t(t) * q_dim() + size_t(h * hs + i)]) * keys[(kv + size_t(i)) * key_row + size_t(s)];
                score[size_t(s)] = dot / std::sqrt(double(hs));
                most = std::max(most, score[size_t(s)]);
            }
            for (double& v : score) sum += (v = std::exp(v - most));
            for (int i = 0; i < hs; ++i) {
                double o = 0.0;
                for (int s = 0; s <= t; ++s) o += score[size_t(s)] * values[size_t(s) * kv_dim + kv + size_t(i)];
                out[size_t(h * hs + i)] = o / sum;
            }
        }
        return out;
    }
};

std::shared_ptr<qjit_context> threads(int count) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = count;
    qjit_context* raw = nullptr;
    EXPECT_EQ(qjit_context_create(&options, &raw), QJIT_OK) << qjit_last_error();
    return {raw, qjit_context_destroy};
}

struct Shape {
    int head_size, n_heads, n_kv_heads, positions;
};

class Attention : public ::testing::TestWithParam<Shape> {};

// Head sizes through every path of the value sums (64-wide, 16-wide and scalar tails), grouped
// queries (3 and 4 heads a key/value head) and plain multi-head, prompts that end inside a key
// block and on its edge.
INSTANTIATE_TEST_SUITE_P(Shapes, Attention,
                         ::testing::Values(Shape{8, 8, 8, 45}, Shape{64, 9, 3, 70}, Shape{100, 4, 1, 33},
                                           Shape{80, 8, 2, 64}, Shape{128, 2, 2, 1}, Shape{17, 3, 3, 96}));

TEST_P(Attention, MatchesTheTextbookFormula) {
    const Shape shape = GetParam();
    const Problem p({shape.head_size, shape.n_heads, shape.n_kv_heads}, shape.positions, 7);
    std::vector<float> out(p.q.size(), std::numeric_limits<float>::quiet_NaN());
    qjit_models::causal_attention(nullptr, p.heads, p.cache(), p.q.data(), 0, shape.positions, out.data());
    double worst = 0.0;
    for (int t = 0; t < shape.positions; ++t) {
        const std::vector<double> expected = p.reference(t);
        for (size_t i = 0; i < expected.size(); ++i)
            worst = std::max(worst, std::fabs(double(out[size_t(t) * p.q_dim() + i]) - expected[i]));
    }
    EXPECT_LT(worst, 2e-5) << "head " << shape.head_size << ", " << shape.positions << " positions";
}

// A prompt in one call, the same queries one position at a time (as decoding makes them) and the
// prompt on two threads give the same outputs bit for bit.
TEST_P(Attention, BatchingAndThreadsChangeNoBit) {
    const Shape shape = GetParam();
    const Problem p({shape.head_size, shape.n_heads, shape.n_kv_heads}, shape.positions, 11);
    std::vector<float> whole(p.q.size()), stepped(p.q.size()), threaded(p.q.size());
    qjit_models::causal_attention(nullptr, p.heads, p.cache(), p.q.data(), 0, shape.positions, whole.data());
    for (int t = 0; t < shape.positions; ++t)
        qjit_models::causal_attention(nullptr, p.heads, p.cache(), p.q.data() + size_t(t) * p.q_dim(), t, 1,
                                      stepped.data() + size_t(t) * p.q_dim());
    const auto two = threads(2);
    qjit_models::causal_attention(two.get(), p.heads, p.cache(), p.q.data(), 0, shape.positions, threaded.data());
    EXPECT_EQ(std::memcmp(whole.data(), stepped.data(), whole.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(whole.data(), threaded.data(), whole.size() * sizeof(float)), 0);
}

TEST(AttentionInput, ShapesItCannotRunAreRefused) {
    const Problem p({8, 4, 4}, 10, 1);
    std::vector<float> out(p.q.size());
    EXPECT_THROW(qjit_models::causal_attention(nullptr, {8, 4, 3}, p.cache(), p.q.data(), 0, 1, out.data()),
                 std::runtime_error);
    EXPECT_THROW(qjit_models::causal_attention(nullptr, {300, 1, 1}, p.cache(), p.q.data(), 0, 1, out.data()),
                 std::runtime_error);
    const KeyValueCache ragged{p.keys.data(), 31, p.values.data()};
    EXPECT_THROW(qjit_models::causal_attention(nullptr, p.heads, ragged, p.q.data(), 0, 1, out.data()),
                 std::runtime_error);
    EXPECT_THROW(qjit_models::causal_attention(nullptr, p.heads, p.cache(), p.q.data(), 30, 5, out.data()),
                 std::runtime_error);
}

TEST(Exp16, MatchesStdExpAndItsLimits) {
    using qjit::Floats16;
    double worst = 0.0;
    for (float x0 = -87.0f; x0 < 88.0f; x0 += 0.37f) {
        Floats16 x;
        for (int i = 0; i < 16; ++i) x[i] = x0 + 0.0213f * float(i);
        const Floats16 y = qjit::exp16(x);
        for (int i = 0; i < 16; ++i) {
            const double expected = std::exp(double(x[i]));
            worst = std::max(worst, std::fabs(double(y[i]) - expected) / expected);
        }
    }
    EXPECT_LT(worst, 3e-7);  // within 2.5 ulp
    Floats16 limits = {};
    limits[0] = -std::numeric_limits<float>::infinity();
    limits[1] = -100.0f;
    limits[2] = 100.0f;
    limits[3] = 0.0f;
    const Floats16 y = qjit::exp16(limits);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_EQ(y[2], std::numeric_limits<float>::infinity());
    EXPECT_EQ(y[3], 1.0f);
}

}  // namespace
