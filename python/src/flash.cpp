// qjit._native's flash FFNs (include/qjit/qjit_flash.h): writing a neuron file from fp32 weights and
// running a model's FFN layers from it. Shapes are checked here, before any pointer reaches C.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "context.hpp"
#include "qjit/qjit_flash.h"
#include "quant_config.hpp"

namespace qjit_python {

using namespace nb::literals;
namespace {

class FlashWriter {
public:
    FlashWriter(const std::string& path, int64_t layers, int64_t d_model, int64_t d_ff, int activation, bool has_bias,
                bool f16, const nb::dict& quant, bool bundled, int64_t alignment, double sparsity,
                int sparsity_score) {
        qjit_flash_file_options options;
        qjit_flash_file_options_init(&options);
        options.layers = layers;
        options.d_model = d_model;
        options.d_ff = d_ff;
        options.activation = qjit_ffn_activation(activation);
        options.has_bias = has_bias ? 1 : 0;
        options.f16 = f16 ? 1 : 0;
        options.quant = quant_config(quant);
        options.bundled = bundled ? 1 : 0;
        options.alignment = alignment;
        options.sparsity = sparsity;
        options.sparsity_score = sparsity_score;
        qjit_flash_writer* writer = nullptr;
        call_unlocked([&] { return qjit_flash_writer_create(path.c_str(), &options, &writer); });
        writer_.reset(writer);
        d_model_ = d_model;
        d_ff_ = d_ff;
        swiglu_ = options.activation == QJIT_FFN_SWIGLU;
        has_bias_ = has_bias;
        calibrated_ = sparsity > 0;
    }

    // The next layer: up, gate (d_model x d_ff; gate for SwiGLU only), down (d_ff x d_model), bias (d_ff);
    // calibration (n x d_model, n >= 1): the layer's FFN inputs, for a file with sparsity (and only there).
    void add_layer(nb::handle up, nb::handle gate, nb::handle down, nb::handle bias, nb::handle calibration) {
        const ArrayView up_view = cpu_array(up, "up", {Element::f32}, 2);
        expect_shape(up_view, "up", {d_model_, d_ff_}, "d_model, d_ff");
        const ArrayView down_view = cpu_array(down, "down", {Element::f32}, 2);
        expect_shape(down_view, "down", {d_ff_, d_model_}, "d_ff, d_model");
        if (gate.is_none() == swiglu_)
            invalid_argument(swiglu_ ? "gate is None; a SwiGLU file needs the gate (d_model x d_ff)"
                                     : "gate given; a ReLU file has no gate");
        if (bias.is_none() == has_bias_)
            invalid_argument(has_bias_ ? "bias is None; the file was opened with has_bias" : "bias given; the file has none");
        std::optional<ArrayView> gate_view, bias_view;
        if (swiglu_) {
            gate_view = cpu_array(gate, "gate", {Element::f32}, 2);
            expect_shape(*gate_view, "gate", {d_model_, d_ff_}, "d_model, d_ff");
        }
        if (has_bias_) {
            bias_view = cpu_array(bias, "bias", {Element::f32}, 1);
            if (bias_view->shape[0] != d_ff_)
                invalid_argument("bias: " + std::to_string(bias_view->shape[0]) + " values, expected d_ff = " +
                                 std::to_string(d_ff_));
        }
        if (calibration.is_none() == calibrated_)
            invalid_argument(calibrated_ ? "calibration is None; a file with sparsity needs the layer's FFN inputs "
                                           "(n x d_model) to set its threshold"
                                         : "calibration given; the file has no sparsity (sparsity is 0)");
        if (calibrated_) {
            const ArrayView x = cpu_array(calibration, "calibration", {Element::f32}, 2);
            if (x.shape[0] < 1 || x.shape[1] != d_model_)
                invalid_argument("calibration: shape " + shape_string(x.shape) + ", expected (n >= 1, d_model = " +
                                 std::to_string(d_model_) + ")");
            call_unlocked([&] {
                return qjit_flash_writer_add_layer_calibrated(writer(), up_view.as<float>(), gate_view->as<float>(),
                                                              down_view.as<float>(), x.as<float>(), x.shape[0]);
            });
            return;
        }
        call_unlocked([&] {
            return qjit_flash_writer_add_layer(writer(), up_view.as<float>(), gate_view ? gate_view->as<float>() : nullptr,
                                               down_view.as<float>(), bias_view ? bias_view->as<float>() : nullptr);
        });
    }

