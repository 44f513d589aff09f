#include "runtime/cuda_layer.hpp"

#include <chrono>
#include <stdexcept>

#include "runtime/error.hpp"
#include "tuner/cuda_search.hpp"
#include "tuner/tuning_problem.hpp"
#include "tuner/tuning_db.hpp"

namespace qjit {

using jit::cuda::ActivationType;
using jit::cuda::CudaKernelSpec;
using jit::cuda::CudaTiling;

namespace {

constexpr int kSearchRepeats = 15;
constexpr int kMaxTimedCandidates = 24;

double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The record's tiling when it parses, is valid for the format and fits the device.
std::optional<CudaTiling> tiling_from_text(const CudaKernelSpec& format, const std::string& text,
                                           const cuda::DeviceProperties& device) {
    CudaKernelSpec spec = format;
    try {
        spec.tiling = jit::cuda::parse_tiling(text, format.tiling);
    } catch (const std::invalid_argument&) {
        return std::nullopt;
    }
    if (spec.tiling.kind != format.tiling.kind || !jit::cuda::is_valid(spec) ||
        !jit::cuda::fits_device(spec, device.shared_memory_per_block_optin))
        return std::nullopt;
    return spec.tiling;
}

// Picks without installing. `may_search`: time candidates when the database has nothing.
std::pair<CudaTiling, CudaTilingChoice> choose(qjit_context& context, CudaExecutor& executor, ActivationType type,
                                               int64_t m, bool may_search) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t bucket = batch_bucket(m);
    const CudaKernelSpec format = executor.format(type, bucket);
    const cuda::DeviceProperties& device = executor.device();
    CudaTilingChoice choice;
    choice.kernel_key = cuda_kernel_key(format, executor.n());
    auto finish = [&](CudaTiling t, qjit_tiling_source source) {
        choice.source = source;
        choice.tiling = jit::cuda::tiling_text(t);
        choice.tuning_ms = ms_since(start);
        return std::pair{t, choice};
    };
    if (!context.cuda_tiling.empty()) {
        CudaKernelSpec forced = format;
        try {
            forced.tiling = jit::cuda::parse_tiling(context.cuda_tiling, format.tiling);
            jit::cuda::check_spec(forced);
        } catch (const std::invalid_argument& e) {
            fail(QJIT_ERROR_INVALID_ARGUMENT, "QJIT_CUDA_TILING '", context.cuda_tiling, "': ", e.what());
        }
        return finish(forced.tiling, QJIT_TILING_FORCED);
    }

    std::lock_guard lock(context.tuning_mutex);
    const bool reuse = context.tuning_mode == QJIT_TUNING_DEFAULT;
    if (auto it = context.tuned.find(choice.kernel_key); reuse && it != context.tuned.end())
        if (auto t = tiling_from_text(format, it->second.tiling, device)) {
            choice.measured_us = it->second.time_us;
            return finish(*t, QJIT_TILING_CONTEXT);
        }
    TuningDb* db = nullptr;
    try {
        db = tuning_database(context);
    } catch (const Error& e) {
        choice.warning = concat("tuning database not used: ", e.what());
    }
    if (db && reuse)
        if (std::optional<TuningRecord> record = db->find(device.fingerprint(), choice.kernel_key))
            if (auto t = tiling_from_text(format, record->tiling, device)) {
                choice.measured_us = record->time_us;
                context.tuned[choice.kernel_key] = *record;
                return finish(*t, QJIT_TILING_DATABASE);
            }

    const std::vector<CudaTiling> ranked = ranked_cuda_tilings(format, executor.n(), device);
    if (ranked.empty()) fail(QJIT_ERROR_UNSUPPORTED, "no CUDA tiling of ", choice.kernel_key, " fits ", device.name);
    choice.ranked = int(ranked.size());
    const bool exhaustive = context.tuning_mode == QJIT_TUNING_EXHAUSTIVE;
    if (!may_search || (context.tuning_budget_ms == 0 && !exhaustive)) return finish(ranked.front(), QJIT_TILING_MODEL);

    const CudaSearchResult result = timed_cuda_search(
        ranked, [&](const CudaTiling& t) { return executor.time_tiling_us(m, type, t, kSearchRepeats); },
        exhaustive ? 1e18 : context.tuning_budget_ms, exhaustive ? int(ranked.size()) : kMaxTimedCandidates);
    choice.timed = result.timed;
    choice.measured_us = result.best_us;
    TuningRecord record;
    record.fingerprint = device.fingerprint();
    record.kernel_key = choice.kernel_key;
    record.tiling = jit::cuda::tiling_text(result.best);
    record.time_us = result.best_us;
    record.gbps = double(executor.weight_bytes()) / (result.best_us * 1e-6) * 1e-9;
    record.date = utc_timestamp();
    context.tuned[record.kernel_key] = record;
    try {
        if (db) db->store(record);
    } catch (const Error& e) {
        choice.warning = concat("tuning result not stored: ", e.what());
    }
    return finish(result.best, QJIT_TILING_SEARCHED);
}

const CudaTilingChoice& choose_and_install(qjit_context& context, CudaLayer& layer, ActivationType type, int64_t m,
                                           bool may_search) {
    auto [tiling, choice] = choose(context, *layer.executor, type, m, may_search);
    choice.compile_ms = layer.executor->install(type, batch_bucket(m), tiling).compile_ms;
    return layer.choices[{type, batch_bucket(m)}] = choice;
}

}  // namespace

std::unique_ptr<CudaLayer> make_cuda_layer(qjit_context& context, const QuantizedMatrix& matrix) {
    auto layer = std::make_unique<CudaLayer>();
    try {
        layer->executor = std::make_unique<CudaExecutor>(*context.gpu, matrix, context.dump_dir, context.cubin_cache_dir);
    } catch (const std::invalid_argument& e) {
        fail(QJIT_ERROR_UNSUPPORTED, "no CUDA kernel for this layer: ", e.what());
    }
    std::lock_guard lock(layer->mutex);
    choose_and_install(context, *layer, context.cuda_activations, context.tuning_batch, true);
    return layer;
}

const CudaTilingChoice& cuda_tiling_for(qjit_context& context, CudaLayer& layer, ActivationType type, int64_t m) {
    std::lock_guard lock(layer.mutex);
    const auto it = layer.choices.find({type, batch_bucket(m)});
    if (it != layer.choices.end()) return it->second;
    return choose_and_install(context, layer, type, m, false);
}

}  // namespace qjit
