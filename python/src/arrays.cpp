#include "arrays.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>

#include "errors.hpp"
#include "torch_tensors.hpp"

namespace qjit_python {

namespace {

namespace dl = nb::dlpack;

struct ElementType {
    Element element;
    dl::dtype dtype;
    const char* name;
};

constexpr ElementType kElements[] = {
    {Element::f32, {uint8_t(dl::dtype_code::Float), 32, 1}, "float32"},
    {Element::f16, {uint8_t(dl::dtype_code::Float), 16, 1}, "float16"},
    {Element::bf16, {uint8_t(dl::dtype_code::Bfloat), 16, 1}, "bfloat16"},
    {Element::i32, {uint8_t(dl::dtype_code::Int), 32, 1}, "int32"},
    {Element::i64, {uint8_t(dl::dtype_code::Int), 64, 1}, "int64"},
    {Element::u8, {uint8_t(dl::dtype_code::UInt), 8, 1}, "uint8"},
};

std::string dtype_name(dl::dtype dtype) {
    for (const ElementType& e : kElements)
        if (e.dtype == dtype) return e.name;
    const char* kind = dtype.code == uint8_t(dl::dtype_code::Int)     ? "int"
                       : dtype.code == uint8_t(dl::dtype_code::UInt)  ? "uint"
                       : dtype.code == uint8_t(dl::dtype_code::Float) ? "float"
                       : dtype.code == uint8_t(dl::dtype_code::Bool)  ? "bool"
                                                                      : "other";
    return std::string(kind) + std::to_string(dtype.bits);
}

const char* element_name(Element element) {
    for (const ElementType& e : kElements)
        if (e.element == element) return e.name;
    return "?";
}

bool is_c_contiguous(const nb::ndarray<nb::ro>& array) {
    int64_t expected = 1;
    for (size_t d = array.ndim(); d-- > 0;) {
        if (array.shape(d) != 1 && array.stride(d) != expected) return false;
        expected *= int64_t(array.shape(d));
    }
    return true;
}

// Copies a strided array into C order, element by element (`itemsize` bytes each).
void copy_to_c_order(const nb::ndarray<nb::ro>& array, size_t itemsize, std::byte* out) {
    const size_t ndim = array.ndim();
    const auto* base = static_cast<const std::byte*>(array.data());
    std::vector<size_t> index(ndim, 0);
    const size_t total = array.size();
    for (size_t done = 0; done < total; ++done) {
        int64_t offset = 0;
        for (size_t d = 0; d < ndim; ++d) offset += int64_t(index[d]) * array.stride(d);
        std::memcpy(out + done * itemsize, base + offset * int64_t(itemsize), itemsize);
        for (size_t d = ndim; d-- > 0;) {  // odometer step over the last dimension first
            if (++index[d] < array.shape(d)) break;
            index[d] = 0;
        }
    }
}

std::string allowed_names(std::initializer_list<Element> allowed) {
    std::string names;
    for (Element element : allowed) names += (names.empty() ? "" : " or ") + std::string(element_name(element));
    return names;
}

nb::ndarray<nb::ro> as_ndarray(nb::handle obj, const char* name) {
    nb::ndarray<nb::ro> array;
    if (!nb::try_cast(obj, array, /*convert=*/false))
        invalid_argument(std::string(name) + ": expected an array (numpy array or PyTorch tensor), got " +
                         nb::type_name(obj.type()).c_str());
    if (array.device_type() != nb::device::cpu::value)
        invalid_argument(std::string(name) + ": the array is not in CPU memory (device type " +
                         std::to_string(array.device_type()) + "); qjit layers run on CPU arrays");
    return array;
}

}  // namespace

int64_t ArrayView::size() const { return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<>()); }

int64_t ArrayView::rows() const {
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
    return rows;
}

