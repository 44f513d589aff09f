// What qjit-tune does, as a function: tunes qjit's kernels for a model's layer shapes on this machine,
// stores the choices in the tuning database and times them. qjit-tune (tools/qjit_tune.cpp) and
// Python's qjit.tune call it with the command line's arguments.
//
// The layers: by default Llama-2-7B's at 4-bit, group 128 (models/model_config.hpp);
// --model configs/models/NAME.yaml another model's (random weights: speed does not depend on their
// values), with --tp N as one of N tensor-parallel ranks holds them (models/tensor_names.hpp says
// which layers split which way); --checkpoint DIR every distinct format and shape of a GPTQ
// checkpoint, and --gguf FILE of a Llama GGUF file, each made from the file's own weights. Shapes
// the database already holds for this machine are not timed again (--retune times them anyway).
// --list, --export and --import work on the database and tune nothing. --json FILE also writes the
// run's settings and rows as JSON (what qjit.tune in Python reads).
//
// Every layer is timed cold (weights flushed from the caches before each call, as when decoding a
// model larger than the caches), next to a memory-bandwidth probe of the same thread count, and
// against the untuned default (the performance model's first pick) and the portable path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qjit/qjit.h"

namespace qjit_models {

// A linear weight of a model file in ggml's block format, as --gguf tunes it.
struct GgmlLinear {
    std::string name;  // "blk.0.attn_q.weight"
    int64_t k = 0, n = 0;
    uint32_t ggml_type = 0;  // GGUF's type number
    std::string type_name;   // "Q4_1"
    bool importable = false;  // a type qjit_linear_create_from_gguf takes
    const void* data = nullptr;
    size_t bytes = 0;
};

// A model file's linear weights; `owner` keeps their bytes mapped.
struct GgmlLinears {
    std::vector<GgmlLinear> linears;
    std::shared_ptr<const void> owner;
};

// Where the run's text goes, and what reads --gguf (a function of the GGUF loader, which needs the
// library's internals: models/gguf_llama.hpp's gguf_linear_weights).
struct TuneIo {
    std::function<void(const std::string&)> out;  // standard output, a piece at a time
    std::function<void(const std::string&)> err;  // warnings, usage errors and the failure line
    bool tty = false;                             // out is a terminal: draw a progress bar
    std::function<GgmlLinears(const std::string& path)> gguf;  // empty: --gguf is refused
};

struct TuneOutcome {
    qjit_status status = QJIT_OK;  // QJIT_OK: done (help shown, the database managed or the shapes tuned)
    std::string what;              // what failed: "qjit_checkpoint_open", "reading the model", ...
    std::string message;           // why
    int exit_code = 0;             // qjit-tune's exit status: 0, 1 for a failure, CLI11's for bad usage
};

// "WHAT failed: STATUS: MESSAGE", STATUS as qjit_status_string words it (qjit-tune prints it after
// "qjit-tune: ").
std::string failure_text(const TuneOutcome& outcome);

// Runs qjit-tune with `arguments` (without the program's name). Never exits: a failure is the
// outcome, also written to io.err as "qjit-tune: " + failure_text (bad usage as CLI11 words it).
TuneOutcome run_tune(const std::vector<std::string>& arguments, const TuneIo& io);

}  // namespace qjit_models
