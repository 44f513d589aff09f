// qjit._native: the C API (include/qjit/qjit.h) as Python objects. The package around it (qjit/*.py)
// gives the Pythonic names and defaults; this module only converts arrays, keeps handles alive in
// the right order, releases the GIL around every call that computes, and turns failed calls into
// qjit.errors exceptions.
//
// Lifetimes: a context lives as long as anything made with it (layers and checkpoints hold a
// shared reference), so no handle is ever used after its context is destroyed.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "context.hpp"
#include "errors.hpp"
#include "quant_config.hpp"
#include "models/tune_driver.hpp"
#include "qjit/qjit.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace qjit_python {
namespace {

class Calibration {
public:
    explicit Calibration(int64_t k) : k_(k) {
        qjit_calibration* calibration = nullptr;
        check(qjit_calibration_create(k, &calibration));
        calibration_.reset(calibration);
    }
    void add(nb::handle x) {
        const ArrayView rows = cpu_array(x, "x", {Element::f32});
        if (rows.last() != k_)
            invalid_argument("x: shape " + shape_string(rows.shape) +
                             "; the last dimension must be K = " + std::to_string(k_));
        if (rows.rows() == 0) return;
        call_unlocked([&] { return qjit_calibration_add(calibration_.get(), rows.as<float>(), rows.rows()); });
    }
    void set_hessian(nb::handle h) {
        const ArrayView matrix = cpu_array(h, "hessian", {Element::f32}, 2);
        if (matrix.shape != std::vector<int64_t>{k_, k_})
            invalid_argument("hessian: shape " + shape_string(matrix.shape) +
                             ", expected (K, K) = " + shape_string({k_, k_}));
        check(qjit_calibration_set_hessian(calibration_.get(), matrix.as<float>()));
    }
    void set_diagonal(nb::handle d) {
        const ArrayView diagonal = cpu_array(d, "diagonal", {Element::f32}, 1);
        if (diagonal.shape[0] != k_)
            invalid_argument("diagonal: " + std::to_string(diagonal.shape[0]) +
                             " values, expected K = " + std::to_string(k_));
        check(qjit_calibration_set_diagonal(calibration_.get(), diagonal.as<float>()));
    }
    int64_t rows() const {
        int64_t count = 0;
        check(qjit_calibration_rows(calibration_.get(), &count));
        return count;
    }
    int64_t k() const { return k_; }
    const qjit_calibration* get() const { return calibration_.get(); }

private:
    int64_t k_;
    Owned<qjit_calibration, qjit_calibration_destroy> calibration_;
};

// Runs a C call that creates a layer without the GIL and checks its status.
template <typename Create>
qjit_linear* created(Create&& create) {
    qjit_linear* layer = nullptr;
    call_unlocked([&] { return create(&layer); });
    return layer;
}

nb::dict tuning_dict(const qjit_linear_tuning& t) {
    nb::dict d;
    d["source"] = int(t.source);
    d["kernel_key"] = t.kernel_key;
    d["tiling"] = t.tiling;
    d["tuning_ms"] = t.tuning_ms;
    d["kernel_ms"] = t.kernel_ms;
    d["measured_us"] = t.measured_us;
    d["candidates_timed"] = t.candidates_timed;
    d["candidates_ranked"] = t.candidates_ranked;
    d["warning"] = t.warning;
    return d;
}

// GPTQ tensors as the C API reads them, checked against K and N first (the C API cannot see how
// long a buffer is, so the binding checks every shape before handing a pointer over).
struct GptqArrays {
    ArrayView qweight, qzeros, scales;
    std::optional<ArrayView> g_idx;
    std::vector<int32_t> g_idx_i32;  // a 64-bit g_idx narrowed
    qjit_gptq_tensors tensors{};
};

std::unique_ptr<GptqArrays> gptq_arrays(int64_t k, int64_t n, int bits, int group_size, nb::handle qweight,
                                        nb::handle qzeros, nb::handle scales, nb::handle g_idx, int checkpoint_format) {
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
        invalid_argument("bits is " + std::to_string(bits) + "; GPTQ layers are 2, 3, 4 or 8 bits");
    if (group_size == 0 || group_size < -1)
        invalid_argument("group_size is " + std::to_string(group_size) +
                         "; expected rows per group, or -1 (per column)");
    if (k < 1 || n < 1) invalid_argument("K and N must be at least 1");
    auto arrays = std::make_unique<GptqArrays>();
    const int64_t groups = group_size == -1 ? 1 : (k + group_size - 1) / group_size;
    arrays->qweight = cpu_array(qweight, "qweight", {Element::i32}, 2);
    expect_shape(arrays->qweight, "qweight", {(k * bits + 31) / 32, n}, "ceil(K * bits / 32), N");
    arrays->qzeros = cpu_array(qzeros, "qzeros", {Element::i32}, 2);
    expect_shape(arrays->qzeros, "qzeros", {groups, (n * bits + 31) / 32}, "groups, ceil(N * bits / 32)");
    arrays->scales = cpu_array(scales, "scales", {Element::f16, Element::bf16, Element::f32}, 2);
    expect_shape(arrays->scales, "scales", {groups, n}, "groups, N");
    qjit_gptq_tensors& t = arrays->tensors;
    t.bits = bits;
    t.group_size = group_size;
    t.qweight = arrays->qweight.as<int32_t>();
    t.qzeros = arrays->qzeros.as<int32_t>();
    t.scales = arrays->scales.data;
    t.scale_dtype = arrays->scales.element == Element::f16    ? QJIT_DTYPE_F16
                    : arrays->scales.element == Element::bf16 ? QJIT_DTYPE_BF16
                                                              : QJIT_DTYPE_F32;
    t.checkpoint_format = qjit_gptq_format(checkpoint_format);
    if (!g_idx.is_none()) {
        arrays->g_idx = cpu_array(g_idx, "g_idx", {Element::i32, Element::i64}, 1);
        expect_shape(*arrays->g_idx, "g_idx", {k}, "one group index per input row");
        if (arrays->g_idx->element == Element::i64) {
            const int64_t* wide = arrays->g_idx->as<int64_t>();
            for (int64_t row = 0; row < k; ++row) {
                if (wide[row] < INT32_MIN || wide[row] > INT32_MAX)
                    invalid_argument("g_idx[" + std::to_string(row) + "] is " + std::to_string(wide[row]));
                arrays->g_idx_i32.push_back(int32_t(wide[row]));
            }
            t.g_idx = arrays->g_idx_i32.data();
        } else {
            t.g_idx = arrays->g_idx->as<int32_t>();
        }
    }
    return arrays;
}

class Linear {
public:
    Linear(SharedContext context, qjit_linear* layer) : context_(std::move(context)), layer_(layer) {
        qjit_linear_info info;
        check(qjit_linear_get_info(layer_.get(), &info));
        k_ = info.k;
        n_ = info.n;
    }

