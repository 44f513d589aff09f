// qjit-flash-convert: a Llama model's FFN layers (GGUF or GPTQ checkpoint) as a neuron file
// (models/flash_convert.hpp; docs/flash.md).
#include "models/flash_convert.hpp"

int main(int argc, char** argv) { return qjit_models::flash_convert_program(argc, argv); }
