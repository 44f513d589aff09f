// Where the tests find the real GGUF models that scripts/fetch_model.sh fetches, in $QJIT_MODEL_DIR,
// by default ~/.cache/qjit/models: SmolLM2-135M-Instruct with Q4_1 linear weights (the default) and
// Gemma 3 270M in Q4_K_M (--gemma3). Tests that read one skip when it is absent.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace qjit::test {

inline std::filesystem::path model_folder() {
    const char* dir = std::getenv("QJIT_MODEL_DIR");
    const char* home = std::getenv("HOME");
    return dir && *dir ? std::filesystem::path(dir) : std::filesystem::path(home ? home : "") / ".cache/qjit/models";
}

inline std::filesystem::path smollm2_model_path() { return model_folder() / "SmolLM2-135M-Instruct.Q4_1.gguf"; }

inline std::filesystem::path gemma3_model_path() { return model_folder() / "gemma-3-270m-q4_k_m.gguf"; }

}  // namespace qjit::test