    // Quantizes fp32 weights (layout 0: K x N, 1: N x K) with a config given as a dict of
    // qjit_quant_config's fields.
    static Linear quantize(const Context& context, nb::handle weights, int layout, const nb::dict& config,
                           const Calibration* calibration) {
        const ArrayView w = cpu_array(weights, "weights", {Element::f32}, 2);
        const int64_t k = layout == QJIT_LAYOUT_N_BY_K ? w.shape[1] : w.shape[0];
        const int64_t n = layout == QJIT_LAYOUT_N_BY_K ? w.shape[0] : w.shape[1];
        if (calibration != nullptr && calibration->k() != k)
            invalid_argument("the calibration is for K = " + std::to_string(calibration->k()) +
                             " inputs; the weights have K = " + std::to_string(k));
        const qjit_quant_config c = quant_config(config);
        const qjit_calibration* calibrated = calibration ? calibration->get() : nullptr;
        return Linear(context.shared(), created([&](qjit_linear** layer) {
                          return qjit_linear_create_calibrated(context.get(), &c, calibrated, k, n, w.as<float>(),
                                                               qjit_weight_layout(layout), layer);
                      }));
    }

    static Linear from_gptq(const Context& context, int64_t k, int64_t n, int bits, int group_size, nb::handle qweight,
                            nb::handle qzeros, nb::handle scales, nb::handle g_idx, int checkpoint_format, nb::handle u,
                            nb::handle v, int low_rank_bits) {
        const std::unique_ptr<GptqArrays> arrays =
            gptq_arrays(k, n, bits, group_size, qweight, qzeros, scales, g_idx, checkpoint_format);
        if (u.is_none() != v.is_none()) invalid_argument("low_rank needs both factors, U (K x rank) and V (rank x N)");
        if (u.is_none())
            return Linear(context.shared(), created([&](qjit_linear** layer) {
                              return qjit_linear_create_from_gptq(context.get(), k, n, &arrays->tensors, layer);
                          }));
        const ArrayView u_view = cpu_array(u, "U", {Element::f32}, 2);
        const ArrayView v_view = cpu_array(v, "V", {Element::f32}, 2);
        const int64_t rank = u_view.shape[1];
        expect_shape(u_view, "U", {k, rank}, "K, rank");
        expect_shape(v_view, "V", {rank, n}, "rank, N");
        qjit_low_rank low_rank{int(rank), low_rank_bits, u_view.as<float>(), v_view.as<float>()};
        return Linear(context.shared(), created([&](qjit_linear** layer) {
                          return qjit_linear_create_with_low_rank(context.get(), k, n, &arrays->tensors, &low_rank,
                                                                  layer);
                      }));
    }

