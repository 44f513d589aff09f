// A qjit context: the resolved options, the CPU's instruction set, and the thread pool that
// every layer made with it shares.
#pragma once

#include <memory>
#include <string>

#include "qjit/qjit.h"
#include "runtime/thread_pool.hpp"

struct qjit_context {
    int num_threads = 1;
    qjit_isa isa = QJIT_ISA_PORTABLE;  // what the CPU offers, capped by the options and $QJIT_MAX_ISA
    std::string tuning_db_path;        // resolved; read and written by the tuner
    int verbosity = 0;
    qjit_activations activations = QJIT_ACTIVATIONS_AUTO;  // AUTO: each layer takes the default path
    std::string tiling;                                    // empty: chosen per layer; else forced (see qjit.h)
    std::string dump_dir;                                  // $QJIT_DUMP_DIR: write generated kernels there
    std::unique_ptr<qjit::ThreadPool> pool;
};

namespace qjit {

// Resolves options (NULL for defaults) and the QJIT_* environment variables into a context.
std::unique_ptr<qjit_context> make_context(const qjit_context_options* options);

}  // namespace qjit
