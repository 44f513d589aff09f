// Helpers shared by the test suites: random data, the oracle's error bound, RAII for C handles.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "qjit/qjit.h"
#include "format/quantized_matrix.hpp"
#include "jit/x86/cpu_kernel.hpp"

// Expects `status` with a last-error message that mentions `word`.
#define EXPECT_STATUS(call, status, word)                                                \
    do {                                                                                 \
        EXPECT_EQ((call), (status)) << qjit_last_error();                                \
        EXPECT_NE(std::string(qjit_last_error()).find(word), std::string::npos)          \
            << "message '" << qjit_last_error() << "' does not name '" << (word) << "'"; \
    } while (0)

namespace qjit::test {

inline std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

inline void write_file(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// The files in `dir` whose names start with `prefix`.
inline std::vector<std::filesystem::path> files_starting(const std::filesystem::path& dir, const std::string& prefix) {
    std::vector<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        if (entry.path().filename().string().rfind(prefix, 0) == 0) found.push_back(entry.path());
    return found;
}

inline std::vector<float> random_floats(size_t count, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(lo, hi);
    std::vector<float> values(count);
    for (float& v : values) v = uniform(rng);
    return values;
}

struct ContextDeleter {
    void operator()(qjit_context* c) const { qjit_context_destroy(c); }
};
struct LinearDeleter {
    void operator()(qjit_linear* l) const { qjit_linear_destroy(l); }
};
struct PackDeleter {
    void operator()(qjit_pack* p) const { qjit_pack_destroy(p); }
};
struct PackWriterDeleter {
    void operator()(qjit_pack_writer* w) const { qjit_pack_writer_destroy(w); }
};
using ContextPtr = std::unique_ptr<qjit_context, ContextDeleter>;
using LinearPtr = std::unique_ptr<qjit_linear, LinearDeleter>;
using PackPtr = std::unique_ptr<qjit_pack, PackDeleter>;
using PackWriterPtr = std::unique_ptr<qjit_pack_writer, PackWriterDeleter>;

// A context for tests: 2 threads unless told otherwise; an ISA cap, activation path and forced
// tiling when given. No tuning database and no timing: layers take the model's first pick.
inline ContextPtr make_test_context(int threads = 2, qjit_isa max_isa = QJIT_ISA_AUTO,
                                    qjit_activations activations = QJIT_ACTIVATIONS_AUTO,
                                    const char* tiling = nullptr) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = threads;
    options.max_isa = max_isa;
    options.activations = activations;
    options.tiling = tiling;
    options.tuning_db_path = "";
    options.tuning_budget_ms = 0;
    qjit_context* context = nullptr;
    EXPECT_EQ(qjit_context_create(&options, &context), QJIT_OK) << qjit_last_error();
    return ContextPtr(context);
}

// The absolute terms of one dequantized weight, |s| * (q + z) or with float offsets |s| * q + |m|:
// what its rounding errors scale with.
inline double weight_terms(const QuantParams& p, size_t meta, uint8_t code) {
    const double q = double(p.value_of(code));
    if (p.float_offsets) return std::fabs(double(p.scales[meta])) * q + std::fabs(double(p.offsets[meta]));
    return std::fabs(double(p.scales[meta])) * (q + double(p.zeros[meta]));
}

// One weight as the oracle dequantizes it, in double.
inline double dequantized_weight(const QuantParams& p, size_t meta, uint8_t code) {
    const double q = double(p.value_of(code));
    if (p.float_offsets) return double(p.scales[meta]) * q + double(p.offsets[meta]);
    return double(p.scales[meta]) * (q - double(p.zeros[meta]));
}

// Worst-case fp32 error of a kernel that, per group, sums x*q and x, applies s*(dot - z*xsum) (or
// s*dot + m*xsum) and
// sums the groups, against the oracle (which also rounds each dequantized weight to fp32): each
// of the at most (group rows + groups + 3) roundings on a path contributes at most FLT_EPSILON/2
// of the absolute terms sum_k |x_k| * s * (q + z). Twice that is the bound.
inline std::vector<double> forward_error_bound(const QuantizedMatrix& matrix, const float* x, int64_t m) {
    const QuantParams& p = matrix.params;
    const double steps = double(std::min(p.group_size, p.k) + p.num_groups() + 3);
    std::vector<double> bound(size_t(m * p.n), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < p.k; ++r) {
            const int64_t original = p.act_order ? p.row_order[size_t(r)] : r;
            const double xv = std::fabs(double(x[i * p.k + original]));
            const int64_t g = r / p.group_size;
            for (int64_t c = 0; c < p.n; ++c) {
                const size_t meta = size_t(g * p.n + c);
                bound[size_t(i * p.n + c)] += xv * weight_terms(p, meta, matrix.codes[size_t(r * p.n + c)]);
            }
        }
    for (double& b : bound) b = b * steps * FLT_EPSILON + 1e-30;
    return bound;
}

// The int8 activation path's extra error. Each activation row is quantized per activation group
// of the kernel's spec (its rows in storage order: a weight group, or a super-block) with step
// s = max|x| / qmax and round-to-nearest, so every activation is off by at most s/2 and an output by
// at most sum_k (s_group(k) / 2) * |W[k][n]|. Added to `bound` (the fp32 rounding bound of the same
// computation).
inline void add_int8_activation_error(std::vector<double>& bound, const QuantizedMatrix& matrix, const float* x,
                                      int64_t m, const jit::CpuKernelSpec& spec) {
    const int64_t activation_group = spec.activation_group_rows();
    const int qmax = spec.int8_activation_max();
    const QuantParams& p = matrix.params;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t r0 = 0; r0 < p.k; r0 += activation_group) {
            const int64_t r1 = std::min(p.k, r0 + activation_group);
            double amax = 0.0;
            for (int64_t r = r0; r < r1; ++r) {
                const int64_t original = p.act_order ? p.row_order[size_t(r)] : r;
                amax = std::max(amax, std::fabs(double(x[i * p.k + original])));
            }
            const double half_step = amax / qmax / 2.0;
            for (int64_t r = r0; r < r1; ++r) {
                const int64_t g = r / p.group_size;
                for (int64_t c = 0; c < p.n; ++c) {
                    const size_t meta = size_t(g * p.n + c);
                    const double w = dequantized_weight(p, meta, matrix.codes[size_t(r * p.n + c)]);
                    bound[size_t(i * p.n + c)] += half_step * std::fabs(w) * (1.0 + 1e-6);
                }
            }
        }
}

// Expects |actual - expected| <= bound elementwise; reports the first few violations.
inline void expect_within(const std::vector<float>& actual, const std::vector<float>& expected,
                          const std::vector<double>& bound) {
    ASSERT_EQ(actual.size(), expected.size());
    int reported = 0;
    for (size_t i = 0; i < actual.size() && reported < 5; ++i) {
        const double error = std::fabs(double(actual[i]) - double(expected[i]));
        if (!(error <= bound[i])) {
            ADD_FAILURE() << "element " << i << ": got " << actual[i] << ", oracle " << expected[i] << ", error "
                          << error << " > bound " << bound[i];
            ++reported;
        }
    }
}

}  // namespace qjit::test