    // A GGUF tensor's bytes (a uint8 array of any shape, e.g. GGUFReader's tensor.data), checked by the
    // C API against the type, K and N.
    static Linear from_gguf(const Context& context, uint32_t ggml_type, nb::handle data, int64_t k, int64_t n) {
        const ArrayView bytes = cpu_array(data, "data", {Element::u8});
        return Linear(context.shared(), created([&](qjit_linear** layer) {
                          return qjit_linear_create_from_gguf(context.get(), ggml_type, bytes.data, size_t(bytes.size()),
                                                              k, n, layer);
                      }));
    }

    static Linear load(const Context& context, const std::string& path) {
        return Linear(context.shared(), created([&](qjit_linear** layer) {
                          return qjit_linear_load(context.get(), path.c_str(), layer);
                      }));
    }

    void save(const std::string& path) const {
        call_unlocked([&] { return qjit_linear_save(layer_.get(), path.c_str()); });
    }

    // y = x W for x of shape (..., K): y has shape (..., N), written to `out` when given, else a new
    // array of x's kind (numpy or PyTorch).
    nb::object forward(nb::handle x, nb::handle out) {
        const ArrayView input = cpu_array(x, "x", {Element::f32});
        if (input.last() != k_)
            invalid_argument("x: shape " + shape_string(input.shape) +
                             "; the last dimension must be K = " + std::to_string(k_));
        std::vector<int64_t> shape = input.shape;
        shape.back() = n_;
        nb::object result;
        float* y = nullptr;
        if (out.is_none()) {
            NewArray created = new_f32_array(shape, input.framework);
            result = std::move(created.array);
            y = created.data;
        } else {
            y = writable_f32(out, "out", shape);
            result = nb::borrow(out);
            const float* x_begin = input.as<float>();
            if (y < x_begin + input.size() && x_begin < y + input.rows() * n_)
                invalid_argument("out overlaps x; qjit needs separate input and output memory");
        }
        const int64_t m = input.rows();
        if (m == 0) return result;
        call_unlocked([&] { return qjit_linear_forward(layer_.get(), input.as<float>(), m, y); });
        return result;
    }

    // The CPU forward on host pointers (as integers): m C-contiguous float32 rows of K in, of N out.
    // For PyTorch's operator (qjit/torch/ops.py), whose tensors are checked there: no array
    // conversion on the way, so a call costs what the C call costs.
    void forward_pointers(uintptr_t x, uintptr_t y, int64_t m) {
        if (m == 0) return;  // an empty batch: nothing to compute
        call_unlocked([&] {
            return qjit_linear_forward(layer_.get(), reinterpret_cast<const float*>(x), m, reinterpret_cast<float*>(y));
        });
    }

    // The CUDA forward on device pointers (as integers), for PyTorch CUDA tensors.
    void forward_cuda(uintptr_t x, uintptr_t y, int64_t m, int dtype, uintptr_t stream) {
        call_unlocked([&] {
            return qjit_linear_forward_cuda(layer_.get(), reinterpret_cast<const void*>(x), reinterpret_cast<void*>(y),
                                            m, qjit_dtype(dtype), reinterpret_cast<void*>(stream));
        });
    }

    nb::object dequantize() const {
        NewArray weights = new_f32_array({k_, n_}, Framework::numpy);
        call_unlocked([&] { return qjit_linear_dequantize(layer_.get(), weights.data); });
        return weights.array;
    }

