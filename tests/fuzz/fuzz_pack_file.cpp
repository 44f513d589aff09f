// libFuzzer target: pack files (io/pack_file.cpp, runtime/layer_pack.cpp) on arbitrary bytes, each
// input given its table's CRC-32 where its table's place fits, so that mutations reach the table's
// JSON, the entries' fields and sections and the layers made of them: panels borrowed in place and
// layer images. The sections' own checksums are not checked, so every entry is made whatever its
// bytes. A parse may fail only with a qjit::Error; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "io/pack_file.hpp"
#include "fuzz_context.hpp"
#include "qjit/qjit.h"
#include "runtime/layer_pack.hpp"

namespace {

// Capped at AVX2, as the seeds were made, so that their panels entries name the kernels this context
// makes.
qjit_context* fuzz_context() {
    static qjit_context* context = make_fuzz_context(QJIT_ISA_AVX2);
    return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto image = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
    const auto* bytes = reinterpret_cast<const uint8_t*>(image->data());
    const uint32_t crc = qjit::pack_table_checksum(bytes, size).value_or(0);
    image->append(reinterpret_cast<const char*>(&crc), sizeof crc);
    try {
        const auto pack = qjit::PackFile::parse(reinterpret_cast<const uint8_t*>(image->data()), image->size(), image,
                                                "fuzz input");
        for (const qjit::PackEntry& entry : pack->entries()) {
            try {
                const auto layer = qjit::layer_from_pack(fuzz_context(), *pack, entry);
                (void)layer;
            } catch (const qjit::Error&) {
            }
        }
    } catch (const qjit::Error&) {
    }
    return 0;
}
