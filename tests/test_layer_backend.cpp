// The backend contract (runtime/layer_backend.hpp): each backend answers whether it runs a format
// in one place, refuses what it cannot run with a message naming the format and itself, and its
// generator's check_spec agrees; a layer asks before it builds anything.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.hpp"
#include "quant/quantize_rtn.hpp"
#include "format/reference.hpp"
#include "jit/cuda/cuda_tiling.hpp"
#include "jit/x86/cpu_kernel.hpp"
#include "runtime/layer_backend.hpp"
#include "runtime/linear_layer.hpp"
#include "layer_internals.hpp"
#include "test_support.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {
namespace {

WeightFormat plain_format() {
    WeightFormat f;
    f.k = 512;
    f.n = 64;
    f.bits = 4;
    f.group_size = 128;
    return f;
}

// The message require_supported throws (empty when it does not), with its status checked.
std::string refusal(BackendKind kind, const WeightFormat& format) {
    try {
        require_supported(kind, format);
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_UNSUPPORTED) << e.what();
        return e.what();
    }
    return "";
}

void expect_refused(BackendKind kind, const WeightFormat& format, const std::string& why) {
    const std::string message = refusal(kind, format);
    SCOPED_TRACE(message);
    EXPECT_FALSE(unsupported_reason(kind, format).empty());
    EXPECT_NE(message.find(format.name()), std::string::npos);
    EXPECT_NE(message.find(backend_name(kind)), std::string::npos);
    EXPECT_NE(message.find(why), std::string::npos);
}

TEST(LayerBackend, EveryBackendRunsAPlainFormat) {
    for (BackendKind kind : {BackendKind::Portable, BackendKind::X86Jit, BackendKind::Cuda}) {
        EXPECT_EQ(unsupported_reason(kind, plain_format()), "") << backend_name(kind);
        EXPECT_EQ(refusal(kind, plain_format()), "") << backend_name(kind);
    }
}

// Permuted columns (a tensor-parallel shard's) change which original column each output is, not
// what a kernel computes: every backend runs them.
TEST(LayerBackend, EveryBackendRunsPermutedColumns) {
    WeightFormat permuted = plain_format();
    permuted.permuted_columns = true;
    for (BackendKind kind : {BackendKind::Portable, BackendKind::X86Jit, BackendKind::Cuda})
        EXPECT_EQ(unsupported_reason(kind, permuted), "") << backend_name(kind);
}

TEST(LayerBackend, EachRefusesAFormatItCannotRunNamingIt) {
    WeightFormat group_48 = plain_format();
    group_48.group_size = 48;
    expect_refused(BackendKind::X86Jit, group_48, "group size");
    expect_refused(BackendKind::Cuda, group_48, "groups of a multiple of 32");
    EXPECT_EQ(unsupported_reason(BackendKind::Portable, group_48), "");

    WeightFormat second_order = plain_format();
    second_order.scale_type = ScaleType::SecondOrder;
    second_order.symmetric = true;
    expect_refused(BackendKind::X86Jit, second_order, "second-order");

    WeightFormat column_outliers = plain_format();  // one group of 500 rows per column
    column_outliers.k = column_outliers.group_size = 500;
    column_outliers.outliers = 10;
    expect_refused(BackendKind::Cuda, column_outliers, "K-groups of a multiple of 32");
}

// The 2/4/16 format's parts run on every backend, CUDA through its mixed-format GEMV.
TEST(LayerBackend, EveryBackendRunsThe2416FormatsParts) {
    WeightFormat mixed = plain_format();
    mixed.group_bits = {2, 4, 4, 2};
    WeightFormat second_order = plain_format();
    second_order.scale_type = ScaleType::SecondOrder;
    WeightFormat outliers = plain_format();
    outliers.outliers = 10;
    for (const WeightFormat& format : {mixed, second_order, outliers}) {
        EXPECT_TRUE(jit::cuda::needs_mixed_kernel(format)) << format.name();
        for (BackendKind kind : {BackendKind::Portable, BackendKind::X86Jit, BackendKind::Cuda})
            EXPECT_EQ(unsupported_reason(kind, format), "") << backend_name(kind) << " " << format.name();
    }
    EXPECT_FALSE(jit::cuda::needs_mixed_kernel(plain_format()));
}

