// The inner kernel of causal attention: up to kMaxAttentionRows queries that share one key/value
// head, walked over the cache once in blocks of positions with an online softmax. One kernel per
// instruction-set family (portable SSE2, AVX2 with FMA, AVX-512 with FMA) and row count, picked
// under the context's ISA cap by runtime/ops/causal_attention.cpp.
#pragma once

#include <cstddef>

#include "qjit/qjit.h"

namespace qjit::ops {

inline constexpr int kMaxAttentionRows = 4;
// Positions the key cache's rows are a multiple of: every kernel reads keys in blocks of up to it.
inline constexpr int kKeyBlock = 32;
inline constexpr int kMaxHeadSize = 256;

// One kernel call: queries q[r] (head_size values, unscaled) at positions pos[r] over the cache
// positions 0 .. max(pos) of one key/value head, in the cache's blocks (qjit_kv_cache): keys and
// values point at the head's first block, the next block block_stride floats further. Rows past
// `count` are not read or written.
struct AttentionTask {
    const float* q[kMaxAttentionRows] = {};
    float* out[kMaxAttentionRows] = {};
    int pos[kMaxAttentionRows] = {};
    int count = 0;
    const float* keys = nullptr;    // [head_size][kKeyBlock] per block
    const float* values = nullptr;  // [kKeyBlock][head_size] per block
    size_t block_stride = 0;
    int head_size = 0;
    float scale = 1.0f;
};

struct AttentionKernel {
    const char* name = nullptr;  // "attention_<isa>_r<rows>", e.g. attention_avx2_r4
    qjit_isa isa = QJIT_ISA_PORTABLE;
    int rows = 0;  // queries per call
    void (*run)(const AttentionTask&) = nullptr;
};

// The kernel of `rows` (1 .. kMaxAttentionRows) queries for the best family at or below `isa`.
AttentionKernel attention_kernel(qjit_isa isa, int rows);

}  // namespace qjit::ops
