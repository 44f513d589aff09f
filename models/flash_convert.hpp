// qjit-flash-convert's program: writes the FFN layers of a Llama model as a neuron file
// (io/neuron_file.hpp), for running FFNs from storage (runtime/flash/).
//
//   qjit-flash-convert --gguf MODEL.gguf --out FILE [--bits 4 --group 128 --sym --f32-scales --f16
//                      --split --alignment 4096]
//                      [--sparsity S --calibration-tokens FILE.seq.u32 --calibration-sequences N
//                       --calibration-rows R --sparsity-score gate|weighted]
//   qjit-flash-convert --gptq DIR --out FILE [...]
//
// With --sparsity (GGUF models), the model runs its calibration tokens, and each layer's threshold
// on the gate activations is set to zero that share of them (runtime/flash/ffn_sparsity.hpp); the
// thresholds go into the file, whose gates then stay resident when it is served.
//
// Every layer's SwiGlu FFN (its gate, up and down projections, named as models/tensor_names.hpp
// says for GGUF files and GPTQ checkpoints) is dequantized to fp32 and quantized again per neuron,
// round to nearest in the chosen format: a neuron vector has its own groups along d_model, which no
// checkpoint's groups are (GPTQ groups run along the input features, across neurons for the down
// projection), so the checkpoint's codes cannot be copied as they are.
#pragma once

namespace qjit_models {

// Runs qjit-flash-convert on its command line (argv[0] the program's name). Returns the exit
// status: 0, 1 when the conversion failed (the message on stderr), 2 for bad arguments.
int flash_convert_program(int argc, char** argv);

}  // namespace qjit_models
