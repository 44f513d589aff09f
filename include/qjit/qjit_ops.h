/*
 * qjit ops: the steps of a transformer forward between its linear layers, run on a context's
 * threads with kernels chosen under its instruction-set cap (qjit_context_options.max_isa,
 * $QJIT_MAX_ISA), like the layers' kernels.
 *
 *   attention   causal multi-head attention over a key/value cache, grouped-query heads included,
 *               optionally over a sliding window of positions; an online softmax over blocks of
 *               positions, each key and value read once for up to four queries that share a
 *               key/value head
 *   RMSNorm     out = weight * x / sqrt(mean(x^2) + eps), row by row
 *   RoPE        rotates pairs of each head's values by a position's angles
 *   SwiGLU      silu(gate) * up, element by element; GEGLU gelu(gate) * up
 *
 * Every op's result for a row depends on that row and its inputs only, not on how many rows one
 * call takes or on the threads: a prompt and the same tokens one by one agree bit for bit.
 * qjit_op_kernel_name names the kernel a context runs for an op (its ISA family in the name);
 * attention's kernels are chosen per shape and cache type by timing (qjit_attention_tune).
 * Threads: as qjit.h (a context serves several threads; one call uses its pool).
 */
#ifndef QJIT_QJIT_OPS_H
#define QJIT_QJIT_OPS_H

#include "qjit/qjit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Positions of one block of the key/value cache; a cache holds whole blocks. */
#define QJIT_ATTENTION_KEY_BLOCK 32
/* The largest head size qjit_attention_causal takes. */
#define QJIT_ATTENTION_MAX_HEAD_SIZE 256

typedef struct qjit_attention_shape {
    int32_t head_size;  /* values per head, 1 .. QJIT_ATTENTION_MAX_HEAD_SIZE */
    int32_t n_heads;    /* query heads */
    int32_t n_kv_heads; /* key/value heads; n_heads is a multiple of it */
} qjit_attention_shape;

/* How a key/value cache stores its values. fp16 halves the bytes attention reads per position
 * (decoding a long context reads the whole cache for every token) at the cost of rounding each
 * key and value to 11 significant bits (a relative error of at most 2^-11, 4.9e-4); values beyond
 * fp16's range (65504) become infinities. int8 stores each position's key (and value) of a head as
 * int8 codes c = x * 127 / amax rounded to nearest even, amax the largest magnitude of those
 * head_size values, and their step amax / 127 as a float: a quarter of fp32's bytes plus 4 bytes
 * per position and head, each key and value off by at most amax / 254 (half a step). A row of a
 * head holding a NaN or an infinity is stored as NaNs. */
typedef enum qjit_kv_type {
    QJIT_KV_F32 = 0,  /* float */
    QJIT_KV_F16 = 1,  /* IEEE binary16 (uint16_t), rounded to nearest even when stored */
    QJIT_KV_INT8 = 2, /* int8_t codes with a float step per position and key/value head */
    QJIT_KV_MIN_ENUM = -0x7fffffff - 1,
    QJIT_KV_MAX_ENUM = 0x7fffffff
} qjit_kv_type;

/* A key/value cache of `capacity` positions (a multiple of QJIT_ATTENTION_KEY_BLOCK), both arrays
 * of capacity * n_kv_heads * head_size elements of `type`, laid out in blocks of B =
 * QJIT_ATTENTION_KEY_BLOCK positions, then key/value heads, so that one head's block is one
 * contiguous run (a cache grows by appending blocks). For position s, head h, feature i, with
 * block = s / B and j = s % B:
 *   keys[((block * n_kv_heads + h) * head_size + i) * B + j]     a feature across the block's positions
 *   values[((block * n_kv_heads + h) * B + j) * head_size + i]   a position's values together
 * An int8 cache follows each head's block of codes with the block's B steps (floats, position j's
 * at j), so one head's block is head_size * B + 4 * B bytes and the elements' offsets above count
 * those bytes too: qjit_kv_cache_bytes gives an array's size for every type.
 * qjit_kv_cache_store writes rows into it. Attention reads the last block in full: its positions
 * past the stored ones must hold finite values (a zero-filled cache does). A zero-initialised
 * struct's type is QJIT_KV_F32. */
typedef struct qjit_kv_cache {
    void* keys;
    void* values;
    int64_t capacity;
    qjit_kv_type type;
} qjit_kv_cache;

/* Bytes of one element of a cache of `type` (4, 2, or 1 for int8's codes, whose steps take more:
 * see qjit_kv_cache_bytes); 0 for a type that is none of the above. */
QJIT_API size_t qjit_kv_element_bytes(qjit_kv_type type);

/* Bytes of the keys (and of the values) of a cache of `capacity` positions (a multiple of
 * QJIT_ATTENTION_KEY_BLOCK) for `shape`, steps included; 0 for a bad type, shape or capacity. */
QJIT_API size_t qjit_kv_cache_bytes(const qjit_attention_shape* shape, int64_t capacity, qjit_kv_type type);

/* Stores k and v (count rows of n_kv_heads * head_size values, positions pos0 ..) in the cache,
 * converted to its type. */
QJIT_API qjit_status qjit_kv_cache_store(const qjit_attention_shape* shape, const qjit_kv_cache* cache,
                                         const float* k, const float* v, int32_t pos0, int32_t count);

