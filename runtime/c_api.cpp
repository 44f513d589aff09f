// The C API: argument checks, then calls into the runtime. Every entry point is wrapped by
// guarded(), so nothing throws across the C boundary.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "qjit/qjit.h"
#include "runtime/context.hpp"
#include "base/error.hpp"
#include "runtime/f32_layer.hpp"
#include "runtime/forward_arguments.hpp"
#include "runtime/gptq_layer.hpp"
#include "runtime/layer_file.hpp"
#include "runtime/linear_layer.hpp"
#include "runtime/cpu/jit_layer.hpp"
#include "runtime/ops/op_loops.hpp"
#include "format/reference.hpp"
#include "runtime/layer_benchmark.hpp"
#include "tuner/cpu_isa.hpp"
#include "tuner/hardware_probe.hpp"

using namespace qjit;

namespace {

// Runs `use` on the context's tuning database under its lock.
template <typename Use>
void with_tuning_db(qjit_context* context, Use use) {
    require(context != nullptr, "context is NULL");
    std::lock_guard lock(context->tuning.mutex);
    TuningDb* db = context->tuning.database();
    require(db != nullptr, "the context has no tuning database (options.tuning_db_path is \"\")");
    use(*db);
}

}  // namespace

extern "C" {

const char* qjit_status_string(qjit_status status) {
    switch (status) {
        case QJIT_OK: return "ok";
        case QJIT_ERROR_INVALID_ARGUMENT: return "invalid argument";
        case QJIT_ERROR_UNSUPPORTED: return "unsupported";
        case QJIT_ERROR_OUT_OF_MEMORY: return "out of memory";
        case QJIT_ERROR_IO: return "i/o error";
        case QJIT_ERROR_CORRUPT_DATA: return "corrupt data";
        case QJIT_ERROR_NO_DEVICE: return "no CUDA device";
        case QJIT_ERROR_INTERNAL: return "internal error";
        case QJIT_ERROR_COMMUNICATION: return "communication error";
        case QJIT_ERROR_STALE: return "stale";
        default: break;
    }
    return "unknown status";
}

const char* qjit_last_error(void) { return last_error(); }

void qjit_context_options_init(qjit_context_options* options) {
    if (!options) return;
    options->num_threads = 0;
    options->tuning_db_path = nullptr;
    options->max_isa = QJIT_ISA_AUTO;
    options->verbosity = 0;
    options->activations = QJIT_ACTIVATIONS_AUTO;
    options->tiling = nullptr;
    options->tuning_budget_ms = -1;
    options->tuning_mode = QJIT_TUNING_DEFAULT;
    options->tuning_batch = 0;
    options->cuda_device = -1;
    options->cuda_dtype = QJIT_DTYPE_F16;
}

qjit_status qjit_context_create(const qjit_context_options* options, qjit_context** context) {
    return guarded([&] {
        require(context != nullptr, "context (the output pointer) is NULL");
        *context = nullptr;
        *context = make_context(options).release();
    });
}

qjit_status qjit_context_destroy(qjit_context* context) {
    return guarded([&] { delete context; });
}

qjit_status qjit_context_num_threads(const qjit_context* context, int* num_threads) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(num_threads != nullptr, "num_threads is NULL");
        *num_threads = context->num_threads;
    });
}

qjit_status qjit_parallel_for(qjit_context* context, int64_t count, int64_t grain, qjit_range_fn fn, void* user) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(fn != nullptr, "fn is NULL");
        require(count >= 0, "count is ", count, "; expected 0 or more");
        require(grain >= 1, "grain is ", grain, "; expected 1 or more");
        qjit::ops::parallel_ranges(*context, count, grain, [&](int64_t begin, int64_t end) { fn(user, begin, end); });
    });
}

qjit_status qjit_context_isa(const qjit_context* context, qjit_isa* isa) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(isa != nullptr, "isa is NULL");
        *isa = context->isa;
    });
}

qjit_status qjit_context_describe(const qjit_context* context, const char** description) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(description != nullptr, "description is NULL");
        *description = context->description.c_str();
    });
}

qjit_status qjit_tuning_db_list(qjit_context* context, const char** text) {
    return guarded([&] {
        require(text != nullptr, "text is NULL");
        with_tuning_db(context, [&](TuningDb& db) {
            db.load();
            context->db_listing = format_listing(db.records(), probe_cpu().fingerprint);
            *text = context->db_listing.c_str();
        });
    });
}

