// The generated CUDA kernels against the oracle in the host emulation (tests/cuda_host/), where
// there is no GPU: a sample of variants covering every width, grouping, symmetry (zero points or
// float offsets) and kernel kind, both activation types, fp16 and fp32 scales and split-K, on odd
// shapes with and without act-order, launched as CudaExecutor launches them (the gather, the
// kernel, the split-K cast); float offsets and super-block scales in every kind; then the
// compensator's support kernels. The device tests (test_cuda_device.cpp) run every variant on a
// GPU; these check the same logic on every machine, though not the PTX the device runs (the
// emulation implements each PTX helper by its documented semantics).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_host/host_module.hpp"
#include "base/activations.hpp"
#include "cuda_oracle.hpp"
#include "format/cuda_mixed_weights.hpp"
#include "format/cuda_weights.hpp"
#include "jit/cuda/cuda_source.hpp"
#include "mixed_matrix.hpp"
#include "runtime/cuda/cuda_driver.hpp"
#include "test_support.hpp"

namespace qjit {
namespace {

using jit::cuda::ActivationType;
using jit::cuda::CudaKernelSpec;
using jit::cuda::KernelKind;
using cuda::blocks_for;
using test::HostGrid;
using test::HostModule;

constexpr unsigned kSupportThreads = 256;

const HostModule& support_module() {
    static const HostModule module(jit::cuda::support_kernels_source());
    return module;
}

const char* type_suffix(ActivationType type) { return type == ActivationType::F16 ? "_f16" : "_bf16"; }

// x gathered into storage order and padded to kp columns, as the executor does for act-order
// layers and K not a multiple of 8.
std::vector<uint16_t> gathered(const std::vector<uint16_t>& x, const QuantParams& p, int64_t m, int64_t kp) {
    std::vector<uint16_t> out(size_t(m * kp));
    const int* order = p.act_order ? p.row_order.data() : nullptr;
    support_module().launch("qjit_gather_rows", {blocks_for(m * kp, kSupportThreads)}, kSupportThreads, 0,
                            static_cast<const uint16_t*>(x.data()), int(p.k), order, out.data(), int(m), int(p.k),
                            int(kp));
    return out;
}

// y (m x n, activation bits) = x W through `kernel` as CudaExecutor::launch runs it.
std::vector<uint16_t> emulated_forward(const HostModule& kernel, const CudaKernelSpec& spec,
                                       const QuantizedMatrix& matrix, std::vector<uint16_t> x, int64_t m) {
    const CudaWeights w = pack_cuda_metadata(matrix);
    const std::vector<uint32_t> codes =
        spec.tiling.kind == KernelKind::Mma ? pack_fragment_codes(matrix) : pack_block_codes(matrix);
    int k_valid = int(w.k), ldx = int(w.k);
    if (matrix.params.act_order || w.k % 8 != 0) {
        x = gathered(x, matrix.params, m, w.kp);
        k_valid = ldx = int(w.kp);
    }
    const void* scales = w.scale_data();      // fp16, fp32 or super-block scales
    const void* zeros = w.zero_point_data();  // integer zero points or float offsets
    std::vector<uint16_t> y(size_t(m * w.n));
    const jit::cuda::GeneratedKernel generated = jit::cuda::generate_kernel(spec);
    const jit::cuda::LaunchShape shape = jit::cuda::launch_shape(spec, m, w.n, w.np, w.kp);
    const HostGrid grid{shape.grid_x, shape.grid_y, shape.grid_z};
    const int rows = int(m), n = int(w.n), np = int(w.np), kp = int(w.kp), groups = int(w.num_groups);
    if (spec.tiling.kind == KernelKind::Gemv) {
        kernel.launch(generated.entry.c_str(), grid, shape.threads, 0, static_cast<const uint32_t*>(codes.data()),
                      scales, zeros, static_cast<const uint16_t*>(x.data()), y.data(), rows, n, np, k_valid, ldx, kp,
                      groups);
        return y;
    }
    std::vector<float> partial(shape.splits > 1 ? size_t(m * w.n) : 0, 0.f);
    kernel.launch(generated.entry.c_str(), grid, shape.threads, shape.shared_bytes,
                  static_cast<const uint32_t*>(codes.data()), scales, zeros, static_cast<const uint16_t*>(x.data()),
                  y.data(), rows, n, np, k_valid, ldx, kp, groups, shape.splits > 1 ? partial.data() : nullptr,
                  shape.units_per_split);
    if (shape.splits > 1) {
        const long long count = m * w.n;
        const std::string cast = std::string("qjit_cast_f32_to") + type_suffix(spec.activations);
        support_module().launch(cast.c_str(), {blocks_for(count, kSupportThreads)}, kSupportThreads, 0,
                                static_cast<const float*>(partial.data()), y.data(), count);
    }
    return y;
}

// y (m x n, activation bits) = x W through the mixed-format GEMV.
std::vector<uint16_t> emulated_mixed_forward(const HostModule& kernel, const CudaKernelSpec& spec,
                                             const QuantizedMatrix& matrix, std::vector<uint16_t> x, int64_t m) {
    const CudaMixedWeights w = pack_cuda_mixed(matrix);
    int k_valid = int(w.k), ldx = int(w.k);
    if (matrix.params.act_order || w.k % 8 != 0) {
        x = gathered(x, matrix.params, m, w.kp);
        k_valid = ldx = int(w.kp);
    }
    const void* scales = w.f16_scales ? static_cast<const void*>(w.scales_f16.data()) : w.scales_f32.data();
    auto data_or_null = [](const auto& v) { return v.empty() ? nullptr : v.data(); };
    std::vector<uint16_t> y(size_t(m * w.n));
    const jit::cuda::LaunchShape shape = jit::cuda::launch_shape(spec, m, w.n, w.np, w.kp);
    kernel.launch("qjit_mixed_gemv", {shape.grid_x}, shape.threads, 0, static_cast<const uint32_t*>(w.codes.data()),
                  static_cast<const int*>(w.group_words.data()), scales, data_or_null(w.scale_codes),
                  data_or_null(w.scale2), data_or_null(w.zero2), data_or_null(w.zeros), data_or_null(w.outlier_start),
                  data_or_null(w.outlier_rows), data_or_null(w.outlier_values), static_cast<const uint16_t*>(x.data()),
                  y.data(), int(m), int(w.n), int(w.np), k_valid, ldx, int(w.num_groups));
    return y;
}

// A sample of one width's variants: each format once, the kernel kinds, activation types, scale
// types and split-K rotating across them, so that each width meets every kind several times.
struct Sampled {
    test::CudaFormat format;
    CudaKernelSpec spec;
};

// every_cuda_format's formats of `bits`.
std::vector<test::CudaFormat> formats_of_width(int bits) {
    std::vector<test::CudaFormat> formats;
    for (const test::CudaFormat& format : test::every_cuda_format())
        if (format.bits == bits) formats.push_back(format);
    return formats;
}

std::vector<Sampled> sampled_variants(int bits, int64_t k) {
    std::vector<Sampled> sample;
    int index = 0;
    for (const test::CudaFormat& format : formats_of_width(bits)) {
        const KernelKind kind = KernelKind(index % 3);
        std::vector<CudaKernelSpec> of_kind;
        for (const CudaKernelSpec& spec : test::cuda_variants(format, k, 80))
            if (spec.tiling.kind == kind) of_kind.push_back(spec);
        if (of_kind.empty()) ADD_FAILURE() << "no variant of kind " << int(kind) << " for " << bits << "-bit";
        if (of_kind.empty()) continue;
        CudaKernelSpec spec = of_kind[size_t(index * 7) % of_kind.size()];
        spec.activations = index / 3 % 2 ? ActivationType::BF16 : ActivationType::F16;
        if (index % 4 == 1) spec.format.scale_type = ScaleType::F32;
        if (kind != KernelKind::Gemv && index % 2 == 1) spec.tiling.split_k = 2;
        EXPECT_TRUE(jit::cuda::is_valid(spec)) << jit::cuda::kernel_name(spec);
        sample.push_back({format, spec});
        ++index;
    }
    return sample;
}

struct Shape {
    int64_t k, n;
    bool act_order;
};
const Shape kOddShapes[] = {{264, 77, false},   // K a multiple of 8 only: read in place
                            {515, 130, true}};  // odd K and act-order: gathered, padded

// One variant on a random matrix of its format against the oracle, at two batches of the rows it
// serves.
void expect_variant_matches_the_oracle(const test::CudaFormat& format, const CudaKernelSpec& spec, const Shape& shape) {
    const QuantizedMatrix matrix =
        test::random_matrix(format, shape.k, shape.n, shape.act_order, 11, spec.format.f16_scales());
    validate(matrix);
    ASSERT_EQ(pack_cuda_metadata(matrix).f16_scales, spec.format.f16_scales());
    const std::string name = jit::cuda::kernel_name(spec) + " splitk=" + std::to_string(spec.tiling.split_k) +
                             " K=" + std::to_string(shape.k) + " N=" + std::to_string(shape.n);
    SCOPED_TRACE(name);
    const HostModule kernel(jit::cuda::generate_kernel(spec).source);
    std::vector<int64_t> batches{17, 100};  // gemm: partial row blocks, two of them
    if (spec.tiling.block_m > 64) batches.push_back(300);  // several blocks of 128 or 256 rows, the last partial
    if (spec.tiling.kind != KernelKind::Gemm) batches = {spec.rows / 2 + 1, spec.rows};
    for (int64_t m : batches) {
        std::vector<float> x = test::random_floats(size_t(m * shape.k), uint32_t(m));
        const std::vector<uint16_t> x_bits = test::to_activation_bits(x, spec.activations);
        const std::vector<uint16_t> y = emulated_forward(kernel, spec, matrix, x_bits, m);
        test::expect_matches_oracle(matrix, x, m, test::from_activation_bits(y, spec.activations), spec.activations,
                                    name + " m=" + std::to_string(m));
    }
}

class CudaEmulated : public ::testing::TestWithParam<int> {};

TEST_P(CudaEmulated, SampledVariantsMatchTheOracle) {
    const int bits = GetParam();
    for (const Shape& shape : kOddShapes)
        for (const auto& [format, spec] : sampled_variants(bits, shape.k)) {
            expect_variant_matches_the_oracle(format, spec, shape);
            if (HasFailure()) return;  // one broken variant is enough to read
        }
}

// Float offsets (W = scale * code + offset; GGUF Q4_1 and Q5_1 are q4g32_off and q5g32_off) in
// every kernel kind, with both activation types and fp16 or fp32 scales and offsets, split-K
// included, on odd shapes at one row and more.
TEST(CudaEmulatedFloatOffsets, EveryKindMatchesTheOracle) {
    int index = 0;
    for (int bits : {4, 5})
        for (KernelKind kind : {KernelKind::Gemv, KernelKind::Mma, KernelKind::Gemm})
            for (ActivationType type : {ActivationType::F16, ActivationType::BF16}) {
                const test::CudaFormat format{bits, index % 3 == 2 ? 128 : 32, false, true};
                const Shape& shape = kOddShapes[index % 2];
                std::vector<CudaKernelSpec> of_kind;
                for (const CudaKernelSpec& spec : test::cuda_variants(format, shape.k, 80))
                    if (spec.tiling.kind == kind) of_kind.push_back(spec);
                ASSERT_FALSE(of_kind.empty());
                CudaKernelSpec spec = of_kind[size_t(index * 5) % of_kind.size()];
                spec.activations = type;
                if (index % 4 >= 2) spec.format.scale_type = ScaleType::F32;
                if (kind != KernelKind::Gemv && index % 3 == 1) spec.tiling.split_k = 2;
                ASSERT_TRUE(jit::cuda::is_valid(spec)) << jit::cuda::kernel_name(spec);
                expect_variant_matches_the_oracle(format, spec, shape);
                if (HasFailure()) return;
                ++index;
            }
}

// Super-block scales with groups of 32 (GGUF's Q4_K and Q5_K are q4g32_off_sb6 and q5g32_off_sb6;
// symmetric ones with signed 8-bit codes too) in every kernel kind at every width, with both
// activation types and split-K, on K of one and two super-blocks (act-order: gathered) and odd N,
// at one row and more.
TEST(CudaEmulatedSuperBlock, EveryKindMatchesTheOracle) {
    const Shape shapes[] = {{512, 77, true}, {256, 130, false}};
    int index = 0;
    for (const test::CudaFormat& format : test::every_super_block_cuda_format())
        for (KernelKind kind : {KernelKind::Gemv, KernelKind::Mma, KernelKind::Gemm}) {
            const bool q4_k_or_q5_k = format.float_offsets && (format.bits == 4 || format.bits == 5);
            if (!q4_k_or_q5_k && int(kind) != index % 3) continue;  // other widths: one kind each, in rotation
            const Shape& shape = shapes[index % 2];
            std::vector<CudaKernelSpec> of_kind;
            for (const CudaKernelSpec& spec : test::cuda_variants(format, shape.k, 80))
                if (spec.tiling.kind == kind) of_kind.push_back(spec);
            ASSERT_FALSE(of_kind.empty());
            CudaKernelSpec spec = of_kind[size_t(index * 5) % of_kind.size()];
            spec.activations = index / 2 % 2 ? ActivationType::BF16 : ActivationType::F16;
            if (kind != KernelKind::Gemv && index % 3 == 1) spec.tiling.split_k = 2;
            ASSERT_TRUE(jit::cuda::is_valid(spec)) << jit::cuda::kernel_name(spec);
            expect_variant_matches_the_oracle(format, spec, shape);
            if (HasFailure()) return;
            ++index;
        }
}

// The prefill tiles (128 and 256 rows, 64 rows by two warps; the block's warps in a grid of rows
// and columns), one per width in rotation, symmetric and not, both activation types and split-K
// in rotation too.
TEST(CudaEmulatedPrefillTiles, GridsOfWarpsMatchTheOracle) {
    int index = 0;
    for (int bits : {2, 3, 4, 5, 6, 8}) {
        const test::CudaFormat format{bits, 128, index % 2 == 1};
        const Shape& shape = kOddShapes[index % 2];
        std::vector<CudaKernelSpec> tiles;
        for (const CudaKernelSpec& spec : test::cuda_variants(format, shape.k, 90))
            if (spec.tiling.kind == KernelKind::Gemm && spec.tiling.warps_m > 1) tiles.push_back(spec);
        ASSERT_EQ(tiles.size(), 3u) << bits << "-bit";
        CudaKernelSpec spec = tiles[size_t(index) % tiles.size()];
        spec.activations = index % 3 == 1 ? ActivationType::BF16 : ActivationType::F16;
        if (index % 4 == 2) spec.tiling.split_k = 2;
        expect_variant_matches_the_oracle(format, spec, shape);
        if (HasFailure()) return;
        ++index;
    }
}

INSTANTIATE_TEST_SUITE_P(Bits, CudaEmulated, ::testing::Values(2, 3, 4, 5, 6, 8),
                         [](const auto& info) { return "q" + std::to_string(info.param); });

// The mixed-format GEMV on `matrix` (its own widths, scales and outliers) against the oracle, at
// half its rows plus one and at all of them.
void expect_mixed_gemv_matches_the_oracle(const QuantizedMatrix& matrix, int rows, ActivationType type,
                                          const std::string& label, uint32_t seed) {
    CudaKernelSpec spec;
    spec.format = matrix.params.format();
    spec.format.act_order = false;
    spec.activations = type;
    spec.arch = 80;
    spec.rows = rows;
    ASSERT_TRUE(jit::cuda::needs_mixed_kernel(spec.format));
    ASSERT_EQ(jit::cuda::unsupported_reason(spec.format), "");
    const std::string name = jit::cuda::kernel_name(spec) + " (" + label + ") K=" + std::to_string(matrix.params.k) +
                             " N=" + std::to_string(matrix.params.n);
    SCOPED_TRACE(name);
    const jit::cuda::GeneratedKernel generated = jit::cuda::generate_kernel(spec);
    ASSERT_EQ(generated.entry, "qjit_mixed_gemv");
    const HostModule kernel(generated.source);
    for (int64_t m : {int64_t(rows / 2 + 1), int64_t(rows)}) {
        std::vector<float> x = test::random_floats(size_t(m * matrix.params.k), uint32_t(m) + seed);
        const std::vector<uint16_t> x_bits = test::to_activation_bits(x, type);
        const std::vector<uint16_t> y = emulated_mixed_forward(kernel, spec, matrix, x_bits, m);
        test::expect_matches_oracle(matrix, x, m, test::from_activation_bits(y, type), type,
                                    name + " m=" + std::to_string(m));
    }
}

// The mixed-format GEMV on every combination of its parts (mixed 2/4-bit groups or uniform 3-bit
// codes, second-order or fp16 scales, outliers, symmetric or not where the format allows it), K not a multiple of the group
// (and odd, with act-order), both activation types, every row count it is compiled for.
TEST(CudaEmulatedMixed, EveryCombinationMatchesTheOracle) {
    struct Shape { int64_t k, n, group; bool act_order; };
    const Shape shapes[] = {{200, 45, 32, false}, {515, 77, 64, true}};
    int index = 0;
    for (bool mixed : {true, false})
        for (bool second_order : {true, false})
            for (bool outliers : {true, false})
                for (bool symmetric : {false, true}) {
                    if (!mixed && !second_order && !outliers) continue;  // the plain kernels' format
                    if (symmetric && (mixed || second_order)) continue;  // validate refuses these
                    const int rows = 1 << (index % 4);
                    const ActivationType type = index / 4 % 2 ? ActivationType::BF16 : ActivationType::F16;
                    ++index;
                    for (const Shape& shape : shapes) {
                        const test::Features features{mixed, second_order, outliers, shape.act_order, symmetric};
                        const QuantizedMatrix matrix = test::synthetic_matrix(shape.k, shape.n, shape.group, features,
                                                                              uint32_t(index * 10 + rows));
                        expect_mixed_gemv_matches_the_oracle(matrix, rows, type, test::features_name(features),
                                                             uint32_t(index));
                        if (HasFailure()) return;
                    }
                }
}

// The mixed-format GEMV at 5 and 6 bits: uniform codes beside outliers, symmetric or not, odd K
// with act-order, one row and more.
TEST(CudaEmulatedMixed, FiveAndSixBitCodesWithOutliersMatchTheOracle) {
    int index = 0;
    for (int bits : {5, 6})
        for (bool symmetric : {false, true}) {
            const bool act_order = index % 2 == 1;
            const int64_t k = act_order ? 515 : 200;
            QuantizedMatrix matrix =
                test::synthetic_matrix(k, 77, 64, {false, false, true, act_order, symmetric}, uint32_t(50 + index));
            QuantParams& p = matrix.params;  // the 3-bit codes and zero points redrawn at `bits`
            p.bits = bits;
            std::mt19937 rng{uint32_t(index)};
            for (uint8_t& code : matrix.codes) code = uint8_t(rng() % (1u << bits));
            for (uint16_t& zero : p.zeros) zero = uint16_t(symmetric ? 1u << (bits - 1) : rng() % (1u << bits));
            validate(matrix);
            const int rows = index < 2 ? 1 : 8;
            const ActivationType type = index % 3 == 2 ? ActivationType::BF16 : ActivationType::F16;
            expect_mixed_gemv_matches_the_oracle(matrix, rows, type,
                                                 "q" + std::to_string(bits) + (symmetric ? "_sym" : "") + "_sp" +
                                                     (act_order ? "_act" : ""),
                                                 uint32_t(index));
            ++index;
            if (HasFailure()) return;
        }
}

// The compensator's support kernels (runtime/cuda/cuda_low_rank.hpp) against plain loops:
// t = x U with U given transposed, t scaled per component, y += t V, and y += p.
TEST(CudaEmulatedSupport, CompensatorKernelsMatchPlainLoops) {
    const int64_t m = 3, k = 77, n = 45;
    const int rank = 5;
    for (ActivationType type : {ActivationType::F16, ActivationType::BF16}) {
        SCOPED_TRACE(type_suffix(type));
        const double tolerance = type == ActivationType::F16 ? 1.0 / 512 : 1.0 / 64;
        std::vector<float> x = test::random_floats(size_t(m * k), 1), y0 = test::random_floats(size_t(m * n), 2);
        std::vector<float> ut = test::random_floats(size_t(rank * k), 3), v = test::random_floats(size_t(rank * n), 4);
        const std::vector<uint16_t> x_bits = test::to_activation_bits(x, type);
        std::vector<uint16_t> y_bits = test::to_activation_bits(y0, type);
        const std::vector<uint16_t> ut_bits = test::to_activation_bits(ut, ActivationType::F16);
        const std::vector<uint16_t> v_bits = test::to_activation_bits(v, ActivationType::F16);

        std::vector<float> t(size_t(m * rank));
        support_module().launch((std::string("qjit_low_rank_xu") + type_suffix(type)).c_str(),
                                {blocks_for(m * rank * 32, kSupportThreads)}, kSupportThreads, 0, x_bits.data(),
                                ut_bits.data(), t.data(), int(m), int(k), rank);
        std::vector<double> t_expected(size_t(m * rank), 0.0);
        for (int64_t i = 0; i < m; ++i)
            for (int r = 0; r < rank; ++r) {
                double& sum = t_expected[size_t(i * rank + r)];
                for (int64_t j = 0; j < k; ++j) sum += double(x[size_t(i * k + j)]) * ut[size_t(r * k + j)];
                EXPECT_NEAR(t[size_t(i * rank + r)], sum, 1e-4 * (1 + std::fabs(sum))) << "t[" << i << "][" << r << "]";
            }

        support_module().launch((std::string("qjit_low_rank_tv") + type_suffix(type)).c_str(),
                                {blocks_for(m * n, kSupportThreads)}, kSupportThreads, 0,
                                static_cast<const float*>(t.data()), static_cast<const uint16_t*>(v_bits.data()),
                                y_bits.data(), int(m), int(n), rank);
        const std::vector<float> y = test::from_activation_bits(y_bits, type);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t c = 0; c < n; ++c) {
                double expected = y0[size_t(i * n + c)];
                for (int r = 0; r < rank; ++r) expected += t_expected[size_t(i * rank + r)] * v[size_t(r * n + c)];
                EXPECT_NEAR(y[size_t(i * n + c)], expected, tolerance * (1 + std::fabs(expected)))
                    << "y[" << i << "][" << c << "]";
            }

        std::vector<float> columns = test::random_floats(size_t(m * rank), 5), scales = test::random_floats(rank, 6);
        std::vector<uint16_t> column_bits = test::to_activation_bits(columns, type);
        support_module().launch((std::string("qjit_scale_columns") + type_suffix(type)).c_str(),
                                {blocks_for(m * rank, kSupportThreads)}, kSupportThreads, 0, column_bits.data(),
                                static_cast<const float*>(scales.data()), int(m), rank);
        const std::vector<float> scaled = test::from_activation_bits(column_bits, type);
        for (int64_t i = 0; i < m * rank; ++i) {
            const double expected = double(columns[size_t(i)]) * scales[size_t(i % rank)];
            EXPECT_NEAR(scaled[size_t(i)], expected, tolerance * std::fabs(expected) + 1e-6) << "t[" << i << "]";
        }

        std::vector<float> sum_values = test::random_floats(size_t(m * n), 7), addend = test::random_floats(size_t(m * n), 8);
        std::vector<uint16_t> sum_bits = test::to_activation_bits(sum_values, type);
        const std::vector<uint16_t> addend_bits = test::to_activation_bits(addend, type);
        const long long count = m * n;
        support_module().launch((std::string("qjit_add_into") + type_suffix(type)).c_str(),
                                {blocks_for(count, kSupportThreads)}, kSupportThreads, 0, sum_bits.data(),
                                static_cast<const uint16_t*>(addend_bits.data()), count);
        const std::vector<float> sums = test::from_activation_bits(sum_bits, type);
        for (int64_t i = 0; i < count; ++i) {
            const double expected = double(sum_values[size_t(i)]) + addend[size_t(i)];
            EXPECT_NEAR(sums[size_t(i)], expected, tolerance * std::fabs(expected) + 1e-6) << "y[" << i << "]";
        }
    }
}

// A tensor-parallel MLP's activation kernels against base/activations.hpp, on inputs rounded to the
// activation type: each result is rounded once, so it is within half an ulp of the type.
TEST(CudaEmulatedSupport, MlpActivationsMatchTheCpuFormulas) {
    const long long count = 1000;
    for (ActivationType type : {ActivationType::F16, ActivationType::BF16}) {
        SCOPED_TRACE(type_suffix(type));
        const double ulp = type == ActivationType::F16 ? 1.0 / 1024 : 1.0 / 128;
        std::vector<float> up = test::random_floats(size_t(count), 11), gate = test::random_floats(size_t(count), 12);
        for (float& v : gate) v *= 8;  // both tails of the sigmoid
        std::vector<uint16_t> h_bits = test::to_activation_bits(up, type);
        const std::vector<uint16_t> gate_bits = test::to_activation_bits(gate, type);
        support_module().launch((std::string("qjit_swiglu") + type_suffix(type)).c_str(),
                                {blocks_for(count, kSupportThreads)}, kSupportThreads, 0, h_bits.data(),
                                static_cast<const uint16_t*>(gate_bits.data()), count);
        const std::vector<float> swiglu = test::from_activation_bits(h_bits, type);
        for (long long i = 0; i < count; ++i) {
            const float expected = silu(gate[size_t(i)]) * up[size_t(i)];
            ASSERT_NEAR(swiglu[size_t(i)], expected, ulp * std::fabs(expected) + 1e-6) << "swiglu " << i;
        }

        std::vector<float> pre = test::random_floats(size_t(count), 13);
        for (float& v : pre) v *= 6;
        std::vector<uint16_t> pre_bits = test::to_activation_bits(pre, type);
        support_module().launch((std::string("qjit_gelu") + type_suffix(type)).c_str(),
                                {blocks_for(count, kSupportThreads)}, kSupportThreads, 0, pre_bits.data(), count);
        const std::vector<float> activated = test::from_activation_bits(pre_bits, type);
        for (long long i = 0; i < count; ++i) {
            const float expected = gelu(pre[size_t(i)]);
            ASSERT_NEAR(activated[size_t(i)], expected, ulp * std::fabs(expected) + 1e-6) << "gelu " << i;
        }
    }
}

// The emulation must fail a wrong kernel: a GEMV that applies twice each scale is far outside
// the oracle's bound.
TEST(CudaEmulatedSupport, AWrongKernelFailsTheOracle) {
    CudaKernelSpec spec = test::cuda_spec({4, 128, false}, 264, 80);
    std::string source = jit::cuda::generate_kernel(spec).source;
    const std::string scale = "scale_pair(scale)";
    const size_t at = source.find(scale);
    ASSERT_NE(at, std::string::npos);
    source.replace(at, scale.size(), "scale_pair(2.0f * scale)");
    const HostModule kernel(source);
    const QuantizedMatrix matrix = test::random_matrix({4, 128, false}, 264, 77, false, 3);
    std::vector<float> x = test::random_floats(264, 4);
    const std::vector<uint16_t> y = emulated_forward(kernel, spec, matrix, test::to_activation_bits(x, spec.activations), 1);
    int failures = 0;
    ::testing::TestPartResultArray results;
    {
        ::testing::ScopedFakeTestPartResultReporter reporter(
            ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
        test::expect_matches_oracle(matrix, x, 1, test::from_activation_bits(y, spec.activations), spec.activations,
                                    "broken");
    }
    for (int i = 0; i < results.size(); ++i) failures += results.GetTestPartResult(i).failed();
    EXPECT_GT(failures, 0) << "a kernel that decodes wrong codes passed the oracle";
}

}  // namespace
}  // namespace qjit
