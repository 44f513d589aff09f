// The C API of the forward's ops (qjit/qjit_ops.h): arguments checked here, the work on the
// context's pool with the kernels of its instruction-set family.
#include "qjit/qjit_ops.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "base/activation_arrays.hpp"
#include "base/error.hpp"
#include "runtime/context.hpp"
#include "runtime/ops/argmax.hpp"
#include "runtime/ops/causal_attention.hpp"
#include "runtime/ops/op_loops.hpp"
#include "runtime/ops/row_kernels.hpp"

using qjit::guarded;
using qjit::require;

size_t qjit_kv_element_bytes(qjit_kv_type type) { return qjit::ops::kv_element_bytes(type); }

size_t qjit_kv_cache_bytes(const qjit_attention_shape* shape, int64_t capacity, qjit_kv_type type) {
    return shape == nullptr ? 0 : qjit::ops::kv_cache_bytes(*shape, capacity, type);
}

qjit_status qjit_kv_cache_store(const qjit_attention_shape* shape, const qjit_kv_cache* cache, const float* k,
                                const float* v, int32_t pos0, int32_t count) {
    return guarded([&] {
        require(shape != nullptr, "shape is NULL");
        require(cache != nullptr, "cache is NULL");
        qjit::ops::store_keys_and_values(*shape, *cache, k, v, pos0, count);
    });
}

qjit_status qjit_attention_causal(qjit_context* context, const qjit_attention_shape* shape, const qjit_kv_cache* cache,
                                  const float* q, int32_t pos0, int32_t count, float* out) {
    return qjit_attention_causal_window(context, shape, cache, q, pos0, count, 0, out);
}

qjit_status qjit_attention_causal_window(qjit_context* context, const qjit_attention_shape* shape,
                                         const qjit_kv_cache* cache, const float* q, int32_t pos0, int32_t count,
                                         int32_t window, float* out) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(shape != nullptr, "shape is NULL");
        require(cache != nullptr, "cache is NULL");
        qjit::ops::causal_attention(*context, *shape, *cache, q, pos0, count, out, window);
    });
}

qjit_status qjit_attention_tune(qjit_context* context, const qjit_attention_shape* shape, qjit_kv_type type,
                               const char** kernel) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(shape != nullptr, "shape is NULL");
        qjit::ops::check_kv_type(type);
        qjit::ops::check_shape(*shape);
        const qjit::ops::AttentionPlan plan = qjit::ops::attention_plan(*context, *shape, type);
        if (kernel) *kernel = qjit::ops::plan_kernel_name(plan);
    });
}

qjit_status qjit_rms_norm(qjit_context* context, const float* x, const float* weight, int64_t rows, int64_t size,
                          float eps, float* out) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(rows >= 0 && size >= 1, "rms_norm: ", rows, " rows of ", size, " values");
        require(eps >= 0.0f && std::isfinite(eps), "rms_norm: eps ", eps, " is not a finite value >= 0");
        require(rows == 0 || (x && weight && out), "rms_norm: x, weight or out is NULL");
        const auto kernel = qjit::ops::kRmsNormRow[qjit::simd_family(context->isa)];
        qjit::ops::parallel_ranges(*context, rows, std::max<int64_t>(1, qjit::ops::kOpGrainWork / size),
                                   [&](int64_t begin, int64_t end) {
                                       for (int64_t r = begin; r < end; ++r)
                                           kernel(x + r * size, weight, size, eps, out + r * size);
                                   });
    });
}

qjit_status qjit_rope(qjit_context* context, float* x, int64_t rows, int64_t row_size, int32_t head_size,
                      const float* rotations, qjit_rope_pairs pairs) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(head_size >= 2 && head_size % 2 == 0, "rope: head_size ", head_size, " is not an even number >= 2");
        require(rows >= 0 && row_size >= 0 && row_size % head_size == 0, "rope: ", rows, " rows of ", row_size,
                " values, not whole heads of ", head_size);
        require(pairs == QJIT_ROPE_ADJACENT || pairs == QJIT_ROPE_HALVES, "rope: pairs is ", int(pairs),
                "; expected QJIT_ROPE_ADJACENT (0) or QJIT_ROPE_HALVES (1)");
        require(rows == 0 || (x && rotations), "rope: x or rotations is NULL");
        const auto kernel = qjit::ops::kRopeRow[qjit::simd_family(context->isa)];
        qjit::ops::parallel_ranges(*context, rows, std::max<int64_t>(1, qjit::ops::kOpGrainWork / std::max<int64_t>(1, row_size)),
                                   [&](int64_t begin, int64_t end) {
                                       for (int64_t r = begin; r < end; ++r)
                                           kernel(x + r * row_size, row_size, head_size, rotations + r * head_size,
                                                  pairs);
                                   });
    });
}

namespace {

// up = act(gate) * up over `count` values on the context's pool, by `in_place` (one of
// base/activation_arrays.hpp's); `name` is the op's in the messages.
template <typename InPlace>
qjit_status gated_activation(qjit_context* context, const char* name, float* up, const float* gate, int64_t count,
                             InPlace in_place) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(count >= 0, name, ": count is ", count);
        require(count == 0 || (up && gate), name, ": up or gate is NULL");
        qjit::ops::parallel_ranges(*context, count, qjit::ops::kOpGrainWork / 16, [&](int64_t begin, int64_t end) {
            in_place(context->isa, up + begin, gate + begin, end - begin);
        });
    });
}

}  // namespace

qjit_status qjit_swiglu(qjit_context* context, float* up, const float* gate, int64_t count) {
    return gated_activation(context, "swiglu", up, gate, count, qjit::swiglu_in_place);
}

qjit_status qjit_geglu(qjit_context* context, float* up, const float* gate, int64_t count) {
    return gated_activation(context, "geglu", up, gate, count, qjit::geglu_in_place);
}

qjit_status qjit_argmax(qjit_context* context, const float* values, int64_t rows, int64_t size, int64_t* indices) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(rows >= 0 && size >= 1, "argmax: ", rows, " rows of ", size, " values");
        require(rows == 0 || (values && indices), "argmax: values or indices is NULL");
        qjit::ops::argmax_rows(*context, values, rows, size, indices);
    });
}

qjit_status qjit_op_kernel_name(const qjit_context* context, qjit_op op, const char** name) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(name != nullptr, "name is NULL");
        const int family = int(qjit::simd_family(context->isa));
        static constexpr const char* names[][3] = {{"attention_portable", "attention_avx2", "attention_avx512"},
                                                   {"rms_norm_portable", "rms_norm_avx2", "rms_norm_avx512"},
                                                   {"rope_portable", "rope_avx2", "rope_avx512"},
                                                   {"swiglu_portable", "swiglu_avx2", "swiglu_avx512"},
                                                   {"argmax_portable", "argmax_avx2", "argmax_avx512"}};
        require(int(op) >= 0 && int(op) < int(std::size(names)), "op is ", int(op), "; expected a qjit_op");
        *name = names[int(op)][family];
    });
}
