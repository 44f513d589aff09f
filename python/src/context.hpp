// The context every binding's objects are made in, and how the bindings call the C API: without
// the GIL, with failures raised as qjit.errors.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <optional>
#include <string>

#include "errors.hpp"
#include "qjit/qjit.h"

namespace qjit_python {

namespace nb = nanobind;

// Runs a C call without the GIL (other Python threads run meanwhile) and checks its status.
template <typename Call>
void call_unlocked(Call&& call) {
    qjit_status status;
    {
        nb::gil_scoped_release unlocked;
        status = call();
    }
    check(status);
}

// A C context, destroyed with its last owner.
using SharedContext = std::shared_ptr<qjit_context>;

// A C handle owned alone, released by its destroy function (qjit_linear_destroy, ...).
template <auto destroy>
struct Destroyer {
    template <typename T>
    void operator()(T* handle) const {
        destroy(handle);
    }
};
template <typename T, auto destroy>
using Owned = std::unique_ptr<T, Destroyer<destroy>>;

class Context {
public:
    Context(int threads, int max_isa, int activations, std::optional<std::string> tuning_db, double tuning_budget_ms,
            int tuning_mode, int64_t tuning_batch, std::optional<std::string> tiling, int cuda_device, int cuda_dtype,
            int verbosity) {
        qjit_context_options options;
        qjit_context_options_init(&options);
        options.num_threads = threads;
        options.max_isa = qjit_isa(max_isa);
        options.activations = qjit_activations(activations);
        options.tuning_db_path = tuning_db ? tuning_db->c_str() : nullptr;
        options.tuning_budget_ms = tuning_budget_ms;
        options.tuning_mode = qjit_tuning_mode(tuning_mode);
        options.tuning_batch = tuning_batch;
        options.tiling = tiling ? tiling->c_str() : nullptr;
        options.cuda_device = cuda_device;
        options.cuda_dtype = qjit_dtype(cuda_dtype);
        options.verbosity = verbosity;
        qjit_context* context = nullptr;
        call_unlocked([&] { return qjit_context_create(&options, &context); });
        shared_ = SharedContext(context, qjit_context_destroy);
    }

    std::string describe() const {
        const char* text = nullptr;
        check(qjit_context_describe(get(), &text));
        return text;
    }
    int num_threads() const {
        int threads = 0;
        check(qjit_context_num_threads(get(), &threads));
        return threads;
    }
    std::string tuning_db_list() {
        const char* text = nullptr;
        check(qjit_tuning_db_list(get(), &text));
        return text;
    }
    void tuning_db_export(const std::string& path) { check(qjit_tuning_db_export(get(), path.c_str())); }
    void tuning_db_import(const std::string& path) { check(qjit_tuning_db_import(get(), path.c_str())); }

    qjit_context* get() const { return shared_.get(); }
    const SharedContext& shared() const { return shared_; }

private:
    SharedContext shared_;
};

}  // namespace qjit_python
