// PyTorch CPU tensors read through their attributes instead of DLPack: torch's __dlpack__ costs
// about 2 us a call, twice the forward of a small layer. Only the common case, a contiguous float32
// CPU tensor, takes this path; every other tensor goes through DLPack (arrays.hpp), which also says
// what is wrong with it.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <vector>

namespace qjit_python {

namespace nb = nanobind;

bool is_torch_tensor(nb::handle obj);

// The memory and shape of a tensor (is_torch_tensor) that is float32, contiguous and on the CPU;
// false for any other tensor.
bool plain_f32_tensor(nb::handle obj, float** data, std::vector<int64_t>* shape);

// torch.from_numpy(array): a tensor sharing the array's memory.
nb::object torch_from_numpy(nb::handle array);

}  // namespace qjit_python