/* out[t][h * head_size + i] = softmax over positions s <= pos0 + t of
 * (q[t][h] . key[s][h / (n_heads / n_kv_heads)]) / sqrt(head_size), applied to the values, for
 * t < count. q and out: count x (n_heads * head_size); the cache holds positions 0 .. pos0+count-1. */
QJIT_API qjit_status qjit_attention_causal(qjit_context* context, const qjit_attention_shape* shape,
                                           const qjit_kv_cache* cache, const float* q, int32_t pos0,
                                           int32_t count, float* out);

/* The same over a sliding window (Gemma's local layers, llama.cpp's LLAMA_SWA_TYPE_STANDARD): the
 * query at position p attends to positions s with p - window < s <= p, itself and the window - 1
 * before it. window 0 is qjit_attention_causal. */
QJIT_API qjit_status qjit_attention_causal_window(qjit_context* context, const qjit_attention_shape* shape,
                                                  const qjit_kv_cache* cache, const float* q, int32_t pos0,
                                                  int32_t count, int32_t window, float* out);

/* Chooses how `context` runs attention for `shape` over caches of `type`, as layers choose their
 * tilings (qjit.h's tuning options): the kernels' instruction-set family, at or below the cap, and
 * the most queries of one key/value head a task takes; a tuning database record, else the model's
 * pick (the widest family, 4 queries; tuning budget 0) or a timed search over a decode step and a
 * prompt chunk at 512 positions, the cache cold as a decoding model finds it, stored in the
 * database. The context keeps the choice for every later call of that shape and type, prompts and
 * decode steps alike (so they still agree bit for bit). Calling it is optional: the first
 * attention call of a shape and type chooses otherwise, and the timing then falls inside that
 * call. kernel (may be NULL) receives the choice's name, e.g. "attention_avx2_r4" (static
 * storage). */
QJIT_API qjit_status qjit_attention_tune(qjit_context* context, const qjit_attention_shape* shape,
                                         qjit_kv_type type, const char** kernel);

/* out[r] = weight * x[r] / sqrt(mean(x[r]^2) + eps) for rows r < rows of `size` values; out may be x. */
QJIT_API qjit_status qjit_rms_norm(qjit_context* context, const float* x, const float* weight, int64_t rows,
                                   int64_t size, float eps, float* out);

typedef enum qjit_rope_pairs {
    QJIT_ROPE_ADJACENT = 0, /* pair i of a head is (2i, 2i + 1): Llama (llama.cpp's "normal") */
    QJIT_ROPE_HALVES = 1,   /* pair i is (i, i + head_size / 2): NeoX, Qwen2 */
    QJIT_ROPE_MIN_ENUM = -0x7fffffff - 1,
    QJIT_ROPE_MAX_ENUM = 0x7fffffff
} qjit_rope_pairs;

/* Rotates every head of rows r < rows of x (row_size values, a multiple of head_size) by row r's
 * angles: rotations + r * head_size holds cos, sin of pair 0, then of pair 1, ... (head_size / 2
 * pairs). Pair i becomes (v0 cos - v1 sin, v0 sin + v1 cos). */
QJIT_API qjit_status qjit_rope(qjit_context* context, float* x, int64_t rows, int64_t row_size, int32_t head_size,
                               const float* rotations, qjit_rope_pairs pairs);

/* up[i] = silu(gate[i]) * up[i] for i < count (SiLU: v / (1 + e^-v)), the SwiGLU FFN's activation;
 * the same result in every ISA family. */
QJIT_API qjit_status qjit_swiglu(qjit_context* context, float* up, const float* gate, int64_t count);

/* up[i] = gelu(gate[i]) * up[i] for i < count (GELU's tanh approximation, 0.5 v (1 + tanh(sqrt(2/pi)
 * (v + 0.044715 v^3))), computed as v / (1 + e^(-2 sqrt(2/pi) (v + 0.044715 v^3)))), Gemma's
 * GELU-gated FFN's activation; the same result in every ISA family. */
QJIT_API qjit_status qjit_geglu(qjit_context* context, float* up, const float* gate, int64_t count);

/* indices[r] = the first index of the largest value of row r (rows r < rows of `size` values at
 * values + r * size): a classifier's greedy token without a softmax. +inf is a value like any
 * other; a row of -inf alone gives 0; a NaN is refused (QJIT_ERROR_INVALID_ARGUMENT naming its row
 * and index). A long row is split among the context's threads. */
QJIT_API qjit_status qjit_argmax(qjit_context* context, const float* values, int64_t rows, int64_t size,
                                 int64_t* indices);

typedef enum qjit_op {
    QJIT_OP_ATTENTION = 0,
    QJIT_OP_RMS_NORM = 1,
    QJIT_OP_ROPE = 2,
    QJIT_OP_SWIGLU = 3, /* the FFN's activation step (qjit/qjit_ffn.h) */
    QJIT_OP_ARGMAX = 4,
    QJIT_OP_MIN_ENUM = -0x7fffffff - 1,
    QJIT_OP_MAX_ENUM = 0x7fffffff
} qjit_op;

/* The name of the kernel `context` runs for `op` (e.g. "rms_norm_avx512"): its ISA family is at or
 * below the context's cap. For attention, the family of the cap ("attention_avx512"), which a
 * context tuned with a budget may trade for another below it per shape: qjit_attention_tune names
 * that choice. Static storage. */
QJIT_API qjit_status qjit_op_kernel_name(const qjit_context* context, qjit_op op, const char** name);

#ifdef __cplusplus
}
#endif

#endif /* QJIT_QJIT_OPS_H */
