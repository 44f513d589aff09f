// The parts of qjit._native defined in their own files, each registered by NB_MODULE (module.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace qjit_python {

void register_flash(nanobind::module_& m);    // flash.cpp: neuron files and flash FFNs
void register_tp_mlp(nanobind::module_& m);   // tp_mlp.cpp: tensor-parallel MLP shards
void register_model(nanobind::module_& m);    // model.cpp: Llama-architecture GGUF models

}  // namespace qjit_python