    void finish() {
        call_unlocked([&] { return qjit_flash_writer_finish(writer()); });
        writer_.reset();
    }

private:
    qjit_flash_writer* writer() const {
        if (!writer_) invalid_argument("the neuron file is already finished");
        return writer_.get();
    }
    Owned<qjit_flash_writer, qjit_flash_writer_destroy> writer_;
    int64_t d_model_ = 0, d_ff_ = 0;
    bool swiglu_ = false, has_bias_ = false, calibrated_ = false;
};

class FlashFfn {
public:
    FlashFfn(const Context& context, const std::string& path, int64_t dram_budget_bytes, int window, bool direct_io,
             bool coalesce_reads, bool tune_reads, bool use_sparsity, bool read_ahead)
        : context_(context.shared()) {
        qjit_flash_options options;
        qjit_flash_options_init(&options);
        options.dram_budget_bytes = dram_budget_bytes;
        options.window = window;
        options.direct_io = direct_io ? 1 : 0;
        options.coalesce_reads = coalesce_reads ? 1 : 0;
        options.tune_reads = tune_reads ? 1 : 0;
        options.use_sparsity = use_sparsity ? 1 : 0;
        options.read_ahead = read_ahead ? 1 : 0;
        qjit_flash_ffn* ffn = nullptr;
        call_unlocked([&] { return qjit_flash_ffn_create(context.get(), path.c_str(), &options, &ffn); });
        ffn_.reset(ffn);
        check(qjit_flash_ffn_get_info(ffn_.get(), &info_));
    }

    nb::dict info() const {
        qjit_flash_ffn_info i;
        check(qjit_flash_ffn_get_info(ffn_.get(), &i));
        nb::dict d;
        d["layers"] = i.layers;
        d["d_model"] = i.d_model;
        d["d_ff"] = i.d_ff;
        d["activation"] = int(i.activation);
        d["bundled"] = bool(i.bundled);
        d["record_bytes"] = i.record_bytes;
        d["resident_neurons"] = i.resident_neurons;
        d["dram_bytes"] = i.dram_bytes;
        d["gate_apart"] = bool(i.gate_apart);
        d["sparsity"] = i.sparsity;
        d["resident_gate_bytes"] = i.resident_gate_bytes;
        d["weight_bytes"] = i.weight_bytes;
        d["all_resident_bytes"] = i.all_resident_bytes;
        d["format"] = std::string(i.format);
        d["storage"] = std::string(i.storage);
        d["kernels"] = std::string(i.kernels);
        return d;
    }

    void pin(int64_t layer, nb::handle neurons) {
        const ArrayView ids = cpu_array(neurons, "neurons", {Element::i32}, 1);
        call_unlocked([&] { return qjit_flash_ffn_pin(ffn_.get(), layer, ids.as<int32_t>(), ids.size()); });
    }

    void fit_predictor(int64_t layer, nb::handle x, double target_recall, float magnitude_threshold) {
        const ArrayView rows = input(x);
        call_unlocked([&] {
            return qjit_flash_ffn_fit_predictor(ffn_.get(), layer, rows.as<float>(), rows.rows(), target_recall,
                                                magnitude_threshold);
        });
    }