    nb::dict info() const {
        qjit_linear_info i;
        check(qjit_linear_get_info(layer_.get(), &i));
        nb::dict d;
        d["k"] = i.k;
        d["n"] = i.n;
        d["bits"] = i.bits;
        d["group_size"] = i.group_size;
        d["symmetric"] = bool(i.symmetric);
        d["act_order"] = bool(i.act_order);
        d["weight_bytes"] = i.weight_bytes;
        d["low_rank"] = i.low_rank;
        d["low_rank_bits"] = i.low_rank_bits;
        d["stored_bytes"] = i.stored_bytes;
        d["low_rank_bytes"] = i.low_rank_bytes;
        d["wide_groups"] = i.wide_groups;
        d["second_order_scales"] = bool(i.second_order_scales);
        d["outliers"] = i.outliers;
        d["float_offsets"] = bool(i.float_offsets);
        d["scale_code_bits"] = i.scale_code_bits;
        return d;
    }

    nb::dict tuning() const {
        qjit_linear_tuning t;
        check(qjit_linear_get_tuning(layer_.get(), &t));
        return tuning_dict(t);
    }

    nb::dict tuning_cuda(int64_t m, int dtype) {
        qjit_linear_tuning t;
        check(qjit_linear_get_tuning_cuda(layer_.get(), m, qjit_dtype(dtype), &t));
        return tuning_dict(t);
    }

    std::string describe() const {
        const char* text = nullptr;
        check(qjit_linear_describe(layer_.get(), &text));
        return text;
    }

    double benchmark(int64_t m, int repeats, bool cold) {
        double median_us = 0;
        call_unlocked([&] { return qjit_linear_benchmark(layer_.get(), m, repeats, cold ? 1 : 0, &median_us); });
        return median_us;
    }

    double benchmark_cuda(int64_t m, int dtype, int repeats) {
        double median_us = 0;
        call_unlocked(
            [&] { return qjit_linear_benchmark_cuda(layer_.get(), m, qjit_dtype(dtype), repeats, &median_us); });
        return median_us;
    }

    int64_t k() const { return k_; }
    int64_t n() const { return n_; }
    qjit_linear* get() const { return layer_.get(); }

private:
    SharedContext context_;  // declared first: destroyed after the layer
    Owned<qjit_linear, qjit_linear_destroy> layer_;
    int64_t k_ = 0, n_ = 0;
};

class Checkpoint {
public:
    Checkpoint(const Context& context, const std::string& directory) : context_(context.shared()) {
        call_unlocked([&] { return qjit_checkpoint_open(context.get(), directory.c_str(), &checkpoint_); });
    }
    ~Checkpoint() { close(); }
    Checkpoint(const Checkpoint&) = delete;
    Checkpoint& operator=(const Checkpoint&) = delete;

    void close() {
        qjit_checkpoint_close(checkpoint_);
        checkpoint_ = nullptr;
    }

    std::vector<nb::dict> layers() const {
        int64_t count = 0;
        check(qjit_checkpoint_num_layers(opened(), &count));
        std::vector<nb::dict> layers;
        for (int64_t index = 0; index < count; ++index) {
            qjit_checkpoint_layer l;
            check(qjit_checkpoint_get_layer(opened(), index, &l));
            nb::dict d;
            d["name"] = l.name;
            d["k"] = l.k;
            d["n"] = l.n;
            d["bits"] = l.bits;
            d["group_size"] = l.group_size;
            d["act_order"] = bool(l.act_order);
            d["symmetric"] = bool(l.symmetric);
            d["format"] = l.format;
            d["checkpoint_format"] = int(l.checkpoint_format);
            d["scale_dtype"] = int(l.scale_dtype);
            d["checkpoint_bytes"] = l.checkpoint_bytes;
            d["ggml_type"] = l.ggml_type;
            layers.push_back(std::move(d));
        }
        return layers;
    }

