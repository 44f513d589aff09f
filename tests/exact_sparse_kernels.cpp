// The flash FFN's tests compare with oracles in double whose error bounds take x in fp32, so every
// test of this binary runs the sparse FFN on its exact kernels. The generated products, which read
// x as int8, are tested on their own (test_sparse_product_jit.cpp) and, through the sparse FFN,
// with a bound that adds the int8 rounding (test_sparse_ffn.cpp).
#include <gtest/gtest.h>

#include "runtime/flash/sparse_ffn_kernels.hpp"

namespace {

class ExactSparseKernels : public ::testing::Environment {
public:
    void SetUp() override { qjit::use_sparse_ffn_kernels(qjit::exact_sparse_ffn_kernels()); }
};

[[maybe_unused]] ::testing::Environment* const registered =
    ::testing::AddGlobalTestEnvironment(new ExactSparseKernels);

}  // namespace
