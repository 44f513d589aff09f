// qjit._native's tensor-parallel MLP shards (include/qjit/qjit_tp.h). The collectives come from a
// Python object (mpi4py, torch.distributed or threads wrapped by qjit/tp.py): the C forward calls
// back into it with the GIL taken, and an exception it raises is raised again once the forward
// has returned (the C side sees a failed collective and fills y with NaN).
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "arrays.hpp"
#include "bindings.hpp"
#include "context.hpp"
#include "qjit/qjit_tp.h"
#include "quant_config.hpp"

namespace qjit_python {

using namespace nb::literals;
namespace {

// A float buffer of the C forward as a numpy array that borrows it for one callback (a reference:
// what the callback writes reaches the C buffer).
nb::object borrowed_floats(float* data, int64_t count) {
    const size_t shape[1] = {size_t(count)};
    return nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<1>>(data, 1, shape, nb::handle()), nb::rv_policy::reference);
}

// The qjit_communicator of a Python object with rank, world_size, all_reduce_sum(buffer) (in place)
// and all_gather(send, receive); None: world size 1, where no collective runs.
class PythonCommunicator {
public:
    explicit PythonCommunicator(nb::handle comm) : comm_(nb::borrow(comm)) {
        c_.rank = comm.is_none() ? 0 : nb::cast<int>(comm.attr("rank"));
        c_.world_size = comm.is_none() ? 1 : nb::cast<int>(comm.attr("world_size"));
        c_.user = this;
        c_.all_reduce_sum_f32 = [](void* user, float* buffer, int64_t count) {
            return static_cast<PythonCommunicator*>(user)->run("all_reduce_sum", [&](nb::object& c) {
                c.attr("all_reduce_sum")(borrowed_floats(buffer, count));
            });
        };
        c_.all_gather_f32 = [](void* user, const float* send, float* receive, int64_t count) {
            return static_cast<PythonCommunicator*>(user)->run("all_gather", [&](nb::object& c) {
                c.attr("all_gather")(borrowed_floats(const_cast<float*>(send), count),
                                     borrowed_floats(receive, count * nb::cast<int64_t>(c.attr("world_size"))));
            });
        };
        c_.error_string = [](void* user, int) { return static_cast<PythonCommunicator*>(user)->message_.c_str(); };
    }

    const qjit_communicator* get() const { return &c_; }
    // Raises what a callback raised, if anything.
    void raise_if_failed() {
        if (raised_) throw std::move(*raised_);
    }

private:
    template <typename Call>
    int run(const char* what, Call&& call) {
        nb::gil_scoped_acquire locked;
        if (comm_.is_none()) {
            message_ = std::string(what) + " called without a communicator";
            return 1;
        }
        try {
            call(comm_);
            return 0;
        } catch (nb::python_error& e) {
            message_ = std::string(what) + " raised " + e.what();
            raised_.emplace(std::move(e));
            return 1;
        }
    }

    nb::object comm_;
    qjit_communicator c_{};
    std::string message_;
    std::optional<nb::python_error> raised_;
};

class TpMlp {
public:
    TpMlp(SharedContext context, qjit_tp_mlp* mlp) : context_(std::move(context)), mlp_(mlp) {
        check(qjit_tp_mlp_get_info(mlp_.get(), &info_));
    }

    // Rank `rank`'s shards of fp32 weights in nn.Linear layout: up and gate (n1 x k1), down (n2 x n1).
    static TpMlp quantize(const Context& context, int kind, nb::handle up, nb::handle gate, nb::handle down,
                          const nb::dict& config, int rank, int world_size, int algorithm) {
        const ArrayView up_view = cpu_array(up, "up", {Element::f32}, 2);
        const ArrayView down_view = cpu_array(down, "down", {Element::f32}, 2);
        const int64_t n1 = up_view.shape[0], k1 = up_view.shape[1], n2 = down_view.shape[0];
        if (down_view.shape[1] != n1)
            invalid_argument("down: shape " + shape_string(down_view.shape) + "; expected (n2, n1) with n1 = " +
                             std::to_string(n1) + " (up's rows)");
        const bool swiglu = kind == QJIT_MLP_SWIGLU;
        if (gate.is_none() == swiglu)
            invalid_argument(swiglu ? "gate is None; a SwiGLU MLP needs it (n1 x k1)" : "gate given; a GELU MLP has none");
        std::optional<ArrayView> gate_view;
        if (swiglu) {
            gate_view = cpu_array(gate, "gate", {Element::f32}, 2);
            expect_shape(*gate_view, "gate", up_view.shape, "up's: n1, k1");
        }
        const qjit_quant_config c = quant_config(config);
        qjit_tp_mlp* mlp = nullptr;
        call_unlocked([&] {
            return qjit_tp_mlp_create_from_f32(context.get(), &c, qjit_mlp_kind(kind), k1, n1, n2, up_view.as<float>(),
                                               gate_view ? gate_view->as<float>() : nullptr, down_view.as<float>(),
                                               rank, world_size, qjit_tp_algorithm(algorithm), &mlp);
        });
        return TpMlp(context.shared(), mlp);
    }

