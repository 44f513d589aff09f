// qjit-tune: tunes qjit's kernels for LLM layer shapes on this machine, stores the choices in the
// tuning database, and prints how fast they run (models/tune_driver.hpp; docs/tuning.md).
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "models/gguf_llama.hpp"
#include "models/tune_driver.hpp"

int main(int argc, char** argv) {
    qjit_models::TuneIo io;
    io.out = [](const std::string& text) {  // each piece as it is printed, through a pipe too (qjit.tune streams it)
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
    };
    io.err = [](const std::string& text) { std::fwrite(text.data(), 1, text.size(), stderr); };
    io.tty = isatty(STDOUT_FILENO);
    io.gguf = qjit_models::llama::gguf_linear_weights;
    return qjit_models::run_tune(std::vector<std::string>(argv + 1, argv + argc), io).exit_code;
}
