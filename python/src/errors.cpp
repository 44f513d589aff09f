#include "errors.hpp"

#include <nanobind/nanobind.h>

namespace nb = nanobind;

namespace qjit_python {

void check(qjit_status status) {
    if (status != QJIT_OK) throw Failure(status, qjit_last_error());
}

void invalid_argument(const std::string& message) { throw Failure(QJIT_ERROR_INVALID_ARGUMENT, message); }

namespace {

// The Python class raised for a status: qjit.errors.class_for_status(status).
void raise_as_python(const Failure& failure) {
    nb::object errors = nb::module_::import_("qjit.errors");
    nb::object type = errors.attr("class_for_status")(int(failure.status()));
    nb::object error = type(failure.what(), int(failure.status()));
    PyErr_SetObject(type.ptr(), error.ptr());
}

}  // namespace

void register_error_translator() {
    nb::register_exception_translator([](const std::exception_ptr& thrown, void*) {
        try {
            std::rethrow_exception(thrown);
        } catch (const Failure& failure) {
            raise_as_python(failure);
        }
    });
}

}  // namespace qjit_python
