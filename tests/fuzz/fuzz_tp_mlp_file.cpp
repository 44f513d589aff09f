// libFuzzer target: the tensor-parallel MLP file parser (runtime/tp_mlp_file.cpp) on arbitrary
// bytes, each input given a valid CRC-32 so that mutations reach the header, the sections and the
// embedded layer files (whose own checksums the mutations then meet). A parse may fail only with a
// qjit::Error; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/crc32.hpp"
#include "base/error.hpp"
#include "fuzz_context.hpp"
#include "qjit/qjit.h"
#include "runtime/tp_mlp_file.hpp"

namespace {

// The portable path: a parsed file's layers are made without generating code for each input.
qjit_context* fuzz_context() {
    static qjit_context* context = make_fuzz_context(QJIT_ISA_PORTABLE);
    return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string image(reinterpret_cast<const char*>(data), size);
    const uint32_t crc = qjit::crc32(image.data(), image.size());
    image.append(reinterpret_cast<const char*>(&crc), sizeof crc);
    try {
        const auto mlp = qjit::deserialize_tp_mlp(fuzz_context(), image);
        (void)mlp;
    } catch (const qjit::Error&) {
    }
    return 0;
}
