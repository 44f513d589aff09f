// A qjit context: the resolved options, the CPU's instruction set, and the thread pool that
// every layer made with it shares.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "jit/cuda/cuda_tiling.hpp"
#include "qjit/qjit.h"
#include "runtime/cuda/cuda_driver.hpp"
#include "runtime/cpu/thread_pool.hpp"
#include "runtime/ops/attention_plan.hpp"
#include "tuner/tuning_sequence.hpp"

struct qjit_context {
    int num_threads = 1;
    qjit_isa isa = QJIT_ISA_PORTABLE;  // what the CPU offers, capped by the options and $QJIT_MAX_ISA
    int verbosity = 0;
    qjit_activations activations = QJIT_ACTIVATIONS_AUTO;  // AUTO: each layer takes the default path
    std::string tiling;                                    // empty: chosen per layer; else forced (see qjit.h)
    std::string dump_dir;                                  // $QJIT_DUMP_DIR: write generated kernels there
    double tuning_budget_ms = 300;     // per layer on a database miss; 0: the model's pick, untimed
    qjit_tuning_mode tuning_mode = QJIT_TUNING_DEFAULT;
    int64_t tuning_batch = 1;
    std::unique_ptr<qjit::ThreadPool> pool;

    // The CUDA device layers upload their weights to (options.cuda_device), probed at creation.
    std::optional<qjit::GpuProperties> gpu;
    qjit::jit::cuda::ActivationType cuda_activations = qjit::jit::cuda::ActivationType::F16;
    std::string cuda_tiling;      // $QJIT_CUDA_TILING: forced for every CUDA layer (tests, debugging)
    std::string cubin_cache_dir;  // the NVRTC cubin cache on disk; empty: memory only

    qjit::TuningMemory tuning;  // the tuning database (resolved path; empty: none) and this context's choices
    qjit::ops::AttentionPlans attention_plans;  // by shape and cache type, chosen on first use
    std::string db_listing;                               // the text qjit_tuning_db_list hands out
    std::string description;                              // qjit_context_describe's text
};

namespace qjit {

// Resolves options (NULL for defaults) and the QJIT_* environment variables into a context.
std::unique_ptr<qjit_context> make_context(const qjit_context_options* options);

}  // namespace qjit
