// The last step of a mixture of experts (the MoE call, runtime/moe_forward.cpp, and the Experts FFN,
// runtime/ffn/experts_ffn.cpp): each expert's output rows scattered back to token order, weighted
// and summed per token in expert order. The scratch only grows, so steady-state calls do not
// allocate.
#pragma once

#include <cstdint>
#include <vector>

#include "qjit/qjit_ffn.h"

namespace qjit {

class ThreadPool;

class ExpertSum {
public:
    // y (m x n) = sum over routes e and their rows i of weights[i] * outputs_e[i]; tokens no route
    // takes get zeros. outputs holds each route's count x n rows, route after route (routes without
    // rows take none). Routes are valid: rows in [0, m).
    void sum(const qjit_ffn_route* routes, int num_routes, const float* outputs, int64_t m, int64_t n, float* y,
             ThreadPool& pool);

private:
    // One route's term of one token's output.
    struct TokenTerm {
        const float* row;  // the route's output row for the token
        float weight;
    };
    void index_terms_by_token(const qjit_ffn_route* routes, int num_routes, const float* outputs, int64_t m,
                              int64_t n);
    void scatter_to_tokens(int64_t m, int64_t n, float* y, ThreadPool& pool) const;

    std::vector<int64_t> token_first_;  // [m + 1]: each token's first term
    std::vector<int64_t> token_next_;   // [m]: the next free term while filling
    std::vector<TokenTerm> terms_;      // by token, then by route
};

}  // namespace qjit
