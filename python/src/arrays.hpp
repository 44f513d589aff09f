// Arrays from Python (numpy arrays, PyTorch tensors, anything with __dlpack__ or the buffer protocol)
// as the C API takes them: CPU memory, C-contiguous, of a named element type. No copy when the
// input already is so; one copy when its strides are not contiguous. Wrong types, devices and
// shapes are refused by a qjit.InvalidArgumentError naming the argument.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace qjit_python {

namespace nb = nanobind;

// The element types the binding takes.
enum class Element { f32, f16, bf16, i32, i64, u8 };

// What kind of array a caller passed, so that results come back as the same kind.
enum class Framework { numpy, pytorch };

// A CPU array, contiguous, kept alive for as long as the view (or, for a PyTorch tensor read
// through its attributes, by the caller's reference to it).
struct ArrayView {
    nb::ndarray<nb::ro> source;   // holds the caller's array
    std::vector<std::byte> copy;  // its elements in C order when the source was strided
    const void* data = nullptr;
    std::vector<int64_t> shape;
    Element element = Element::f32;
    Framework framework = Framework::numpy;  // a PyTorch tensor's, or anything else's

    int64_t size() const;
    int64_t rows() const;  // the product of every dimension but the last (1 for a vector)
    int64_t last() const { return shape.empty() ? 1 : shape.back(); }
    template <typename T>
    const T* as() const {
        return static_cast<const T*>(data);
    }
};

// `obj` as a CPU array of one of `allowed`, with `ndim` dimensions (-1: at least one).
ArrayView cpu_array(nb::handle obj, const char* name, std::initializer_list<Element> allowed, int ndim = -1);

// `obj` as a writable, C-contiguous float32 CPU array of exactly `shape` (for out= arguments).
float* writable_f32(nb::handle obj, const char* name, const std::vector<int64_t>& shape);

// A new, uninitialised float32 array of `shape`, as numpy or PyTorch, and where to write its elements.
struct NewArray {
    float* data;
    nb::object array;
};
NewArray new_f32_array(const std::vector<int64_t>& shape, Framework framework);

std::string shape_string(const std::vector<int64_t>& shape);

// Refuses `array` (argument `name`) unless its shape is `expected`; `what` names the dimensions.
void expect_shape(const ArrayView& array, const char* name, const std::vector<int64_t>& expected, const char* what);

}  // namespace qjit_python
