// How a failed qjit C call reaches Python: as a qjit.Error subclass (qjit/errors.py) carrying the
// library's message. Every C call of the binding goes through check().
#pragma once

#include <stdexcept>
#include <string>

#include "qjit/qjit.h"

namespace qjit_python {

// A failed call or a bad argument, raised in Python as the qjit.errors class of its status.
class Failure : public std::runtime_error {
public:
    Failure(qjit_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
    qjit_status status() const { return status_; }

private:
    qjit_status status_;
};

// Throws a Failure with qjit_last_error() when status is not QJIT_OK.
void check(qjit_status status);

// A bad argument found by the binding itself, before any C call.
[[noreturn]] void invalid_argument(const std::string& message);

// Registers the translation of Failure into the qjit.errors classes.
void register_error_translator();

}  // namespace qjit_python
