#include "torch_tensors.hpp"

#include <nanobind/stl/vector.h>

#include <cstring>

namespace qjit_python {

namespace {

// What the fast path needs of the torch module, looked up once (torch is imported by then: the
// caller passed a tensor). Never freed: it lives until the interpreter exits.
struct Torch {
    nb::object float32, from_numpy;
};

const Torch& torch() {
    static const Torch* torch = [] {
        nb::module_ module = nb::module_::import_("torch");
        return new Torch{module.attr("float32"), module.attr("from_numpy")};
    }();
    return *torch;
}

}  // namespace

bool is_torch_tensor(nb::handle obj) {
    const nb::str module = nb::borrow<nb::str>(nb::handle(obj.type()).attr("__module__"));
    return std::strncmp(module.c_str(), "torch", 5) == 0 && nb::hasattr(obj, "data_ptr");
}

bool plain_f32_tensor(nb::handle obj, float** data, std::vector<int64_t>* shape) {
    if (!obj.attr("dtype").is(torch().float32) || !nb::cast<bool>(obj.attr("is_cpu")) ||
        !nb::cast<bool>(obj.attr("is_contiguous")()))
        return false;
    *shape = nb::cast<std::vector<int64_t>>(obj.attr("shape"));
    *data = reinterpret_cast<float*>(nb::cast<uintptr_t>(obj.attr("data_ptr")()));
    return true;
}

nb::object torch_from_numpy(nb::handle array) { return torch().from_numpy(array); }

}  // namespace qjit_python
