// libFuzzer target: the safetensors header parser (io/safetensors.cpp) on arbitrary bytes.
// Every tensor it accepts must lie inside the input: its bytes are read to prove it (ASan reports
// a read outside).
#include <cstddef>
#include <cstdint>

#include "base/error.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        uint8_t sum = 0;
        for (const auto& [name, tensor] : qjit::parse_safetensors(data, size, "fuzz"))
            for (size_t i = 0; i < tensor.bytes; ++i) sum = uint8_t(sum + tensor.data[i]);
        volatile uint8_t keep = sum;
        (void)keep;
    } catch (const qjit::Error&) {
    }
    return 0;
}