qjit_status qjit_tuning_db_export(qjit_context* context, const char* path) {
    return guarded([&] {
        require(path != nullptr && *path, "path is NULL or empty");
        with_tuning_db(context, [&](TuningDb& db) {
            db.load();
            db.export_to(path);
        });
    });
}

qjit_status qjit_tuning_db_import(qjit_context* context, const char* path) {
    return guarded([&] {
        require(path != nullptr && *path, "path is NULL or empty");
        with_tuning_db(context, [&](TuningDb& db) { db.import_from(path); });
    });
}

void qjit_quant_config_init(qjit_quant_config* config) {
    if (!config) return;
    config->bits = 4;
    config->group_size = 128;
    config->symmetric = 0;
    config->scale_dtype = QJIT_DTYPE_F16;
    config->method = QJIT_QUANT_RTN;
    config->rank = 0;
    config->low_rank_bits = 8;
    config->act_order = 0;
    config->damp = 0.01;
    config->mixed_alpha = 0.25;
    config->outlier_fraction = 0.002;
    config->second_order_scales = 1;
    config->float_offsets = QJIT_FLOAT_OFFSETS_BY_METHOD;
    config->mixed_bits_per_weight = 0.0;
    config->milo_base = QJIT_QUANT_HQQ;
}

qjit_status qjit_quant_config_float_offsets(const qjit_quant_config* config, int* uses) {
    return guarded([&] {
        require(config != nullptr && uses != nullptr, "config or uses is NULL");
        *uses = uses_float_offsets(*config) ? 1 : 0;
    });
}

qjit_status qjit_linear_create_from_f32(qjit_context* context, const qjit_quant_config* config, int64_t k,
                                        int64_t n, const float* weights, qjit_weight_layout layout,
                                        qjit_linear** layer) {
    return qjit_linear_create_calibrated(context, config, nullptr, k, n, weights, layout, layer);
}

qjit_status qjit_linear_create_from_gptq(qjit_context* context, int64_t k, int64_t n,
                                         const qjit_gptq_tensors* tensors, qjit_linear** layer) {
    return guarded([&] {
        require(layer != nullptr, "layer (the output pointer) is NULL");
        *layer = nullptr;
        require(context != nullptr, "context is NULL");
        require(tensors != nullptr, "tensors is NULL");
        validate_shape(k, n);
        *layer = make_linear_from_gptq(context, k, n, *tensors).release();
    });
}

qjit_status qjit_linear_destroy(qjit_linear* layer) {
    return guarded([&] { delete layer; });
}

qjit_status qjit_linear_forward(qjit_linear* layer, const float* x, int64_t m, float* y) {
    return qjit_linear_forward_on(layer, QJIT_DEVICE_CPU, x, y, m, QJIT_DTYPE_F32, nullptr);
}

qjit_status qjit_linear_forward_on(qjit_linear* layer, qjit_device device, const void* x, void* y, int64_t m,
                                   qjit_dtype dtype, void* stream) {
    return guarded([&] {
        require(layer != nullptr, "layer is NULL");
        const BackendLayer& on = layer_on(*layer, static_cast<int>(device));
        require(x != nullptr, "x is NULL");
        require(y != nullptr, "y is NULL");
        if (on.device() == Device::Cpu) {
            require(dtype == QJIT_DTYPE_F32, "dtype is ", int(dtype), "; a CPU forward takes QJIT_DTYPE_F32");
            require_activations(static_cast<const float*>(x), m, layer->params.k, static_cast<const float*>(y),
                                layer->params.n);
        } else {
            require_device_rows(m);
        }
        on.run({x, m, dtype, on.device()}, {y, m, dtype, on.device()}, stream);
    });
}

qjit_status qjit_linear_forward_shared_input(qjit_linear* const* layers, int count, const float* x, int64_t m,
                                             float* const* ys) {
    return guarded([&] {
        require(layers != nullptr, "layers is NULL");
        require(ys != nullptr, "ys is NULL");
        require(count >= 1, "count is ", count, "; expected 1 or more");
        require(x != nullptr, "x is NULL");
        require(layers[0] != nullptr, "layers[0] is NULL");
        const qjit_linear& first = *layers[0];
        for (int i = 0; i < count; ++i) {
            require(layers[i] != nullptr, "layers[", i, "] is NULL");
            require(ys[i] != nullptr, "ys[", i, "] is NULL");
            require(layers[i]->context == first.context, "layers[", i, "] belongs to another context than layers[0]");
            require(layers[i]->params.k == first.params.k, "layers[", i, "] has K = ", layers[i]->params.k,
                    "; layers[0] has K = ", first.params.k, ": they must read the same inputs");
            require_activations(x, m, first.params.k, ys[i], layers[i]->params.n);
            for (int j = 0; j < i; ++j)
                require(!overlaps(ys[i], m * layers[i]->params.n, ys[j], m * layers[j]->params.n), "ys[", j, "] and ys[",
                        i, "] overlap");
        }
        const qjit_linear* const* readers = layers;
        linear_forward_shared_input({readers, size_t(count)}, x, m, ys);
    });
}

