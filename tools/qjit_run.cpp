// qjit-run: runs a Llama GGUF model with qjit's layers (models/run_gguf.hpp; docs/models.md).
#include "models/run_gguf.hpp"

int main(int argc, char** argv) { return qjit_models::run_gguf_program(argc, argv); }