    Linear create(const std::string& name) {
        qjit_checkpoint* checkpoint = opened();
        return Linear(context_, created([&](qjit_linear** layer) {
                          return qjit_checkpoint_create_layer(checkpoint, name.c_str(), layer);
                      }));
    }

private:
    qjit_checkpoint* opened() const {
        if (checkpoint_ == nullptr) invalid_argument("the checkpoint is closed");
        return checkpoint_;
    }
    SharedContext context_;  // declared first: destroyed after the checkpoint
    qjit_checkpoint* checkpoint_ = nullptr;
};

// A mixture-of-experts layer's experts in one call (qjit_moe_forward): `experts` is a list of
// (layer, rows, weights) with rows int32 token indices into x (..., K) and weights float32 or None.
nb::object moe_forward(const Context& context, const std::vector<nb::tuple>& experts, nb::handle x) {
    if (experts.empty()) invalid_argument("experts is empty; a mixture needs at least one expert");
    const ArrayView input = cpu_array(x, "x", {Element::f32});
    std::vector<qjit_expert_rows> rows(experts.size());
    std::vector<ArrayView> views;  // keeps each expert's rows and weights alive
    views.reserve(2 * experts.size());
    int64_t n = 0;
    for (size_t e = 0; e < experts.size(); ++e) {
        const std::string name = "experts[" + std::to_string(e) + "]";
        if (experts[e].size() != 3) invalid_argument(name + " is not a (layer, rows, weights) triple");
        const Linear& layer = nb::cast<const Linear&>(experts[e][0]);
        if (layer.k() != input.last())
            invalid_argument(name + ": the layer has K = " + std::to_string(layer.k()) + "; x has shape " +
                             shape_string(input.shape));
        if (e > 0 && layer.n() != n)
            invalid_argument(name + ": the layer has N = " + std::to_string(layer.n()) + ", expert 0 has " +
                             std::to_string(n));
        n = layer.n();
        const ArrayView& ids = views.emplace_back(cpu_array(experts[e][1], (name + ".rows").c_str(), {Element::i32}, 1));
        rows[e] = {layer.get(), ids.as<int32_t>(), nullptr, ids.size()};
        if (!experts[e][2].is_none()) {
            const ArrayView& weights =
                views.emplace_back(cpu_array(experts[e][2], (name + ".weights").c_str(), {Element::f32}, 1));
            if (weights.size() != ids.size())
                invalid_argument(name + ": " + std::to_string(weights.size()) + " weights for " +
                                 std::to_string(ids.size()) + " rows");
            rows[e].weights = weights.as<float>();
        }
    }
    std::vector<int64_t> shape = input.shape;
    shape.back() = n;
    NewArray y = new_f32_array(shape, input.framework);
    if (input.rows() == 0) return y.array;
    call_unlocked([&] {
        return qjit_moe_forward(context.get(), rows.data(), int(rows.size()), input.as<float>(), input.rows(), y.data);
    });
    return y.array;
}

int cuda_device_count() {
    int count = 0;
    check(qjit_cuda_device_count(&count));
    return count;
}

nb::dict cuda_device_info(int ordinal) {
    qjit_cuda_device_info i;
    check(qjit_cuda_get_device_info(ordinal, &i));
    nb::dict d;
    d["name"] = std::string(i.name);
    d["ordinal"] = i.ordinal;
    d["compute_capability"] = nb::make_tuple(i.compute_major, i.compute_minor);
    d["sm_count"] = i.sm_count;
    d["shared_memory_per_sm"] = i.shared_memory_per_sm;
    d["shared_memory_per_block"] = i.shared_memory_per_block;
    d["l2_bytes"] = i.l2_bytes;
    d["global_memory_bytes"] = i.global_memory_bytes;
    d["memory_bus_bits"] = i.memory_bus_bits;
    d["memory_clock_khz"] = i.memory_clock_khz;
    d["peak_bandwidth_gbps"] = i.peak_bandwidth_gbps;
    d["driver_version"] = i.driver_version;
    return d;
}

// qjit.tune: qjit-tune's driver (models/tune_driver.hpp) on `arguments`, without the GIL. `write`
// gets the standard output a piece at a time (with the GIL); the warnings are returned. A failure
// raises the qjit.errors class of its status, "WHAT failed: MESSAGE".
std::string tune(const std::vector<std::string>& arguments, nb::callable write) {
    std::string warnings;
    std::optional<nb::python_error> raised;  // by `write`: raised again once the run is over
    qjit_models::TuneIo io;
    io.out = [&](const std::string& text) {
        nb::gil_scoped_acquire locked;
        if (raised) return;
        try {
            write(text);
        } catch (nb::python_error& e) {
            raised.emplace(std::move(e));
        }
    };
    io.err = [&](const std::string& text) { warnings += text; };
    qjit_models::TuneOutcome outcome;
    {
        nb::gil_scoped_release unlocked;
        outcome = qjit_models::run_tune(arguments, io);
    }
    if (raised) throw std::move(*raised);
    if (outcome.status != QJIT_OK) throw Failure(outcome.status, outcome.what + " failed: " + outcome.message);
    return warnings;
}

}  // namespace
}  // namespace qjit_python

