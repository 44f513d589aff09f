#include "runtime/ffn/expert_sum.hpp"

#include <algorithm>

#include "base/scratch.hpp"
#include "runtime/cpu/thread_pool.hpp"

namespace qjit {

namespace {

// Below this size a dispatch to the pool costs more than the work (as in a layer's forward).
constexpr int64_t kMinParallelScatter = int64_t(1) << 15;
// Columns one scatter task covers: enough that a task costs more than taking it.
constexpr int64_t kScatterColumns = 512;

}  // namespace

void ExpertSum::sum(const qjit_ffn_route* routes, int num_routes, const float* outputs, int64_t m, int64_t n,
                    float* y, ThreadPool& pool) {
    index_terms_by_token(routes, num_routes, outputs, m, n);
    scatter_to_tokens(m, n, y, pool);
}

// Each token's terms, in route order: a counting sort of the routes' rows by token. The outputs
// lie route after route, so walking the routes in order finds them.
void ExpertSum::index_terms_by_token(const qjit_ffn_route* routes, int num_routes, const float* outputs, int64_t m,
                                     int64_t n) {
    int64_t* first = grow(token_first_, size_t(m + 1));
    std::fill(first, first + m + 1, 0);
    for (int e = 0; e < num_routes; ++e)
        for (int64_t i = 0; i < routes[e].count; ++i) ++first[routes[e].rows[i] + 1];
    for (int64_t t = 0; t < m; ++t) first[t + 1] += first[t];
    int64_t* next = grow(token_next_, size_t(m));
    std::copy(first, first + m, next);
    TokenTerm* terms = grow(terms_, size_t(first[m]));
    const float* out = outputs;
    for (int e = 0; e < num_routes; ++e) {
        const qjit_ffn_route& route = routes[e];
        for (int64_t i = 0; i < route.count; ++i, out += n)
            terms[next[route.rows[i]]++] = {out, route.weights ? route.weights[i] : 1.0f};
    }
}

// y[t] = the weighted sum of token t's terms in route order (zeros for a token with none), as one
// dispatch over column ranges.
void ExpertSum::scatter_to_tokens(int64_t m, int64_t n, float* y, ThreadPool& pool) const {
    const int64_t* first = token_first_.data();
    const TokenTerm* terms = terms_.data();
    auto scatter = [&](int64_t chunk) {
        const int64_t c0 = chunk * kScatterColumns, c1 = std::min(n, c0 + kScatterColumns);
        for (int64_t t = 0; t < m; ++t) {
            float* out = y + t * n;
            if (first[t] == first[t + 1]) {
                std::fill(out + c0, out + c1, 0.0f);
                continue;
            }
            const TokenTerm& head = terms[first[t]];
            for (int64_t c = c0; c < c1; ++c) out[c] = head.weight * head.row[c];
            for (int64_t j = first[t] + 1; j < first[t + 1]; ++j)
                for (int64_t c = c0; c < c1; ++c) out[c] += terms[j].weight * terms[j].row[c];
        }
    };
    const int64_t chunks = (n + kScatterColumns - 1) / kScatterColumns;
    pool.parallel_for(chunks, scatter, token_first_[size_t(m)] * n >= kMinParallelScatter);
}

}  // namespace qjit
