// The C API of flash FFNs (include/qjit/qjit_flash.h): neuron files written from fp32 weights, and
// FFNs served from them under a DRAM budget.
#include <algorithm>
#include <cstring>
#include <thread>
#include <memory>
#include <variant>

#include "base/error.hpp"
#include "io/neuron_file.hpp"
#include "qjit/qjit_flash.h"
#include "runtime/context.hpp"
#include "runtime/flash/ffn_sparsity.hpp"
#include "runtime/flash/flash_ffn.hpp"
#include "runtime/flash/flash_ffn_handle.hpp"
#include "runtime/flash/read_tuning.hpp"
#include "runtime/quant_config.hpp"

using namespace qjit;

struct qjit_flash_writer {
    NeuronFileHeader header;
    NeuronFileWriter writer;
    double sparsity_target = 0;
    SparsityScore score = SparsityScore::GateWeighted;
    FfnSparsity sparsity;  // filled layer by layer when calibrated
    std::unique_ptr<ThreadPool> pool;  // the calibration's products
    int64_t layers_added = 0;
};

namespace {

NeuronFileHeader header_of(const qjit_flash_file_options& o) {
    require(o.layers >= 1, "options->layers is ", o.layers, "; at least 1");
    require(o.d_model >= 1 && o.d_model < kMaxDimension, "options->d_model is ", o.d_model, "; out of range");
    require(o.d_ff >= 1 && o.d_ff < kMaxDimension, "options->d_ff is ", o.d_ff, "; out of range");
    require(o.activation == QJIT_FFN_RELU || o.activation == QJIT_FFN_SWIGLU, "options->activation is ",
            int(o.activation), "; a neuron file takes QJIT_FFN_RELU (0) or QJIT_FFN_SWIGLU (1)");
    require(!o.has_bias || o.activation == QJIT_FFN_RELU, "options->has_bias: biases go with QJIT_FFN_RELU only");
    NeuronFileHeader h;
    h.layers = o.layers;
    h.d_model = o.d_model;
    h.d_ff = o.d_ff;
    h.activation = o.activation == QJIT_FFN_SWIGLU ? FfnActivation::SwiGlu : FfnActivation::Relu;
    h.has_bias = o.has_bias != 0;
    h.bundled = o.bundled != 0;
    require(o.sparsity == 0 || (o.sparsity > 0 && o.sparsity < 1 && o.activation == QJIT_FFN_SWIGLU),
            "options->sparsity is ", o.sparsity, "; 0, or in (0, 1) for a QJIT_FFN_SWIGLU file");
    require(o.sparsity_score == QJIT_SPARSITY_GATE || o.sparsity_score == QJIT_SPARSITY_GATE_WEIGHTED,
            "options->sparsity_score is ", o.sparsity_score, "; not a qjit_flash_sparsity_score");
    h.has_sparsity = o.sparsity > 0;
    h.gate_apart = h.has_sparsity && h.bundled;
    h.alignment = o.alignment;
    if (o.f16) {
        h.vector = f16_vector_layout(o.d_model);
    } else {
        require(o.quant.method == QJIT_QUANT_RTN, "options->quant.method: neuron files are quantized by RTN");
        const QuantizerConfig config = quantizer_config(o.quant, o.d_model, o.d_ff);
        h.vector = quantized_vector_layout(std::get<WeightFormat>(config), o.d_model);
    }
    validate(h);
    return h;
}

template <typename Handle>
Handle& checked(Handle* handle, const char* name) {
    if (handle == nullptr) fail(QJIT_ERROR_INVALID_ARGUMENT, name, " is NULL");
    return *handle;
}

}  // namespace

