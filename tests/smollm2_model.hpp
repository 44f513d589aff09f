// Where the tests find the real GGUF model that scripts/fetch_model.sh fetches: SmolLM2-135M-Instruct
// with Q4_1 linear weights, in $QJIT_MODEL_DIR, by default ~/.cache/qjit/models. Tests that read it
// skip when it is absent.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace qjit::test {

inline std::filesystem::path smollm2_model_path() {
    const char* dir = std::getenv("QJIT_MODEL_DIR");
    const char* home = std::getenv("HOME");
    const std::filesystem::path folder =
        dir && *dir ? std::filesystem::path(dir) : std::filesystem::path(home ? home : "") / ".cache/qjit/models";
    return folder / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace qjit::test
