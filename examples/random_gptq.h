/* Random GPTQ tensors, packed as AutoGPTQ and GPTQModel store them (qjit_gptq_tensors in
 * qjit/qjit.h, the v2 zero-point convention), from a seed: the same seed gives the same tensors
 * on every process. Header-only, C99. */
#ifndef QJIT_EXAMPLES_RANDOM_GPTQ_H
#define QJIT_EXAMPLES_RANDOM_GPTQ_H

#include <qjit/qjit_tp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: a small generator whose stream depends only on the seed. */
static inline uint64_t random_next(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint32_t random_below(uint64_t* state, uint32_t bound) { return (uint32_t)(random_next(state) % bound); }

/* Uniform in [-1, 1). */
static inline float random_signed_unit(uint64_t* state) {
    return (float)((double)(random_next(state) >> 40) / (double)(1ull << 23) - 1.0);
}

/* Writes `value` (bits wide) as element `index` of a little-endian bit stream whose words lie
 * `word_stride` apart in `words`: element i occupies bits [bits * i, bits * (i + 1)), crossing
 * into the next word where 3 bits do not divide 32. */
static inline void random_gptq_put_bits(int32_t* words, int64_t word_stride, int bits, int64_t index, uint32_t value) {
    const int64_t first_bit = (int64_t)bits * index;
    const int64_t word = first_bit / 32;
    const int shift = (int)(first_bit % 32);
    uint32_t* low = (uint32_t*)&words[word * word_stride];
    *low |= value << shift;
    if (shift + bits > 32) {
        uint32_t* high = (uint32_t*)&words[(word + 1) * word_stride];
        *high |= value >> (32 - shift);
    }
}

/* One layer's tensors, K inputs and N outputs; `tensors` points into the buffers. */
typedef struct random_gptq_layer {
    int32_t* qweight; /* [ceil(K * bits / 32)][N] */
    int32_t* qzeros;  /* [G][ceil(N * bits / 32)] */
    void* scales;     /* [G][N]: fp16 bits or floats */
    int32_t* g_idx;   /* [K], or NULL without act-order */
    qjit_gptq_tensors tensors;
} random_gptq_layer;

/* A scale in [2^-6, 2^-4): small enough that outputs stay near 1 for inputs in [-1, 1), exactly
 * representable in fp16 (it is drawn as fp16 bits: exponent 9 or 10, any mantissa). */
static inline uint16_t random_scale_f16_bits(uint64_t* state) {
    return (uint16_t)(((9u + random_below(state, 2)) << 10) | random_below(state, 1024));
}

static inline float f16_bits_to_float(uint16_t bits) { /* normal numbers only, which random_scale_f16_bits makes */
    const uint32_t f32 = ((uint32_t)(bits & 0x8000u) << 16) | ((((bits >> 10) & 0x1fu) + 112u) << 23) |
                         ((uint32_t)(bits & 0x3ffu) << 13);
    float value;
    memcpy(&value, &f32, sizeof(value));
    return value;
}

/* Random codes, zero points (0 .. 2^bits - 1) and scales (F16 or F32) for a layer; with act_order,
 * g_idx[k] = perm[k] / group_size for a random permutation perm, so the rows of each group are
 * scattered but every group holds group_size rows (the last K mod group_size). group_size is
 * rows per group or QJIT_GROUP_PER_COLUMN. Returns 0, or -1 when out of memory. */
static inline int random_gptq_layer_init(random_gptq_layer* layer, int64_t k, int64_t n, int bits, int group_size,
                                  int act_order, qjit_dtype scale_dtype, uint64_t* state) {
    const int64_t rows_per_group = group_size == QJIT_GROUP_PER_COLUMN ? k : group_size;
    const int64_t groups = (k + rows_per_group - 1) / rows_per_group;
    const int64_t weight_words = (k * bits + 31) / 32, zero_words = (n * bits + 31) / 32;
    const uint32_t levels = 1u << bits;
    const size_t scale_size = scale_dtype == QJIT_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    int64_t row, column, group;

    memset(layer, 0, sizeof(*layer));
    layer->qweight = (int32_t*)calloc((size_t)(weight_words * n), sizeof(int32_t));
    layer->qzeros = (int32_t*)calloc((size_t)(groups * zero_words), sizeof(int32_t));
    layer->scales = malloc((size_t)(groups * n) * scale_size);
    layer->g_idx = act_order ? (int32_t*)malloc((size_t)k * sizeof(int32_t)) : NULL;
    if (!layer->qweight || !layer->qzeros || !layer->scales || (act_order && !layer->g_idx)) return -1;

    for (row = 0; row < k; ++row)
        for (column = 0; column < n; ++column) /* column `column`'s stream, words N apart */
            random_gptq_put_bits(layer->qweight + column, n, bits, row, random_below(state, levels));
    for (group = 0; group < groups; ++group)
        for (column = 0; column < n; ++column) /* group `group`'s row of zero points, packed along N */
            random_gptq_put_bits(layer->qzeros + group * zero_words, 1, bits, column, random_below(state, levels));
    for (group = 0; group < groups * n; ++group) {
        const uint16_t half = random_scale_f16_bits(state);
        if (scale_dtype == QJIT_DTYPE_F32)
            ((float*)layer->scales)[group] = f16_bits_to_float(half);
        else
            ((uint16_t*)layer->scales)[group] = half;
    }
    if (act_order) { /* a Fisher-Yates shuffle of 0 .. K-1, each mapped to its group */
        for (row = 0; row < k; ++row) layer->g_idx[row] = (int32_t)row;
        for (row = k - 1; row > 0; --row) {
            const int64_t other = random_below(state, (uint32_t)(row + 1));
            const int32_t swap = layer->g_idx[row];
            layer->g_idx[row] = layer->g_idx[other];
            layer->g_idx[other] = swap;
        }
        for (row = 0; row < k; ++row) layer->g_idx[row] = (int32_t)(layer->g_idx[row] / rows_per_group);
    }

    layer->tensors.bits = bits;
    layer->tensors.group_size = group_size;
    layer->tensors.qweight = layer->qweight;
    layer->tensors.qzeros = layer->qzeros;
    layer->tensors.scales = layer->scales;
    layer->tensors.scale_dtype = scale_dtype;
    layer->tensors.g_idx = layer->g_idx;
    layer->tensors.checkpoint_format = QJIT_GPTQ_V2;
    return 0;
}

static inline void random_gptq_layer_free(random_gptq_layer* layer) {
    free(layer->qweight);
    free(layer->qzeros);
    free(layer->scales);
    free(layer->g_idx);
    memset(layer, 0, sizeof(*layer));
}

/* An MLP's three layers (the gate left empty for GELU), all with the same bits, group size,
 * act-order and scale type. */
typedef struct random_gptq_mlp {
    random_gptq_layer up, gate, down;
    qjit_mlp_gptq mlp; /* points into the layers */
} random_gptq_mlp;

static inline void random_gptq_mlp_free(random_gptq_mlp* mlp) {
    random_gptq_layer_free(&mlp->up);
    random_gptq_layer_free(&mlp->gate);
    random_gptq_layer_free(&mlp->down);
}

/* Returns 0, or -1 when out of memory. */
static inline int random_gptq_mlp_init(random_gptq_mlp* out, qjit_mlp_kind kind, int64_t k1, int64_t n1, int64_t n2,
                                int bits, int group_size, int act_order, qjit_dtype scale_dtype, uint64_t seed) {
    uint64_t state = seed;
    memset(out, 0, sizeof(*out));
    if (random_gptq_layer_init(&out->up, k1, n1, bits, group_size, act_order, scale_dtype, &state) != 0 ||
        (kind == QJIT_MLP_SWIGLU &&
         random_gptq_layer_init(&out->gate, k1, n1, bits, group_size, act_order, scale_dtype, &state) != 0) ||
        random_gptq_layer_init(&out->down, n1, n2, bits, group_size, act_order, scale_dtype, &state) != 0) {
        random_gptq_mlp_free(out);
        return -1;
    }
    out->mlp.kind = kind;
    out->mlp.k1 = k1;
    out->mlp.n1 = n1;
    out->mlp.n2 = n2;
    out->mlp.up = out->up.tensors;
    out->mlp.gate = out->gate.tensors;
    out->mlp.down = out->down.tensors;
    return 0;
}

#endif /* QJIT_EXAMPLES_RANDOM_GPTQ_H */
