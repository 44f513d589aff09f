// libFuzzer target: the layer file parser (runtime/layer_file.cpp) on arbitrary bytes. Built twice:
// as is, where nearly every mutation fails the checksum, and with QJIT_FUZZ_FIX_CHECKSUM, where the
// input gets a valid CRC-32 appended so that mutations reach the header and section parsing.
// A parse may fail only with a qjit::Error; anything else (a crash, a sanitizer report, another
// exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/crc32.hpp"
#include "base/error.hpp"
#include "runtime/layer_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string image(reinterpret_cast<const char*>(data), size);
#ifdef QJIT_FUZZ_FIX_CHECKSUM
    const uint32_t crc = qjit::crc32(image.data(), image.size());
    image.append(reinterpret_cast<const char*>(&crc), sizeof crc);
#endif
    try {
        const qjit::LayerImage layer = qjit::deserialize_layer(image);
        (void)layer;
    } catch (const qjit::Error&) {
    }
    return 0;
}
