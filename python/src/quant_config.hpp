// qjit_quant_config as the Python package passes it: a dict of the struct's fields.
#pragma once

#include <nanobind/nanobind.h>

#include "qjit/qjit.h"

namespace qjit_python {

// The config a dict of every qjit_quant_config field describes (qjit/linear.py builds it).
qjit_quant_config quant_config(const nanobind::dict& fields);

// The C API's defaults as such a dict.
nanobind::dict default_quant_config();

}  // namespace qjit_python
