// Causal multi-head attention over a key/value cache of floats, halves or int8 codes on a
// context's threads, with the kernels of the context's attention plan for the shape
// (runtime/ops/attention_plan.hpp), and the cache's store.
#pragma once

#include "qjit/qjit_ops.h"
#include "runtime/ops/attention_plan.hpp"

namespace qjit::ops {

// As qjit_kv_element_bytes and qjit_kv_cache_bytes (qjit/qjit_ops.h).
size_t kv_element_bytes(qjit_kv_type type);
size_t kv_cache_bytes(const qjit_attention_shape& shape, int64_t capacity, qjit_kv_type type);

// Throw qjit::Error naming what in `shape`, or a cache `type` that is none, attention cannot run.
void check_shape(const qjit_attention_shape& shape);
void check_kv_type(qjit_kv_type type);

// As qjit_kv_cache_store and qjit_attention_causal(_window) (qjit/qjit_ops.h; window 0: every
// earlier position); throw qjit::Error naming a bad argument.
void store_keys_and_values(const qjit_attention_shape& shape, const qjit_kv_cache& cache, const float* k,
                           const float* v, int pos0, int count);
void causal_attention(qjit_context& context, const qjit_attention_shape& shape, const qjit_kv_cache& cache,
                      const float* q, int pos0, int count, float* out, int window = 0);
// The same with a given plan (its family at or below the context's cap; tuning and tests).
void causal_attention(qjit_context& context, const AttentionPlan& plan, const qjit_attention_shape& shape,
                      const qjit_kv_cache& cache, const float* q, int pos0, int count, float* out, int window = 0);

}  // namespace qjit::ops
