// qjit-synthetic-checkpoint's program: writes a GPTQ checkpoint with a model's layer shapes
// (configs/models) and random weights (the project's writer, tools/checkpoint_writer.hpp), for
// trying qjit-tune --checkpoint, the checkpoint example and the creation benchmark without
// downloading a model. Layers are named as a Hugging Face checkpoint's blocks are
// (models/tensor_names.hpp: model.layers.<block>.<name>); blocks share each shape's random tensors.
#pragma once

namespace qjit_models {

// Runs qjit-synthetic-checkpoint on its command line (argv[0] the program's name). Returns the exit
// status: 0, 1 when writing failed (the message on stderr), CLI11's for bad arguments.
int synthetic_checkpoint_program(int argc, char** argv);

}  // namespace qjit_models
