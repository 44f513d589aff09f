// What every generated kernel's source is made of: the prelude of types and PTX wrappers, the
// format's constants, code decoding, dequantization and the mma instruction. One writer per
// kernel source; each kernel kind's text and its member function are in a file of its own
// (gemv_source.cpp, mixed_gemv_source.cpp, mma_source.cpp, gemm_source.cpp); support_source.cpp
// holds the small kernels every layer shares.
#pragma once

#include <string>

#include "base/error.hpp"
#include "jit/cuda/cuda_tiling.hpp"

namespace qjit::jit::cuda {

// Types and PTX wrappers every generated source starts with (the kernels' and the support module's).
extern const char* const kPrelude;
// cp.async and ldmatrix wrappers (the GEMM's pipeline).
extern const char* const kAsyncCopy;

class CudaSourceWriter {
public:
    explicit CudaSourceWriter(const CudaKernelSpec& spec) : spec_(spec) {}

    std::string gemv();
    std::string gemm();
    std::string mma();
    std::string mixed_gemv();

private:
    bool f16() const { return spec_.activations == ActivationType::F16; }
    void constants();
    void decode_block() { decode_block(spec_.format.bits, "decode_block"); }
    void decode_block(int bits, const std::string& name);
    void block_dot(const std::string& name, const std::string& decoder);
    void block_activations();
    void dequantize_helpers();
    void mma_instruction();

    const CudaKernelSpec& spec_;
    TextStream out_;
};

}  // namespace qjit::jit::cuda
