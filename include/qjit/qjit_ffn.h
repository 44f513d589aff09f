/*
 * qjit FFNs: a transformer's feed-forward block as one handle over qjit layers.
 *
 * The FFN:   SwiGLU  y = (silu(x W_gate) * (x W_up)) W_down     (Llama)
 *            GELU    y = gelu(x W_up) W_down                      (GPT-2; gelu's tanh approximation)
 *            ReLU    y = max(0, x W_up) W_down                    (OPT)
 * with x: m x K, W_up and W_gate: K x H, W_down: H x N. A handle is one strategy over that
 * description:
 *   dense      one FFN's three layers: the gate and up products run as one call over their shared
 *              input (one parallel dispatch on the x86 JIT), then the activation, then W_down;
 *   experts    a mixture-of-experts FFN: each expert is a gate/up/down triple; the tokens routed to
 *              the experts run each of the three products as one grouped call across the experts
 *              (as qjit_moe_forward), and each token's expert outputs are weighted and summed;
 *   flash      one layer of a flash FFN (qjit/qjit_flash.h), served from its neuron file.
 * Tensor-parallel MLPs (qjit/qjit_tp.h) are the same composition over each rank's shards plus the
 * collectives.
 *
 * A handle borrows its layers (or its flash FFN): they must outlive it. Threads: as qjit.h; a
 * flash layer's handle as its flash FFN (one thread at a time).
 */
#ifndef QJIT_QJIT_FFN_H
#define QJIT_QJIT_FFN_H

#include "qjit/qjit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qjit_ffn_activation {
    QJIT_FFN_RELU = 0,   /* parts: up (a flash FFN: with an optional bias), down */
    QJIT_FFN_SWIGLU = 1, /* parts: gate, up, down */
    QJIT_FFN_GELU = 2,   /* parts: up, down (not in neuron files) */
    QJIT_FFN_ACTIVATION_MIN_ENUM = -0x7fffffff - 1,
    QJIT_FFN_ACTIVATION_MAX_ENUM = 0x7fffffff
} qjit_ffn_activation;

typedef struct qjit_ffn qjit_ffn;
struct qjit_flash_ffn; /* qjit/qjit_flash.h */

/* One FFN's layers: gate (K x H, SwiGLU only; NULL otherwise), up (K x H), down (H x N). */
typedef struct qjit_ffn_parts {
    qjit_linear* gate;
    qjit_linear* up;
    qjit_linear* down;
} qjit_ffn_parts;

/* The tokens routed to one expert of an experts FFN: their rows of x and gate weights. */
typedef struct qjit_ffn_route {
    const int32_t* rows;  /* [count] token indices into x, 0 .. m - 1, each at most once per expert */
    const float* weights; /* [count] the gate weight of each row; NULL: 1 */
    int64_t count;        /* rows routed to the expert; 0: skipped (rows may then be NULL) */
} qjit_ffn_route;

/* A dense FFN over layers of `context`. gate must be NULL unless activation is QJIT_FFN_SWIGLU.
 * The shapes must chain: gate and up K x H, down H x N. */
QJIT_API qjit_status qjit_ffn_create_dense(qjit_context* context, qjit_linear* gate, qjit_linear* up,
                                           qjit_linear* down, qjit_ffn_activation activation, qjit_ffn** ffn);

/* A mixture-of-experts FFN of num_experts >= 1 experts, each a dense FFN's parts (as above), all of
 * one shape and of `context`. Run with qjit_ffn_forward_routed. On the CPU the layers on generated
 * kernels with sparse outliers (QJIT_QUANT_MIXED) are refused at the forward, as qjit_moe_forward
 * refuses them. */
QJIT_API qjit_status qjit_ffn_create_experts(qjit_context* context, const qjit_ffn_parts* experts, int num_experts,
                                             qjit_ffn_activation activation, qjit_ffn** ffn);

/* Layer `layer` of a flash FFN as a handle: qjit_ffn_forward runs qjit_flash_ffn_forward with the
 * layer's own choice of active neurons. */
QJIT_API qjit_status qjit_ffn_create_flash_layer(struct qjit_flash_ffn* flash, int64_t layer, qjit_ffn** ffn);

QJIT_API qjit_status qjit_ffn_destroy(qjit_ffn* ffn); /* NULL is a no-op */

/* y (m x N) = the FFN of x (m x K), the limits of qjit_linear_forward; x and y must not overlap. A
 * dense FFN's y is what its three layers give run one after another with the activation between
 * them, bit for bit. An experts FFN needs qjit_ffn_forward_routed. */
QJIT_API qjit_status qjit_ffn_forward(qjit_ffn* ffn, const float* x, int64_t m, float* y);

/* An experts FFN: y (m x N) is overwritten with
 *     y[t] = sum over (e, i) with routes[e].rows[i] == t of  routes[e].weights[i] * FFN_e(x[t])
 * summed in expert order; a token no expert takes gets zeros, a token may go to several experts.
 * num_routes must equal the FFN's number of experts. */
QJIT_API qjit_status qjit_ffn_forward_routed(qjit_ffn* ffn, const qjit_ffn_route* routes, int num_routes,
                                             const float* x, int64_t m, float* y);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* QJIT_QJIT_FFN_H */
