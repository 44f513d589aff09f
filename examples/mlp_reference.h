/* The unsharded MLP of qjit/qjit_tp.h as the reference for its tensor-parallel shards: the whole
 * up, gate and down layers (qjit_linear_create_from_gptq) and the activation on the host.
 * Header-only, C99; link libm. */
#ifndef QJIT_EXAMPLES_MLP_REFERENCE_H
#define QJIT_EXAMPLES_MLP_REFERENCE_H

#include <math.h>
#include <qjit/qjit_tp.h>
#include <stdlib.h>
#include <string.h>

typedef struct mlp_reference {
    qjit_mlp_kind kind;
    int64_t n1, n2;
    qjit_linear* up;
    qjit_linear* gate; /* NULL for GELU */
    qjit_linear* down;
} mlp_reference;

static inline void mlp_reference_destroy(mlp_reference* reference) {
    qjit_linear_destroy(reference->up);
    qjit_linear_destroy(reference->gate);
    qjit_linear_destroy(reference->down);
    memset(reference, 0, sizeof(*reference));
}

static inline qjit_status mlp_reference_create(qjit_context* context, const qjit_mlp_gptq* mlp,
                                               mlp_reference* out) {
    qjit_status status;
    memset(out, 0, sizeof(*out));
    out->kind = mlp->kind;
    out->n1 = mlp->n1;
    out->n2 = mlp->n2;
    status = qjit_linear_create_from_gptq(context, mlp->k1, mlp->n1, &mlp->up, &out->up);
    if (status == QJIT_OK && mlp->kind == QJIT_MLP_SWIGLU)
        status = qjit_linear_create_from_gptq(context, mlp->k1, mlp->n1, &mlp->gate, &out->gate);
    if (status == QJIT_OK) status = qjit_linear_create_from_gptq(context, mlp->n1, mlp->n2, &mlp->down, &out->down);
    if (status != QJIT_OK) mlp_reference_destroy(out);
    return status;
}

static inline float mlp_reference_silu(float v) { return v / (1.0f + expf(-v)); }

/* gelu's tanh approximation, as qjit_tp.h's QJIT_MLP_GELU. */
static inline float mlp_reference_gelu(float v) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    return 0.5f * v * (1.0f + tanhf(sqrt_2_over_pi * (v + 0.044715f * v * v * v)));
}

/* y (m x N2) = the MLP of x (m x K1). */
static inline qjit_status mlp_reference_forward(const mlp_reference* reference, const float* x, int64_t m,
                                                float* y) {
    const int64_t count = m * reference->n1;
    float* up = (float*)malloc(sizeof(float) * (size_t)count);
    float* gate = reference->gate ? (float*)malloc(sizeof(float) * (size_t)count) : NULL;
    qjit_status status = QJIT_ERROR_OUT_OF_MEMORY;
    int64_t i;
    if (up == NULL || (reference->gate && gate == NULL)) goto done;
    status = qjit_linear_forward(reference->up, x, m, up);
    if (status == QJIT_OK && gate) status = qjit_linear_forward(reference->gate, x, m, gate);
    if (status != QJIT_OK) goto done;
    for (i = 0; i < count; ++i) /* the intermediate activations, in place of up's outputs */
        up[i] = reference->kind == QJIT_MLP_SWIGLU ? mlp_reference_silu(gate[i]) * up[i] : mlp_reference_gelu(up[i]);
    status = qjit_linear_forward(reference->down, up, m, y);
done:
    free(up);
    free(gate);
    return status;
}

/* The largest |a[i] - b[i]| (NaN when either holds a NaN) and the largest |b[i]|. */
static inline void mlp_reference_compare(const float* a, const float* b, int64_t count, double* max_abs_diff,
                                         double* max_abs_b) {
    int64_t i;
    *max_abs_diff = 0.0;
    *max_abs_b = 0.0;
    for (i = 0; i < count; ++i) {
        const double diff = fabs((double)a[i] - (double)b[i]);
        if (diff != diff) *max_abs_diff = diff;
        else if (*max_abs_diff == *max_abs_diff && diff > *max_abs_diff) *max_abs_diff = diff;
        if (fabs((double)b[i]) > *max_abs_b) *max_abs_b = fabs((double)b[i]);
    }
}

#endif /* QJIT_EXAMPLES_MLP_REFERENCE_H */
