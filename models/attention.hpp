// Causal multi-head attention over a KV cache, grouped-query heads included, on the qjit context's
// threads. Each task takes up to four queries that share a key/value head (the heads of one
// position, then the next positions) and walks the cache once for all of them in blocks of
// kKeyBlock positions with an online softmax: each key and value read serves every query of the
// task, and no score row of the whole context is ever stored.
#pragma once

#include <cstddef>

#include "qjit/qjit.h"

namespace qjit_models {

// Positions of one key block; the key cache's row length must be a multiple of it.
inline constexpr int kKeyBlock = 32;
// The largest head the blocked kernel takes.
inline constexpr int kMaxHeadSize = 256;

struct AttentionHeads {
    int head_size = 0;
    int n_heads = 0;     // query heads
    int n_kv_heads = 0;  // key/value heads; n_heads is a multiple of it
};

// keys: [n_kv_heads * head_size][key_row], transposed so that a feature runs across positions;
// key_row a multiple of kKeyBlock (the positions past the filled ones are read and masked, so they
// must hold finite values). values: [positions][n_kv_heads * head_size].
struct KeyValueCache {
    const float* keys = nullptr;
    size_t key_row = 0;
    const float* values = nullptr;
};

// out[t][h * head_size + i] = attention of query q[t][h * head_size ..] (position pos0 + t) over
// the cached positions 0 .. pos0 + t, for t < count. Each query's result depends on that query and
// the cache only (not on count, pos0 or the threads), so a prompt and token-by-token steps agree
// bit for bit. `threads` may be null (the calling thread alone).
void causal_attention(qjit_context* threads, const AttentionHeads& heads, const KeyValueCache& cache, const float* q,
                      int pos0, int count, float* out);

}  // namespace qjit_models
