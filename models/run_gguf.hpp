// qjit-run's program: runs a Llama-architecture GGUF model (llama.cpp's model files) with qjit's
// linear layers: the mean NLL of token sequences, scored as llama.cpp's perplexity tools score them,
// and greedy decoding timed per token. The layers are the file's own weights imported exactly
// (--method exact, the default), dense fp32 loops over the dequantized weights (fp32), or the
// dequantized weights requantized by one of qjit's methods (rtn, hqq, milo, gptq, mixed).
// docs/models.md lists the options and what they print.
#pragma once

namespace qjit_models {

// Runs qjit-run on its command line (argv[0] the program's name). Returns the exit status: 0, 1
// when the run failed (the message on stderr), 2 for bad arguments.
int run_gguf_program(int argc, char** argv);

}  // namespace qjit_models
