// The inner kernel of causal attention: up to kMaxAttentionRows queries that share one key/value
// head, walked over the cache once in blocks of positions with an online softmax. One kernel per
// instruction-set family (portable SSE2, AVX2 with FMA, AVX-512 with FMA) and row count; the
// family and the most rows a task takes are an attention plan (runtime/ops/attention_plan.hpp).
#pragma once

#include <cstddef>

#include "base/simd_family.hpp"
#include "qjit/qjit_ops.h"

namespace qjit::ops {

inline constexpr int kMaxAttentionRows = 8;
// Positions of one cache block: every kernel reads keys in position blocks within one.
inline constexpr int kKeyBlock = QJIT_ATTENTION_KEY_BLOCK;
inline constexpr int kMaxHeadSize = QJIT_ATTENTION_MAX_HEAD_SIZE;

// One kernel call: queries q[r] (head_size values, unscaled) at positions pos[r] over the cache
// positions 0 .. max(pos) of one key/value head (with a window w > 0, query r sees positions
// pos[r] - w + 1 .. pos[r] only), in the cache's blocks (qjit_kv_cache): keys and
// values point at the head's first block, the next block block_bytes further; elements are
// floats, halves or int8 codes (each head's block then followed by its positions' steps) as the
// kernel was picked for. Rows past `count` are not read or written.
struct AttentionTask {
    const float* q[kMaxAttentionRows] = {};
    float* out[kMaxAttentionRows] = {};
    int pos[kMaxAttentionRows] = {};
    int count = 0;
    const void* keys = nullptr;    // [head_size][kKeyBlock] per block
    const void* values = nullptr;  // [kKeyBlock][head_size] per block
    size_t block_bytes = 0;
    int head_size = 0;
    float scale = 1.0f;
    int window = 0;  // 0: every position up to the query's
};

using AttentionKernel = void (*)(const AttentionTask&);

// The most rows a task of `family` takes: 8 where 32 vector registers hold 8 rows' accumulators
// (AVX-512), else 4.
int max_attention_rows(SimdFamily family);

// A kernel of `family` over a cache of `type` (one causal_attention checked) for a task of `rows`
// queries (1 .. max_attention_rows(family)): 5 to 7 rows run in the 8-row kernel.
AttentionKernel attention_kernel(SimdFamily family, qjit_kv_type type, int rows);

}  // namespace qjit::ops
