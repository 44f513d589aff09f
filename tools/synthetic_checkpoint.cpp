// qjit-synthetic-checkpoint: a GPTQ checkpoint of random weights with a model's layer shapes
// (models/synthetic_checkpoint.hpp; docs/checkpoints.md).
#include "models/synthetic_checkpoint.hpp"

int main(int argc, char** argv) { return qjit_models::synthetic_checkpoint_program(argc, argv); }
