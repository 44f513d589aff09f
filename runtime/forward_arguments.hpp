// The checks every forward entry point makes on its activations (qjit_linear_forward_on,
// qjit_moe_forward, the CUDA calls), with the limits qjit.h documents.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/error.hpp"

namespace qjit {

// One forward's activations: at most 2^31 - 1 rows and 2^40 values in x or y.
inline constexpr int64_t kMaxRows = (int64_t(1) << 31) - 1;
inline constexpr int64_t kMaxActivations = int64_t(1) << 40;

// m in 1 .. 2^31 - 1.
inline void require_row_count(int64_t m) { require(m >= 1 && m <= kMaxRows, "m is ", m, "; expected 1 .. 2^31 - 1"); }

// A device forward's row count: 1 .. 2^24 (the CUDA entry points).
inline void require_device_rows(int64_t m) { require(m >= 1 && m <= (1 << 24), "m is ", m, "; expected 1 .. 2^24"); }

// Whether the floats [a, a + a_count) and [b, b + b_count) share an address.
inline bool overlaps(const float* a, int64_t a_count, const float* b, int64_t b_count) {
    const auto* a_begin = reinterpret_cast<const char*>(a);
    const auto* b_begin = reinterpret_cast<const char*>(b);
    return a_begin < b_begin + b_count * int64_t(sizeof(float)) && b_begin < a_begin + a_count * int64_t(sizeof(float));
}

// x (m x K) and y (m x N): within the activation limit, and not overlapping.
inline void require_activations(const float* x, int64_t m, int64_t k, const float* y, int64_t n) {
    require_row_count(m);
    // Checked before the overlap test below, whose byte arithmetic they keep from overflowing.
    require(m <= kMaxActivations / std::max(k, n), "m is ", m, "; m x max(K, N) = ", m, " x ", std::max(k, n),
            " is more than the 2^40 activations a forward may take");
    require(!overlaps(x, m * k, y, m * n), "x and y overlap");
}

// The token rows routed to each of `count` experts (qjit_expert_rows, qjit_ffn_route: rows and
// count), messages naming `name`[e]: a count in 0 .. m, rows given for a count, every row a token
// index and none twice within an expert. The calling thread's marks only grow.
template <typename Route>
void require_routes(const Route* routes, int count, int64_t m, const char* name) {
    for (int e = 0; e < count; ++e) {
        require(routes[e].count >= 0 && routes[e].count <= m, name, "[", e, "].count is ", routes[e].count,
                "; expected 0 .. m = ", m, " (a token at most once per expert)");
        require(routes[e].count == 0 || routes[e].rows != nullptr, name, "[", e, "].rows is NULL");
    }
    thread_local std::vector<int32_t> last_expert;  // per token: the last expert that took it
    if (last_expert.size() < size_t(m)) last_expert.resize(size_t(m));
    std::fill(last_expert.begin(), last_expert.begin() + m, -1);
    for (int e = 0; e < count; ++e)
        for (int64_t i = 0; i < routes[e].count; ++i) {
            const int32_t row = routes[e].rows[i];
            require(row >= 0 && row < m, name, "[", e, "].rows[", i, "] is ", row, "; expected 0 .. m - 1 = ", m - 1);
            require(last_expert[size_t(row)] != e, name, "[", e, "].rows[", i, "] is ", row,
                    ", which the expert already has (a token at most once per expert)");
            last_expert[size_t(row)] = e;
        }
}

}  // namespace qjit