ArrayView cpu_array(nb::handle obj, const char* name, std::initializer_list<Element> allowed, int ndim) {
    ArrayView view;
    view.framework = is_torch_tensor(obj) ? Framework::pytorch : Framework::numpy;
    const bool takes_f32 = std::find(allowed.begin(), allowed.end(), Element::f32) != allowed.end();
    float* tensor_data = nullptr;
    if (view.framework == Framework::pytorch && takes_f32 && plain_f32_tensor(obj, &tensor_data, &view.shape) &&
        (ndim >= 0 ? int(view.shape.size()) == ndim : !view.shape.empty())) {
        view.data = tensor_data;  // the caller's reference keeps the tensor alive
        return view;
    }
    view.shape.clear();
    view.source = as_ndarray(obj, name);
    const nb::ndarray<nb::ro>& array = view.source;
    bool found = false;
    for (Element element : allowed)
        for (const ElementType& e : kElements)
            if (e.element == element && e.dtype == array.dtype()) view.element = element, found = true;
    if (!found)
        invalid_argument(std::string(name) + ": dtype " + dtype_name(array.dtype()) + ", expected " +
                         allowed_names(allowed));
    if (ndim >= 0 ? int(array.ndim()) != ndim : array.ndim() == 0)
        invalid_argument(std::string(name) + ": " + std::to_string(array.ndim()) + " dimensions, expected " +
                         (ndim >= 0 ? std::to_string(ndim) : std::string("at least 1")));
    for (size_t d = 0; d < array.ndim(); ++d) view.shape.push_back(int64_t(array.shape(d)));
    if (is_c_contiguous(array)) {
        view.data = array.data();
    } else {
        view.copy.resize(array.nbytes());
        copy_to_c_order(array, array.itemsize(), view.copy.data());
        view.data = view.copy.data();
    }
    return view;
}

float* writable_f32(nb::handle obj, const char* name, const std::vector<int64_t>& shape) {
    float* tensor_data = nullptr;
    std::vector<int64_t> tensor_shape;
    if (is_torch_tensor(obj) && plain_f32_tensor(obj, &tensor_data, &tensor_shape) && tensor_shape == shape)
        return tensor_data;
    nb::ndarray<> array;
    if (!nb::try_cast(obj, array, /*convert=*/false))
        invalid_argument(std::string(name) +
                         ": expected a writable float32 array (numpy array or PyTorch tensor), got " +
                         nb::type_name(obj.type()).c_str());
    std::vector<int64_t> actual;
    for (size_t d = 0; d < array.ndim(); ++d) actual.push_back(int64_t(array.shape(d)));
    if (array.device_type() != nb::device::cpu::value || array.dtype() != nb::dtype<float>())
        invalid_argument(std::string(name) + ": expected a float32 CPU array, got " + dtype_name(array.dtype()));
    if (actual != shape)
        invalid_argument(std::string(name) + ": shape " + shape_string(actual) + ", expected " + shape_string(shape));
    if (!is_c_contiguous(nb::ndarray<nb::ro>(array)))
        invalid_argument(std::string(name) + ": the array is not C-contiguous; qjit writes results in row-major order");
    return static_cast<float*>(array.data());
}

NewArray new_f32_array(const std::vector<int64_t>& shape, Framework framework) {
    int64_t size = 1;
    for (int64_t extent : shape) size *= extent;
    float* data = new float[size_t(std::max<int64_t>(size, 1))];  // not zeroed: the caller writes every element
    nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
    std::vector<size_t> dims(shape.begin(), shape.end());
    nb::object array = nb::ndarray<nb::numpy, float>(data, dims.size(), dims.data(), owner).cast();
    if (framework == Framework::pytorch) array = torch_from_numpy(array);  // faster than torch's DLPack import
    return {data, std::move(array)};
}

void expect_shape(const ArrayView& array, const char* name, const std::vector<int64_t>& expected, const char* what) {
    if (array.shape != expected)
        invalid_argument(std::string(name) + ": shape " + shape_string(array.shape) + ", expected " +
                         shape_string(expected) + " (" + what + ")");
}

std::string shape_string(const std::vector<int64_t>& shape) {
    std::string text = "(";
    for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace qjit_python
