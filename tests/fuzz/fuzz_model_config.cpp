// libFuzzer target: qjit-tune's model config reader (models/model_config.cpp) on arbitrary YAML. It
// reads a file, so each input is written to one scratch file first. A bad file may only be
// reported with std::runtime_error.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "models/model_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = "/tmp/qjit_fuzz_model_config_" + std::to_string(getpid()) + ".yaml";
    static const struct Cleanup {
        ~Cleanup() { std::filesystem::remove_all(path); }  // when the fuzzer exits
    } cleanup;
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
    try {
        const qjit_models::ModelConfig model = qjit_models::load_model_config(path);
        (void)qjit_models::distinct_shapes(model.linear);
    } catch (const std::runtime_error&) {
    }
    return 0;
}
