#include "runtime/context.hpp"

#include <algorithm>
#include <filesystem>
#include <cstdlib>
#include <thread>

#include "runtime/cuda/nvrtc_compiler.hpp"
#include "base/error.hpp"
#include "tuner/cpu_isa.hpp"
#include "tuner/hardware_probe.hpp"

namespace qjit {

namespace {

constexpr double kDefaultTuningBudgetMs = 300;

const char* env(const char* name) {
    const char* value = std::getenv(name);
    return value && *value ? value : nullptr;
}

std::string default_tuning_db_path() {
    if (const char* path = env("QJIT_TUNING_DB")) return path;
    if (const char* cache = env("XDG_CACHE_HOME")) return concat(cache, "/qjit/tuning.yaml");
    if (const char* home = env("HOME")) return concat(home, "/.cache/qjit/tuning.yaml");
    return "qjit-tuning.yaml";
}

qjit_isa isa_cap(const qjit_context_options& options) {
    require(options.max_isa >= QJIT_ISA_AUTO && options.max_isa <= QJIT_ISA_AVX512_VNNI, "options.max_isa is ",
            int(options.max_isa), "; not a qjit_isa value");
    qjit_isa cap = options.max_isa == QJIT_ISA_AUTO ? QJIT_ISA_AVX512_VNNI : options.max_isa;
    if (const char* name = env("QJIT_MAX_ISA")) {
        const std::optional<qjit_isa> parsed = parse_isa_name(name);
        require(parsed.has_value(), "QJIT_MAX_ISA is '", name,
                "'; expected one of auto, portable, avx2, avx2_vnni, avx512, avx512_vnni");
        if (*parsed != QJIT_ISA_AUTO) cap = std::min(cap, *parsed);
    }
    return cap;
}

qjit_activations activation_path(const qjit_context_options& options) {
    require(options.activations >= QJIT_ACTIVATIONS_AUTO && options.activations <= QJIT_ACTIVATIONS_INT8,
            "options.activations is ", int(options.activations), "; not a qjit_activations value");
    const char* name = env("QJIT_ACTIVATIONS");
    if (!name) return options.activations;
    const std::string_view value(name);
    if (value == "f32") return QJIT_ACTIVATIONS_F32;
    if (value == "int8") return QJIT_ACTIVATIONS_INT8;
    require(value == "auto", "QJIT_ACTIVATIONS is '", name, "'; expected auto, f32 or int8");
    return options.activations;
}

double tuning_budget_ms(const qjit_context_options& options) {
    require(!(options.tuning_budget_ms != options.tuning_budget_ms), "options.tuning_budget_ms is NaN");
    if (options.tuning_budget_ms >= 0) return options.tuning_budget_ms;
    const char* text = env("QJIT_TUNING_BUDGET_MS");
    if (!text) return kDefaultTuningBudgetMs;
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    require(end != text && *end == '\0' && value >= 0 && value < 1e9, "QJIT_TUNING_BUDGET_MS is '", text,
            "'; expected milliseconds >= 0");
    return value;
}


// options.cuda_device >= 0: the device must exist (QJIT_ERROR_NO_DEVICE otherwise) and is probed.
void open_cuda_device(const qjit_context_options& options, qjit_context& context) {
    require(options.cuda_device >= -1, "options.cuda_device is ", options.cuda_device, "; expected -1 (none) or an ordinal");
    require(options.cuda_dtype == QJIT_DTYPE_F16 || options.cuda_dtype == QJIT_DTYPE_BF16, "options.cuda_dtype is ",
            int(options.cuda_dtype), "; expected QJIT_DTYPE_F16 or QJIT_DTYPE_BF16");
    context.cuda_activations =
        options.cuda_dtype == QJIT_DTYPE_BF16 ? jit::cuda::ActivationType::BF16 : jit::cuda::ActivationType::F16;
    if (const char* tiling = env("QJIT_CUDA_TILING")) context.cuda_tiling = tiling;
    if (options.cuda_device < 0) return;
    cuda::Driver& driver = cuda::Driver::get();
    const int count = driver.device_count();
    if (options.cuda_device >= count)
        fail(QJIT_ERROR_NO_DEVICE, "no CUDA device ", options.cuda_device, ": the driver sees ", count);
    driver.make_current(options.cuda_device);
    context.gpu = driver.properties(options.cuda_device);
    context.cubin_cache_dir = cuda::default_cubin_cache_dir();
}

}  // namespace

std::unique_ptr<qjit_context> make_context(const qjit_context_options* user_options) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    if (user_options) options = *user_options;
    require(options.num_threads >= 0 && options.num_threads <= 1024, "options.num_threads is ", options.num_threads,
            "; expected 0 (all cores) .. 1024");
    require(options.verbosity >= 0, "options.verbosity is ", options.verbosity, "; expected >= 0");
    require(options.tuning_mode >= QJIT_TUNING_DEFAULT && options.tuning_mode <= QJIT_TUNING_EXHAUSTIVE,
            "options.tuning_mode is ", int(options.tuning_mode), "; not a qjit_tuning_mode value");
    require(options.tuning_batch >= 0 && options.tuning_batch <= 1 << 20, "options.tuning_batch is ",
            options.tuning_batch, "; expected 0 (one row) .. 2^20");

    auto context = std::make_unique<qjit_context>();
    context->num_threads =
        options.num_threads > 0 ? options.num_threads : std::max(1, int(std::thread::hardware_concurrency()));
    context->isa = best_isa_up_to(isa_cap(options));
    context->tuning.db_path = options.tuning_db_path ? options.tuning_db_path : default_tuning_db_path();
    std::error_code ignored;
    if (!context->tuning.db_path.empty() && std::filesystem::is_directory(context->tuning.db_path, ignored))
        fail(QJIT_ERROR_IO, "the tuning database path '", context->tuning.db_path,
             "' is a directory; expected a file (options.tuning_db_path or $QJIT_TUNING_DB)");
    context->verbosity = options.verbosity;
    context->activations = activation_path(options);
    if (options.tiling) context->tiling = options.tiling;
    context->tuning_budget_ms = tuning_budget_ms(options);
    context->tuning_mode = options.tuning_mode;
    context->tuning_batch = std::max<int64_t>(1, options.tuning_batch);
    if (const char* dir = env("QJIT_DUMP_DIR")) context->dump_dir = dir;
    if (const char* verbose = env("QJIT_VERBOSE")) context->verbosity = std::max(context->verbosity, std::atoi(verbose));
    context->pool = std::make_unique<ThreadPool>(context->num_threads);
    open_cuda_device(options, *context);
    context->description = concat(describe(probe_cpu()), "; using ", isa_name(context->isa), ", ", context->num_threads,
                                  " threads; tuning database ",
                                  context->tuning.db_path.empty() ? "none" : context->tuning.db_path);
    if (context->gpu)
        context->description += concat("; CUDA device ", context->gpu->ordinal, ": ", context->gpu->fingerprint());
    return context;
}

}  // namespace qjit
