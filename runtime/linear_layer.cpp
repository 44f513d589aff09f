#include "runtime/linear_layer.hpp"

#include <chrono>
#include <cstdio>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/portable_kernel.hpp"

namespace qjit {

namespace {

// XNNPACK-style kernel name: operation, weight format, activation type, ISA, tile.
std::string kernel_name(const QuantParams& p) {
    return concat("gemm_", format_name(p), "_f32_portable_n", PortableTiling::kPanelColumns, "m",
                  PortableTiling::kBatchRows);
}

std::string describe(const qjit_linear& layer) {
    const QuantParams& p = layer.params;
    return concat(kernel_name(p), " K=", p.k, " N=", p.n, " bits=", p.bits, " group=", p.group_size,
                  p.symmetric ? " symmetric" : " asymmetric", " act_order=", p.act_order() ? "yes" : "no",
                  " scales=", p.scale_dtype == QJIT_DTYPE_F16 ? "f16" : "f32", " layout=", PackedCodes::kLayoutName,
                  " tiling=panel", PortableTiling::kPanelColumns, "xrows", PortableTiling::kBatchRows,
                  " threads=", layer.context->num_threads);
}

// Activations reordered to the layer's storage row order, in a per-thread buffer that only
// grows, so steady-state forwards do not allocate.
const float* gather_rows(const QuantParams& p, const float* x, int64_t m) {
    thread_local std::vector<float> gathered;
    if (gathered.size() < size_t(m * p.k)) gathered.resize(size_t(m * p.k));
    for (int64_t i = 0; i < m; ++i) {
        const float* src = x + i * p.k;
        float* dst = gathered.data() + i * p.k;
        for (int64_t r = 0; r < p.k; ++r) dst[r] = src[p.row_order[size_t(r)]];
    }
    return gathered.data();
}

}  // namespace

std::unique_ptr<qjit_linear> make_linear(qjit_context* context, QuantParams params, PackedCodes codes) {
    const auto start = std::chrono::steady_clock::now();
    auto layer = std::make_unique<qjit_linear>();
    layer->context = context;
    layer->params = std::move(params);
    layer->codes = std::move(codes);
    layer->description = describe(*layer);
    if (context->verbosity > 0) {
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "qjit: linear created: %s setup_ms=%.2f\n", layer->description.c_str(), ms);
    }
    return layer;
}

std::unique_ptr<qjit_linear> make_linear(qjit_context* context, QuantizedMatrix matrix) {
    validate(matrix);
    PackedCodes codes = pack_codes(matrix.codes.data(), matrix.params.bits, matrix.params.k, matrix.params.n);
    return make_linear(context, std::move(matrix.params), std::move(codes));
}

void linear_forward(const qjit_linear& layer, const float* x, int64_t m, float* y) {
    const float* rows = layer.params.act_order() ? gather_rows(layer.params, x, m) : x;
    portable_forward(layer.params, layer.codes, rows, m, y, *layer.context->pool);
}

QuantizedMatrix unpack_linear(const qjit_linear& layer) {
    return QuantizedMatrix{layer.params, unpack_codes(layer.codes)};
}

int64_t weight_bytes(const qjit_linear& layer) {
    const QuantParams& p = layer.params;
    const int64_t metadata = p.num_groups() * p.n;
    return int64_t(layer.codes.words.size() * sizeof(uint32_t)) + metadata * int64_t(sizeof(float)) +
           (p.symmetric ? 0 : metadata * int64_t(sizeof(uint16_t)));
}

}  // namespace qjit
