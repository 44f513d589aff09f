// Inputs, weights, errors and checks the quantizer tests share: correlated calibration inputs, weights
// with heavy tails, and a layer's output error on inputs of Hessian H.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "format/quantized_matrix.hpp"
#include "format/reference.hpp"
#include "quant/hessian.hpp"

namespace qjit {

// Runs body, expecting an invalid-argument Error whose message contains `word`.
template <typename Body>
void expect_invalid(Body&& body, const std::string& word) {
    try {
        body();
        ADD_FAILURE() << "no error; expected one mentioning '" << word << "'";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT) << e.what();
        EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << "'" << e.what() << "' lacks '" << word << "'";
    }
}

// m x k calibration inputs with correlated features of unequal size: X = Z A diag(s), Z Gaussian,
// A = 0.5 I + a random mixing, s in [0.25, 2].
inline std::vector<float> correlated_inputs(int64_t m, int64_t k, uint32_t seed) {
    std::mt19937 generator(seed);
    std::normal_distribution<float> gaussian(0.0f, 1.0f);
    std::uniform_real_distribution<float> size(0.25f, 2.0f);
    std::vector<float> z(size_t(m * k)), a(size_t(k * k)), s(static_cast<size_t>(k));
    for (float& v : z) v = gaussian(generator);
    for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < k; ++j)
            a[size_t(i * k + j)] = (i == j ? 0.5f : 0.0f) + gaussian(generator) / std::sqrt(float(k));
    for (float& v : s) v = size(generator);
    std::vector<float> x(size_t(m * k), 0.0f);
    for (int64_t r = 0; r < m; ++r)
        for (int64_t i = 0; i < k; ++i) {
            const float zi = z[size_t(r * k + i)];
            for (int64_t j = 0; j < k; ++j) x[size_t(r * k + j)] += zi * a[size_t(i * k + j)];
        }
    for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < k; ++j) x[size_t(r * k + j)] *= s[size_t(j)];
    return x;
}

// Weights like a layer's: Gaussian with a few heavy-tailed entries (Student-t, 3 degrees of freedom).
inline std::vector<float> layer_weights(int64_t k, int64_t n, uint32_t seed) {
    std::mt19937 generator(seed);
    std::student_t_distribution<float> student(3.0f);
    std::vector<float> w(size_t(k * n));
    for (float& v : w) v = 0.02f * student(generator);
    return w;
}

inline Hessian hessian_of(const std::vector<float>& x, int64_t k) {
    Hessian h(k);
    h.add(x.data(), int64_t(x.size()) / k);
    return h;
}

// ||X W - X W'||^2 = sum over columns of d^T H d, d = W - W' (both K x N, row-major).
inline double output_error(const Hessian& h, const std::vector<float>& w, const std::vector<float>& wq) {
    const int64_t k = h.k(), n = int64_t(w.size()) / k;
    std::vector<double> d(size_t(k * n));
    for (size_t i = 0; i < d.size(); ++i) d[i] = double(w[i]) - double(wq[i]);
    const std::vector<double>& hf = h.full();
    double sum = 0.0;
    std::vector<double> hd(static_cast<size_t>(n));
    for (int64_t i = 0; i < k; ++i) {
        std::fill(hd.begin(), hd.end(), 0.0);
        for (int64_t j = 0; j < k; ++j) {
            const double hij = hf[size_t(i * k + j)];
            for (int64_t c = 0; c < n; ++c) hd[size_t(c)] += hij * d[size_t(j * n + c)];
        }
        for (int64_t c = 0; c < n; ++c) sum += d[size_t(i * n + c)] * hd[size_t(c)];
    }
    return sum;
}

// The same for a quantized matrix, dequantized by the oracle.
inline double output_error(const Hessian& h, const std::vector<float>& w, const QuantizedMatrix& q) {
    return output_error(h, w, dequantize(q));
}

}  // namespace qjit