extern "C" {

void qjit_flash_file_options_init(qjit_flash_file_options* options) {
    if (options == nullptr) return;
    *options = {};
    options->activation = QJIT_FFN_RELU;
    qjit_quant_config_init(&options->quant);
    options->bundled = 1;
    options->alignment = 4096;
    options->sparsity_score = QJIT_SPARSITY_GATE_WEIGHTED;
}

qjit_status qjit_flash_writer_create(const char* path, const qjit_flash_file_options* options,
                                     qjit_flash_writer** writer) {
    return guarded([&] {
        require(writer != nullptr, "writer (the output pointer) is NULL");
        *writer = nullptr;
        require(path != nullptr, "path is NULL");
        const NeuronFileHeader header = header_of(checked(options, "options"));
        const SparsityScore score =
            options->sparsity_score == QJIT_SPARSITY_GATE ? SparsityScore::Gate : SparsityScore::GateWeighted;
        *writer = new qjit_flash_writer{header, NeuronFileWriter(path, header), options->sparsity, score, {}, {}, 0};
    });
}

qjit_status qjit_flash_writer_add_layer(qjit_flash_writer* writer, const float* up, const float* gate,
                                        const float* down, const float* bias) {
    return guarded([&] {
        qjit_flash_writer& w = checked(writer, "writer");
        require(up != nullptr && down != nullptr, "up and down must not be NULL");
        require(gate != nullptr || w.header.activation == FfnActivation::Relu, "gate is NULL; a SwiGLU FFN needs it");
        require(bias != nullptr || !w.header.has_bias, "bias is NULL; the file has biases");
        require(!w.header.has_sparsity, "the file has sparsity: add its layers with qjit_flash_writer_add_layer_calibrated");
        w.writer.add_layer(quantize_ffn_layer(w.header, up, gate, down, bias));
        ++w.layers_added;
    });
}

qjit_status qjit_flash_writer_add_layer_calibrated(qjit_flash_writer* writer, const float* up, const float* gate,
                                                   const float* down, const float* x, int64_t n) {
    return guarded([&] {
        qjit_flash_writer& w = checked(writer, "writer");
        require(w.header.has_sparsity, "the file has no sparsity (options->sparsity is 0): use qjit_flash_writer_add_layer");
        require(up != nullptr && gate != nullptr && down != nullptr, "up, gate and down must not be NULL");
        require(x != nullptr && n >= 1, "x is NULL or n ", n, " below 1: the calibration needs rows");
        require(w.layers_added < w.header.layers, "all ", w.header.layers, " layers are added already");
        const FfnLayerWeights weights = quantize_ffn_layer(w.header, up, gate, down, nullptr);
        if (!w.pool) w.pool = std::make_unique<ThreadPool>(int(std::max(1u, std::thread::hardware_concurrency())));
        const LayerSparsity layer = calibrate_layer_sparsity(w.header, weights, x, n, w.sparsity_target, w.score, *w.pool);
        w.writer.add_layer(weights);
        append_layer(w.sparsity, layer);
        ++w.layers_added;
    });
}

qjit_status qjit_flash_writer_finish(qjit_flash_writer* writer) {
    return guarded([&] {
        qjit_flash_writer& w = checked(writer, "writer");
        if (w.header.has_sparsity && w.layers_added == w.header.layers) {
            w.sparsity.target = float(w.sparsity_target);
            w.writer.set_sparsity(w.sparsity);
        }
        w.writer.finish();
    });
}

void qjit_flash_writer_destroy(qjit_flash_writer* writer) { delete writer; }

void qjit_flash_options_init(qjit_flash_options* options) {
    if (options == nullptr) return;
    *options = {};
    options->window = 4;
    options->direct_io = 1;
    options->coalesce_reads = 1;
    options->use_sparsity = 1;
}

qjit_status qjit_flash_ffn_create(qjit_context* context, const char* path, const qjit_flash_options* options,
                                  qjit_flash_ffn** ffn) {
    return guarded([&] {
        require(ffn != nullptr, "ffn (the output pointer) is NULL");
        *ffn = nullptr;
        require(context != nullptr, "context is NULL");
        require(path != nullptr, "path is NULL");
        qjit_flash_options o;
        qjit_flash_options_init(&o);
        if (options != nullptr) o = *options;
        FileStorageOptions storage_options;
        storage_options.direct = o.direct_io != 0;
        std::unique_ptr<Storage> storage = open_file_storage(path, storage_options);
        FlashFfnOptions flash;
        flash.dram_budget_bytes = o.dram_budget_bytes;
        flash.window = o.window;
        flash.coalesce_reads = o.coalesce_reads != 0;
        flash.use_sparsity = o.use_sparsity != 0;
        flash.read_ahead = o.read_ahead != 0;
        require(o.activations == QJIT_ACTIVATIONS_AUTO || o.activations == QJIT_ACTIVATIONS_INT8 ||
                    o.activations == QJIT_ACTIVATIONS_F32,
                "options.activations is ", o.activations, "; expected QJIT_ACTIVATIONS_AUTO (", int(QJIT_ACTIVATIONS_AUTO),
                "), QJIT_ACTIVATIONS_INT8 (", int(QJIT_ACTIVATIONS_INT8), ") or QJIT_ACTIVATIONS_F32 (",
                int(QJIT_ACTIVATIONS_F32), ")");
        flash.activations = qjit_activations(o.activations);
        flash.isa = context->isa;
        flash.kernel_tuning = {&context->tuning, TuningPolicy{.forced = "",
                                                              .mode = context->tuning_mode,
                                                              .budget_ms = context->tuning_budget_ms}};
        {
            std::lock_guard<std::mutex> lock(context->tuning.mutex);
            if (TuningDb* db = context->tuning.database())
                flash.read_curve = read_curve_for(path, *storage, *db, o.tune_reads != 0);
        }
        auto handle = std::make_unique<qjit_flash_ffn>();
        handle->ffn = std::make_unique<FlashFfn>(std::move(storage), flash, *context->pool, context);
        const NeuronFileHeader& h = handle->ffn->header();
        handle->format_name = h.vector.coding == VectorCoding::F16 ? "f16" : h.vector.format.name();
        *ffn = handle.release();
    });
}

void qjit_flash_ffn_destroy(qjit_flash_ffn* ffn) { delete ffn; }

qjit_status qjit_flash_ffn_get_info(const qjit_flash_ffn* ffn, qjit_flash_ffn_info* info) {
    return guarded([&] {
        const FlashFfn& f = *checked(ffn, "ffn").ffn;
        require(info != nullptr, "info is NULL");
        const NeuronFileHeader& h = f.header();
        *info = {};
        info->layers = h.layers;
        info->d_model = h.d_model;
        info->d_ff = h.d_ff;
        info->activation = h.activation == FfnActivation::SwiGlu ? QJIT_FFN_SWIGLU : QJIT_FFN_RELU;
        info->bundled = h.bundled;
        info->record_bytes = h.record_bytes();
        info->resident_neurons = f.resident_capacity();
        info->dram_bytes = f.dram_bytes();
        info->gate_apart = h.gate_apart;
        info->sparsity = f.sparsity() ? double(f.sparsity()->target) : 0.0;
        info->resident_gate_bytes = f.resident_gate_bytes();
        info->weight_bytes = h.layers * h.d_ff * (h.parts() * h.vector.bytes() + (h.has_bias ? 4 : 0));
        info->all_resident_bytes = f.all_resident_bytes();
        std::strncpy(info->format, ffn->format_name.c_str(), sizeof info->format - 1);
        std::strncpy(info->storage, f.storage().describe().c_str(), sizeof info->storage - 1);
        std::strncpy(info->kernels, f.generated_kernels().c_str(), sizeof info->kernels - 1);
    });
}

qjit_status qjit_flash_ffn_pin(qjit_flash_ffn* ffn, int64_t layer, const int32_t* neurons, int64_t count) {
    return guarded([&] {
        FlashFfn& f = *checked(ffn, "ffn").ffn;
        require(count >= 0 && (neurons != nullptr || count == 0), "neurons is NULL or count ", count, " negative");
        f.pin(layer, std::span(neurons, size_t(count)));
    });
}

qjit_status qjit_flash_ffn_fit_predictor(qjit_flash_ffn* ffn, int64_t layer, const float* x, int64_t n,
                                         double target_recall, float magnitude_threshold) {
    return guarded([&] {
        FlashFfn& f = *checked(ffn, "ffn").ffn;
        PredictorOptions options;
        options.target_recall = target_recall;
        f.fit_predictor(layer, x, n, options, magnitude_threshold);
    });
}

qjit_status qjit_flash_ffn_forward(qjit_flash_ffn* ffn, int64_t layer, const float* x, int64_t m, float* y,
                                   const int32_t* active, int64_t count) {
    return guarded([&] {
        FlashFfn& f = *checked(ffn, "ffn").ffn;
        if (active == nullptr) {
            f.forward(layer, x, m, y);
            return;
        }
        require(count >= 0, "count is ", count, "; negative");
        thread_local std::vector<int32_t> ids;
        ids.assign(active, active + count);
        f.forward(layer, x, m, y, &ids);
    });
}

qjit_status qjit_flash_ffn_get_counters(const qjit_flash_ffn* ffn, qjit_flash_counters* counters) {
    return guarded([&] {
        const FlashFfnCounters& c = checked(ffn, "ffn").ffn->counters();
        require(counters != nullptr, "counters is NULL");
        *counters = {c.tokens, c.active_neurons, c.cache_hits, c.neurons_loaded, c.predicted, c.bytes_read, c.reads,
                     c.io_seconds, c.io_wait_seconds, c.cache_seconds, c.compute_seconds, c.predict_seconds,
                     c.read_ahead_neurons, c.read_ahead_used};
    });
}

qjit_status qjit_flash_ffn_curve_gbps(const qjit_flash_ffn* ffn, int64_t chunk_bytes, double* gbps) {
    return guarded([&] {
        const ReadCurve& curve = checked(ffn, "ffn").ffn->read_curve();
        require(gbps != nullptr, "gbps is NULL");
        require(chunk_bytes > 0, "chunk_bytes ", chunk_bytes, " must be positive");
        *gbps = curve.gbps(chunk_bytes, curve.best_queue_depth(chunk_bytes));
    });
}

qjit_status qjit_flash_ffn_reset_counters(qjit_flash_ffn* ffn) {
    return guarded([&] { checked(ffn, "ffn").ffn->reset_counters(); });
}

}  // extern "C"