qjit_status qjit_linear_dequantize(const qjit_linear* layer, float* weights_k_by_n) {
    return guarded([&] {
        require(layer != nullptr, "layer is NULL");
        require(weights_k_by_n != nullptr, "weights_k_by_n is NULL");
        const std::vector<float> w = layer->cpu->low_rank() ? dequantize(unpack_linear(*layer), unpack_low_rank(*layer))
                                                     : dequantize(unpack_linear(*layer));
        std::copy(w.begin(), w.end(), weights_k_by_n);
    });
}

qjit_status qjit_linear_get_info(const qjit_linear* layer, qjit_linear_info* info) {
    return guarded([&] {
        require(layer != nullptr, "layer is NULL");
        require(info != nullptr, "info is NULL");
        const QuantParams& p = layer->params;
        info->k = p.k;
        info->n = p.n;
        info->bits = p.bits;
        info->group_size = int(p.group_size);
        info->symmetric = p.symmetric;
        info->act_order = p.act_order;
        info->weight_bytes = weight_bytes(*layer);
        info->low_rank = p.low_rank.rank;
        info->low_rank_bits = p.low_rank.bits;
        info->low_rank_bytes =
            p.low_rank.present() ? low_rank_stored_bytes(p.low_rank.rank, p.low_rank.bits, p.k, p.n) : 0;
        info->stored_bytes = stored_bytes(p) + info->low_rank_bytes;
        info->wide_groups = int64_t(std::count(p.group_bits.begin(), p.group_bits.end(), uint8_t(4)));
        info->second_order_scales = p.second_order_scales();
        info->outliers = p.outliers;
        info->float_offsets = p.float_offsets;
        info->scale_code_bits = p.scale_code_bits;
    });
}

qjit_status qjit_linear_get_tuning(const qjit_linear* layer, qjit_linear_tuning* tuning) {
    return guarded([&] {
        require(layer != nullptr, "layer is NULL");
        require(tuning != nullptr, "tuning is NULL");
        const TilingChoice& t = layer->tuning;
        tuning->source = t.source;
        tuning->kernel_key = t.kernel_key.c_str();
        tuning->tiling = t.tiling.c_str();
        tuning->tuning_ms = t.tuning_ms;
        tuning->kernel_ms = layer->kernel_ms;
        tuning->measured_us = t.measured_us;
        tuning->candidates_timed = t.timed;
        tuning->candidates_ranked = t.ranked;
        tuning->warning = t.warning.c_str();
    });
}

qjit_status qjit_linear_benchmark(qjit_linear* layer, int64_t m, int repeats, int cold, double* median_us) {
    return guarded([&] {
        require(layer != nullptr, "layer is NULL");
        require(median_us != nullptr, "median_us is NULL");
        require(m >= 1 && m <= (1 << 20), "m is ", m, "; expected 1 .. 2^20");
        require(repeats >= 1 && repeats <= 100000, "repeats is ", repeats, "; expected 1 .. 100000");
        *median_us = benchmark_linear(*layer, m, repeats, cold != 0) * 1e6;
    });
}

qjit_status qjit_linear_describe(const qjit_linear* layer, const char** description) {
    return guarded([&] {
        require(layer != nullptr, "layer is NULL");
        require(description != nullptr, "description is NULL");
        *description = layer->description.c_str();
    });
}

qjit_status qjit_linear_save(const qjit_linear* layer, const char* path) {
    return guarded([&] {
        require(layer != nullptr, "layer is NULL");
        require(path != nullptr && *path, "path is NULL or empty");
        save_layer(*layer, path);
    });
}

qjit_status qjit_linear_load(qjit_context* context, const char* path, qjit_linear** layer) {
    return guarded([&] {
        require(layer != nullptr, "layer (the output pointer) is NULL");
        *layer = nullptr;
        require(context != nullptr, "context is NULL");
        require(path != nullptr && *path, "path is NULL or empty");
        *layer = load_layer(context, path).release();
    });
}

}  // extern "C"