    static TpMlp load(const Context& context, const std::string& path) {
        qjit_tp_mlp* mlp = nullptr;
        call_unlocked([&] { return qjit_tp_mlp_load(context.get(), path.c_str(), &mlp); });
        return TpMlp(context.shared(), mlp);
    }

    void save(const std::string& path) const {
        call_unlocked([&] { return qjit_tp_mlp_save(mlp_.get(), path.c_str()); });
    }

    // y (..., n2) = the MLP of x (..., k1), summed over the ranks through `comm`.
    nb::object forward(nb::handle x, nb::handle comm) {
        const ArrayView rows = cpu_array(x, "x", {Element::f32});
        if (rows.last() != info_.k1)
            invalid_argument("x: shape " + shape_string(rows.shape) + "; the last dimension must be k1 = " +
                             std::to_string(info_.k1));
        std::vector<int64_t> shape = rows.shape;
        shape.back() = info_.n2;
        NewArray y = new_f32_array(shape, rows.framework);
        if (rows.rows() == 0) return y.array;
        PythonCommunicator communicator(comm);
        qjit_status status;
        {
            nb::gil_scoped_release unlocked;
            status = qjit_tp_mlp_forward(mlp_.get(), communicator.get(), rows.as<float>(), rows.rows(), y.data, nullptr);
        }
        communicator.raise_if_failed();
        check(status);
        return y.array;
    }

    nb::dict info() const {
        nb::dict d;
        d["kind"] = int(info_.kind);
        d["algorithm"] = int(info_.algorithm);
        d["rank"] = info_.rank;
        d["world_size"] = info_.world_size;
        d["k1"] = info_.k1;
        d["n1"] = info_.n1;
        d["n2"] = info_.n2;
        d["shard_n1"] = info_.shard_n1;
        d["act_order"] = bool(info_.act_order);
        d["weight_bytes"] = info_.weight_bytes;
        return d;
    }

    nb::dict traffic(int64_t m) const {
        qjit_tp_traffic t;
        check(qjit_tp_mlp_traffic(mlp_.get(), m, &t));
        nb::dict d;
        d["all_gathers"] = t.all_gathers;
        d["all_reduces"] = t.all_reduces;
        d["all_gather_bytes"] = t.all_gather_bytes;
        d["all_reduce_bytes"] = t.all_reduce_bytes;
        d["bytes_sent"] = t.bytes_sent;
        return d;
    }

private:
    SharedContext context_;  // declared first: destroyed after the shards
    Owned<qjit_tp_mlp, qjit_tp_mlp_destroy> mlp_;
    qjit_tp_mlp_info info_{};
};

}  // namespace

void register_tp_mlp(nb::module_& m) {
    nb::class_<TpMlp>(m, "TpMlp")
        .def_static("quantize", &TpMlp::quantize, "context"_a, "kind"_a, "up"_a, "gate"_a.none(), "down"_a, "config"_a,
                    "rank"_a, "world_size"_a, "algorithm"_a)
        .def_static("load", &TpMlp::load, "context"_a, "path"_a)
        .def("save", &TpMlp::save, "path"_a)
        .def("forward", &TpMlp::forward, "x"_a, "comm"_a.none())
        .def("info", &TpMlp::info)
        .def("traffic", &TpMlp::traffic, "m"_a);
}

}  // namespace qjit_python