// A compensator is a pass after the product, which every backend runs at every width it is stored at.
TEST(LayerBackend, EveryBackendRunsACompensator) {
    for (int bits : {3, 8, 16}) {
        WeightFormat compensated = plain_format();
        compensated.low_rank = {16, bits};
        for (BackendKind kind : {BackendKind::Portable, BackendKind::X86Jit, BackendKind::Cuda})
            EXPECT_EQ(unsupported_reason(kind, compensated), "") << backend_name(kind) << " bits=" << bits;
    }
}

// The generators refuse, in check_spec, what their backend's answer refuses.
TEST(LayerBackend, GeneratorsCheckTheirBackendsAnswer) {
    jit::CpuKernelSpec cpu;
    cpu.format = plain_format();
    EXPECT_NO_THROW(jit::check_spec(cpu));
    cpu.format.group_size = 48;
    EXPECT_THROW(jit::check_spec(cpu), Error);
    try {
        jit::check_spec(cpu);
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_UNSUPPORTED);  // the format, not the tiling
    }

    jit::cuda::CudaKernelSpec gpu;
    gpu.format = plain_format();
    EXPECT_NO_THROW(jit::cuda::check_spec(gpu));
    // The mixed-format parts run on the GEMV alone, one column per warp.
    for (auto change : {+[](WeightFormat& f) { f.group_bits = {2, 4, 4, 2}; },
                        +[](WeightFormat& f) { f.scale_type = ScaleType::SecondOrder; },
                        +[](WeightFormat& f) { f.outliers = 10; }}) {
        jit::cuda::CudaKernelSpec mixed = gpu;
        change(mixed.format);
        EXPECT_NO_THROW(jit::cuda::check_spec(mixed)) << mixed.format.name();
        jit::cuda::CudaKernelSpec wide = mixed;
        wide.tiling.columns_per_warp = 2;
        EXPECT_THROW(jit::cuda::check_spec(wide), Error) << mixed.format.name();
        jit::cuda::CudaKernelSpec gemm = mixed;
        gemm.rows = 64;
        gemm.tiling.kind = jit::cuda::KernelKind::Gemm;
        EXPECT_THROW(jit::cuda::check_spec(gemm), Error) << mixed.format.name();
    }
}

// A format the generated kernels refuse runs on the portable path in a context that has them.
TEST(LayerBackend, WhatTheJitRefusesRunsOnThePortablePath) {
    if (!cpu_supports(QJIT_ISA_AVX2)) GTEST_SKIP() << "no generated kernels on this CPU";
    const int64_t k = 192, n = 40, m = 3;
    const std::vector<float> w = test::random_floats(size_t(k * n), 5);
    const QuantizedMatrix matrix = quantize_rtn({.bits = 4, .group_size = 48, .scale_type = ScaleType::F32}, k, n, w.data());
    test::ContextPtr context = test::make_test_context(2, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_F32);
    const std::unique_ptr<qjit_linear> layer = make_linear(context.get(), matrix);
    EXPECT_EQ(layer->cpu->kind(), BackendKind::Portable) << layer->description;
    EXPECT_FALSE(test::jit_of(*layer));
    const std::vector<float> x = test::random_floats(size_t(m * k), 6);
    std::vector<float> y(size_t(m * n)), expected(y.size());
    linear_forward(*layer, x.data(), m, y.data());
    reference_forward(matrix, x.data(), m, expected.data());
    test::expect_within(y, expected, test::forward_error_bound(matrix, x.data(), m));
}

}  // namespace
}  // namespace qjit
