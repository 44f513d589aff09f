// The attention problems the ops tests share: a cache of random keys and values stored through
// qjit_kv_cache_store, its queries, the textbook formula in doubles over the keys and values as
// the cache holds them (or as given), and the caps whose ISA family differs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/half.hpp"
#include "base/simd_family.hpp"
#include "qjit/qjit_ops.h"
#include "tuner/cpu_isa.hpp"

namespace qjit::test {

// Every type a key/value cache stores.
inline constexpr qjit_kv_type kCacheTypes[] = {QJIT_KV_F32, QJIT_KV_F16, QJIT_KV_INT8};

// The caps whose family differs: portable, AVX2 and AVX-512, those this CPU runs.
inline std::vector<qjit_isa> family_caps() {
    std::vector<qjit_isa> caps{QJIT_ISA_PORTABLE};
    for (qjit_isa isa : {QJIT_ISA_AVX2, QJIT_ISA_AVX512})
        if (qjit::cpu_supports(isa)) caps.push_back(isa);
    return caps;
}

inline std::string family_of(qjit_isa cap) { return qjit::simd_family_name(qjit::simd_family(cap)); }

struct Problem {
    qjit_attention_shape shape;
    int positions = 0;  // filled cache positions
    int64_t capacity = 0;
    qjit_kv_type type = QJIT_KV_F32;
    std::vector<float> k, v, q;           // rows of keys and values, one query row per position
    std::vector<double> k_held, v_held;   // the keys and values as the cache holds them
    std::vector<std::byte> keys, values;  // the cache, stored by qjit_kv_cache_store

    Problem(qjit_attention_shape s, int filled, uint32_t seed, qjit_kv_type kv_type = QJIT_KV_F32)
        : shape(s), positions(filled), type(kv_type) {
        capacity = (filled + QJIT_ATTENTION_KEY_BLOCK - 1) / QJIT_ATTENTION_KEY_BLOCK * QJIT_ATTENTION_KEY_BLOCK;
        std::mt19937 rng(seed);
        std::normal_distribution<float> normal(0.0f, 1.5f);
        for (auto* rows : {&k, &v}) {
            rows->resize(size_t(filled) * kv_dim());
            for (float& x : *rows) x = normal(rng);
        }
        q.resize(size_t(filled) * q_dim());
        for (float& x : q) x = normal(rng);
        k_held = held(k);
        v_held = held(v);
        keys.assign(qjit_kv_cache_bytes(&shape, capacity, type), std::byte{0});
        values.assign(keys.size(), std::byte{0});
        const qjit_kv_cache view = cache();
        EXPECT_EQ(qjit_kv_cache_store(&shape, &view, k.data(), v.data(), 0, filled), QJIT_OK) << qjit_last_error();
    }
    // Rows of keys or values as the cache holds them: fp16 rounds each; int8 holds each head's row
    // as codes round(x * 127 / amax) times the step amax / 127 (qjit_kv_type).
    std::vector<double> held(const std::vector<float>& rows) const {
        std::vector<double> out(rows.begin(), rows.end());
        if (type == QJIT_KV_F16)
            for (size_t i = 0; i < rows.size(); ++i) out[i] = qjit::round_to_half(rows[i]);
        if (type != QJIT_KV_INT8) return out;
        const size_t hs = size_t(shape.head_size);
        for (size_t row = 0; row < rows.size(); row += hs) {
            float amax = 0.0f;
            for (size_t i = 0; i < hs; ++i) amax = std::max(amax, std::fabs(rows[row + i]));
            const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f, step = amax / 127.0f;
            for (size_t i = 0; i < hs; ++i) out[row + i] = double(std::nearbyint(rows[row + i] * inverse)) * step;
        }
        return out;
    }
    qjit_kv_cache cache() const {
        return {const_cast<std::byte*>(keys.data()), const_cast<std::byte*>(values.data()), capacity, type};
    }
    size_t q_dim() const { return size_t(shape.n_heads * shape.head_size); }
    size_t kv_dim() const { return size_t(shape.n_kv_heads * shape.head_size); }

    // Attention of the query at `t` (position t) in doubles, the textbook way, over the keys and
    // values as the cache holds them (rounded = true) or as they were given; with a window w > 0, over
    // positions t - w < s <= t only.
    std::vector<double> reference(int t, bool rounded = true, int window = 0) const {
        const int first = window > 0 ? std::max(0, t - window + 1) : 0;
        auto key = [&](size_t at) { return rounded ? k_held[at] : double(k[at]); };
        auto value = [&](size_t at) { return rounded ? v_held[at] : double(v[at]); };
        const int hs = shape.head_size, kv_mul = shape.n_heads / shape.n_kv_heads;
        const size_t kv_dim = size_t(shape.n_kv_heads * hs);
        std::vector<double> out(q_dim());
        for (int h = 0; h < shape.n_heads; ++h) {
            const size_t kv = size_t(h / kv_mul) * size_t(hs);
            std::vector<double> score(size_t(t) + 1, 0.0);
            double most = -1e300, sum = 0.0;
            for (int s = first; s <= t; ++s) {
                double dot = 0.0;
                for (int i = 0; i < hs; ++i)
                    dot += double(q[size_t(t) * q_dim() + size_t(h * hs + i)]) * key(size_t(s) * kv_dim + kv + size_t(i));
                score[size_t(s)] = dot / std::sqrt(double(hs));
                most = std::max(most, score[size_t(s)]);
            }
            for (int s = first; s <= t; ++s) sum += (score[size_t(s)] = std::exp(score[size_t(s)] - most));
            for (int i = 0; i < hs; ++i) {
                double o = 0.0;
                for (int s = first; s <= t; ++s) o += score[size_t(s)] * value(size_t(s) * kv_dim + kv + size_t(i));
                out[size_t(h * hs + i)] = o / sum;
            }
        }
        return out;
    }

    // qjit_attention_causal, or with a window > 0 qjit_attention_causal_window.
    std::vector<float> attend(qjit_context* context, int pos0, int count, int window = 0) const {
        std::vector<float> out(size_t(count) * q_dim(), std::numeric_limits<float>::quiet_NaN());
        const qjit_kv_cache view = cache();
        const float* rows = q.data() + size_t(pos0) * q_dim();
        EXPECT_EQ(window > 0 ? qjit_attention_causal_window(context, &shape, &view, rows, pos0, count, window, out.data())
                             : qjit_attention_causal(context, &shape, &view, rows, pos0, count, out.data()),
                  QJIT_OK)
            << qjit_last_error();
        return out;
    }
};

}  // namespace qjit::test