NB_MODULE(_native, m) {
    using namespace qjit_python;
    m.doc() = "The qjit C API as Python objects (use the qjit package, not this module)";
    register_error_translator();
    // A layer still referenced at exit (PyTorch does not free autograd graphs at shutdown, and a
    // QuantLinear's graph holds its layer) is not a leak worth a warning on every such exit.
    nb::set_leak_warnings(false);
    m.def("version", [] { return std::string(qjit_version()); });
    m.def("default_quant_config", &default_quant_config);
    m.def("cuda_device_count", &cuda_device_count);
    m.def("cuda_device_info", &cuda_device_info, "ordinal"_a);
    m.def("tune", &tune, "arguments"_a, "write"_a);
    m.def("moe_forward", &moe_forward, "context"_a, "experts"_a, "x"_a);

    nb::class_<Context>(m, "Context")
        .def(nb::init<int, int, int, std::optional<std::string>, double, int, int64_t, std::optional<std::string>, int,
                      int, int>(),
             "threads"_a, "max_isa"_a, "activations"_a, "tuning_db"_a.none(), "tuning_budget_ms"_a, "tuning_mode"_a,
             "tuning_batch"_a, "tiling"_a.none(), "cuda_device"_a, "cuda_dtype"_a, "verbosity"_a)
        .def("describe", &Context::describe)
        .def("num_threads", &Context::num_threads)
        .def("tuning_db_list", &Context::tuning_db_list)
        .def("tuning_db_export", &Context::tuning_db_export, "path"_a)
        .def("tuning_db_import", &Context::tuning_db_import, "path"_a);

    nb::class_<Calibration>(m, "Calibration")
        .def(nb::init<int64_t>(), "k"_a)
        .def("add", &Calibration::add, "x"_a)
        .def("set_hessian", &Calibration::set_hessian, "hessian"_a)
        .def("set_diagonal", &Calibration::set_diagonal, "diagonal"_a)
        .def_prop_ro("rows", &Calibration::rows)
        .def_prop_ro("k", &Calibration::k);

    nb::class_<Linear>(m, "Linear")
        .def_static("quantize", &Linear::quantize, "context"_a, "weights"_a, "layout"_a, "config"_a,
                    "calibration"_a.none())
        .def_static("from_gptq", &Linear::from_gptq, "context"_a, "k"_a, "n"_a, "bits"_a, "group_size"_a, "qweight"_a,
                    "qzeros"_a, "scales"_a, "g_idx"_a.none(), "checkpoint_format"_a, "u"_a.none(), "v"_a.none(),
                    "low_rank_bits"_a)
        .def_static("from_gguf", &Linear::from_gguf, "context"_a, "ggml_type"_a, "data"_a, "k"_a, "n"_a)
        .def_static("load", &Linear::load, "context"_a, "path"_a)
        .def("save", &Linear::save, "path"_a)
        .def("forward", &Linear::forward, "x"_a, "out"_a.none())
        .def("forward_pointers", &Linear::forward_pointers, "x"_a, "y"_a, "m"_a)
        .def("forward_cuda", &Linear::forward_cuda, "x"_a, "y"_a, "m"_a, "dtype"_a, "stream"_a)
        .def("dequantize", &Linear::dequantize)
        .def("info", &Linear::info)
        .def("tuning", &Linear::tuning)
        .def("tuning_cuda", &Linear::tuning_cuda, "m"_a, "dtype"_a)
        .def("describe", &Linear::describe)
        .def("benchmark", &Linear::benchmark, "m"_a, "repeats"_a, "cold"_a)
        .def("benchmark_cuda", &Linear::benchmark_cuda, "m"_a, "dtype"_a, "repeats"_a)
        .def_prop_ro("k", &Linear::k)
        .def_prop_ro("n", &Linear::n);

    nb::class_<Checkpoint>(m, "Checkpoint")
        .def(nb::init<const Context&, const std::string&>(), "context"_a, "directory"_a)
        .def("close", &Checkpoint::close)
        .def("layers", &Checkpoint::layers)
        .def("create", &Checkpoint::create, "name"_a);

    register_flash(m);
    register_tp_mlp(m);
    register_model(m);
}