    // y = the layer's FFN of x (..., d_model), over `active` neuron ids when given.
    nb::object forward(int64_t layer, nb::handle x, nb::handle active) {
        const ArrayView rows = input(x);
        std::optional<ArrayView> ids;
        if (!active.is_none()) ids = cpu_array(active, "active", {Element::i32}, 1);
        NewArray y = new_f32_array(rows.shape, rows.framework);
        if (rows.rows() == 0) return y.array;
        call_unlocked([&] {
            return qjit_flash_ffn_forward(ffn_.get(), layer, rows.as<float>(), rows.rows(), y.data,
                                          ids ? ids->as<int32_t>() : nullptr, ids ? ids->size() : 0);
        });
        return y.array;
    }

    nb::dict counters() const {
        qjit_flash_counters c;
        check(qjit_flash_ffn_get_counters(ffn_.get(), &c));
        nb::dict d;
        d["tokens"] = c.tokens;
        d["active_neurons"] = c.active_neurons;
        d["cache_hits"] = c.cache_hits;
        d["neurons_loaded"] = c.neurons_loaded;
        d["predicted"] = c.predicted;
        d["bytes_read"] = c.bytes_read;
        d["reads"] = c.reads;
        d["io_seconds"] = c.io_seconds;
        d["io_wait_seconds"] = c.io_wait_seconds;
        d["cache_seconds"] = c.cache_seconds;
        d["compute_seconds"] = c.compute_seconds;
        d["predict_seconds"] = c.predict_seconds;
        d["read_ahead_neurons"] = c.read_ahead_neurons;
        d["read_ahead_used"] = c.read_ahead_used;
        return d;
    }

    void reset_counters() { check(qjit_flash_ffn_reset_counters(ffn_.get())); }

private:
    ArrayView input(nb::handle x) const {
        ArrayView rows = cpu_array(x, "x", {Element::f32});
        if (rows.last() != info_.d_model)
            invalid_argument("x: shape " + shape_string(rows.shape) + "; the last dimension must be d_model = " +
                             std::to_string(info_.d_model));
        return rows;
    }
    SharedContext context_;  // declared first: destroyed after the FFN
    Owned<qjit_flash_ffn, qjit_flash_ffn_destroy> ffn_;
    qjit_flash_ffn_info info_{};
};

}  // namespace

void register_flash(nb::module_& m) {
    nb::class_<FlashWriter>(m, "FlashWriter")
        .def(nb::init<const std::string&, int64_t, int64_t, int64_t, int, bool, bool, const nb::dict&, bool, int64_t,
                      double, int>(),
             "path"_a, "layers"_a, "d_model"_a, "d_ff"_a, "activation"_a, "has_bias"_a, "f16"_a, "quant"_a,
             "bundled"_a, "alignment"_a, "sparsity"_a, "sparsity_score"_a)
        .def("add_layer", &FlashWriter::add_layer, "up"_a, "gate"_a.none(), "down"_a, "bias"_a.none(),
             "calibration"_a.none())
        .def("finish", &FlashWriter::finish);
    nb::class_<FlashFfn>(m, "FlashFfn")
        .def(nb::init<const Context&, const std::string&, int64_t, int, bool, bool, bool, bool, bool>(), "context"_a,
             "path"_a, "dram_budget_bytes"_a, "window"_a, "direct_io"_a, "coalesce_reads"_a, "tune_reads"_a,
             "use_sparsity"_a, "read_ahead"_a)
        .def("info", &FlashFfn::info)
        .def("pin", &FlashFfn::pin, "layer"_a, "neurons"_a)
        .def("fit_predictor", &FlashFfn::fit_predictor, "layer"_a, "x"_a, "target_recall"_a, "magnitude_threshold"_a)
        .def("forward", &FlashFfn::forward, "layer"_a, "x"_a, "active"_a.none())
        .def("counters", &FlashFfn::counters)
        .def("reset_counters", &FlashFfn::reset_counters);
}

}  // namespace qjit_python
