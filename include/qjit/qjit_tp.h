/*
 * qjit tensor parallelism: an MLP split Megatron-style across processes (or machines, or GPUs).
 *
 * The MLP:   SwiGLU  y = (silu(x W_gate) * (x W_up)) W_down     (Llama)
 *            GELU    y = gelu(x W_up) W_down                      (GPT-2, GPTBigCode, Granite)
 * with x: m x K1, W_up and W_gate: K1 x N1, W_down: N1 x N2. Each of `world_size` ranks holds
 * N1 / world_size columns of W_up and W_gate and the same number of rows of W_down; each computes a
 * partial y and one all-reduce sums them.
 *
 * With GPTQ act-order, W_down's rows are stored sorted by group, P2 = argsort(g_idx_down), so that
 * each rank's rows are whole groups with contiguous scales. Then rank r's rows of W_down are the
 * original rows P2[r * c .. (r + 1) * c) (c = N1 / world_size), and the intermediate activations
 * must arrive in that order:
 *   QJIT_TP_NAIVE:  rank r holds W_up's (and W_gate's) original columns r * c .. (r + 1) * c; the
 *                   ranks all-gather the intermediate activations, permute them by P2 and take
 *                   their chunk (Hoque et al., "TP-aware dequantization", Algorithm 2).
 *   QJIT_TP_AWARE:  W_up's and W_gate's columns are permuted by P2 when the shards are made, so
 *                   rank r's intermediate activations are already the rows its W_down shard needs:
 *                   no all-gather, only the all-reduce (Algorithm 3).
 * Both give the same y. The library computes; the caller's communicator (qjit_communicator, e.g.
 * the MPI adapter qjit/qjit_tp_mpi.h) moves the data. The core library links no MPI or NCCL.
 *
 * Shards split at group boundaries: N1 must be a multiple of world_size, and N1 / world_size a
 * multiple of W_down's group size (unless it has one group per column); otherwise creation fails
 * with QJIT_ERROR_INVALID_ARGUMENT naming the sizes.
 *
 * Threads: as qjit.h. A forward's collectives are the caller's: every rank must call
 * qjit_tp_mlp_forward with the same m, in the same order as its other collectives.
 */
#ifndef QJIT_QJIT_TP_H
#define QJIT_QJIT_TP_H

#include "qjit/qjit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qjit_mlp_kind {
    QJIT_MLP_SWIGLU = 0, /* y = (silu(x W_gate) * (x W_up)) W_down */
    QJIT_MLP_GELU = 1,   /* y = gelu(x W_up) W_down, gelu's tanh approximation */
    QJIT_MLP_KIND_MIN_ENUM = -0x7fffffff - 1,
    QJIT_MLP_KIND_MAX_ENUM = 0x7fffffff
} qjit_mlp_kind;

typedef enum qjit_tp_algorithm {
    QJIT_TP_NAIVE = 0, /* all-gather, permute, re-chunk, then the all-reduce */
    QJIT_TP_AWARE = 1, /* W_up/W_gate columns permuted offline: the all-reduce only */
    QJIT_TP_ALGORITHM_MIN_ENUM = -0x7fffffff - 1,
    QJIT_TP_ALGORITHM_MAX_ENUM = 0x7fffffff
} qjit_tp_algorithm;

/* The collectives a forward needs, implemented by the caller over its communication library. Each
 * returns 0 on success or an error code of that library; error_string (may be NULL) names a code.
 * Buffers are host memory for qjit_tp_mlp_forward. Every rank calls the same collectives in the
 * same order. */
typedef struct qjit_communicator {
    int rank;       /* 0 .. world_size - 1 */
    int world_size; /* >= 1 */
    void* user;     /* passed to every function */
    /* buffer[0 .. count) = the sum over ranks of their buffer[0 .. count), in place. */
    int (*all_reduce_sum_f32)(void* user, float* buffer, int64_t count);
    /* receive[r * count .. (r + 1) * count) = rank r's send[0 .. count), on every rank. */
    int (*all_gather_f32)(void* user, const float* send, float* receive, int64_t count);
    const char* (*error_string)(void* user, int code);
} qjit_communicator;

/* The collective of the device forward (qjit_tp_mlp_forward_cuda), implemented by the caller over
 * its GPU communication library (e.g. the NCCL adapter qjit/qjit_tp_nccl.h). The buffer is device
 * memory holding count values of dtype (QJIT_DTYPE_F16 or QJIT_DTYPE_BF16); the call is enqueued on
 * stream (a CUstream) after the work already there, and returns without waiting for it. */
typedef struct qjit_device_communicator {
    int rank;       /* 0 .. world_size - 1 */
    int world_size; /* >= 1 */
    void* user;     /* passed to every function */
    /* buffer[0 .. count) = the sum over ranks of their buffer[0 .. count), in place. */
    int (*all_reduce_sum)(void* user, void* buffer, int64_t count, qjit_dtype dtype, void* stream);
    const char* (*error_string)(void* user, int code);
} qjit_device_communicator;

/* An MLP's GPTQ tensors (qjit.h's qjit_gptq_tensors; gate unused for GELU). */
typedef struct qjit_mlp_gptq {
    qjit_mlp_kind kind;
    int64_t k1;  /* model width: inputs of W_up and W_gate */
    int64_t n1;  /* intermediate width: their outputs, W_down's inputs */
    int64_t n2;  /* outputs of W_down */
    qjit_gptq_tensors up;
    qjit_gptq_tensors gate;
    qjit_gptq_tensors down;
} qjit_mlp_gptq;

typedef struct qjit_tp_mlp qjit_tp_mlp;

/* Which shard layer qjit_tp_mlp_get_layer returns. */
typedef enum qjit_mlp_part {
    QJIT_MLP_UP = 0,
    QJIT_MLP_GATE = 1,
    QJIT_MLP_DOWN = 2,
    QJIT_MLP_PART_MIN_ENUM = -0x7fffffff - 1,
    QJIT_MLP_PART_MAX_ENUM = 0x7fffffff
} qjit_mlp_part;

typedef struct qjit_tp_mlp_info {
    qjit_mlp_kind kind;
    qjit_tp_algorithm algorithm;
    int rank;
    int world_size;
    int64_t k1, n1, n2;    /* the whole MLP's sizes */
    int64_t shard_n1;      /* intermediate columns this rank holds: n1 / world_size */
    int act_order;         /* nonzero: W_down's rows are stored permuted (P2 is not the identity) */
    int64_t weight_bytes;  /* the bytes this rank's forward streams */
} qjit_tp_mlp_info;

/* What one forward of m rows moves, by a ring's accounting: an all-gather of B bytes in all sends
 * (world - 1) / world * B per rank, an all-reduce of B bytes 2 (world - 1) / world * B. */
typedef struct qjit_tp_traffic {
    int all_gathers;          /* per forward: 1 naive (0 with world_size 1), 0 TP-aware */
    int all_reduces;          /* per forward: 1 (0 with world_size 1) */
    int64_t all_gather_bytes; /* m x N1 floats gathered; 0 without an all-gather */
    int64_t all_reduce_bytes; /* m x N2 floats reduced; 0 without an all-reduce */
    int64_t bytes_sent;       /* per rank, ring accounting */
} qjit_tp_traffic;

/* Where a forward's time went (microseconds, wall clock on the calling thread). */
typedef struct qjit_tp_timing {
    double total_us;
    double compute_us;     /* the shard layers and the activation */
    double permute_us;     /* naive: the all-gathered activations permuted into this rank's chunk */
    double communicate_us; /* inside the communicator's functions */
} qjit_tp_timing;

/* Rank `rank`'s shards of an MLP given as GPTQ tensors (copied; the caller's stay untouched). */
QJIT_API qjit_status qjit_tp_mlp_create_from_gptq(qjit_context* context, const qjit_mlp_gptq* mlp, int rank,
                                                  int world_size, qjit_tp_algorithm algorithm, qjit_tp_mlp** out);
/* The same from a checkpoint's layers by name (gate_name NULL for GELU), e.g. "model.layers.0.mlp.up_proj". */
QJIT_API qjit_status qjit_tp_mlp_create_from_checkpoint(qjit_checkpoint* checkpoint, qjit_mlp_kind kind,
                                                        const char* up_name, const char* gate_name,
                                                        const char* down_name, int rank, int world_size,
                                                        qjit_tp_algorithm algorithm, qjit_tp_mlp** out);
/* The same from fp32 weights in nn.Linear layout ([out][in]: up and gate N1 x K1, down N2 x N1),
 * quantized whole with `config` (methods without a calibration), then sharded. */
QJIT_API qjit_status qjit_tp_mlp_create_from_f32(qjit_context* context, const qjit_quant_config* config,
                                                 qjit_mlp_kind kind, int64_t k1, int64_t n1, int64_t n2,
                                                 const float* up, const float* gate, const float* down, int rank,
                                                 int world_size, qjit_tp_algorithm algorithm, qjit_tp_mlp** out);
QJIT_API qjit_status qjit_tp_mlp_destroy(qjit_tp_mlp* mlp); /* NULL is a no-op */

/* y (m x N2) = the MLP of x (m x K1), on every rank: x must be the same on every rank, and every
 * rank gets the all-reduced y. m >= 1. comm's rank and world size must be the shard's. A failed
 * collective returns QJIT_ERROR_COMMUNICATION naming it and its error, and y is filled with NaN: a
 * partial result is never left looking like a result. timing may be NULL. */
QJIT_API qjit_status qjit_tp_mlp_forward(qjit_tp_mlp* mlp, const qjit_communicator* comm, const float* x, int64_t m,
                                         float* y, qjit_tp_timing* timing);

/* The same MLP on the context's CUDA device: x (m x K1) and y (m x N2) are device pointers to
 * row-major matrices of dtype (QJIT_DTYPE_F16 or QJIT_DTYPE_BF16), the work is enqueued on stream (a
 * CUstream; NULL is the legacy default stream) and not waited for, and comm sums y in dtype across
 * the ranks (no collective when world_size is 1). The intermediate activations are held in dtype.
 * The shards must have been made in a context with options.cuda_device (QJIT_ERROR_NO_DEVICE
 * otherwise). QJIT_TP_AWARE shards only, or naive ones that need no all-gather (world_size 1, W_down
 * without act-order): the naive all-gather and permutation have no device path
 * (QJIT_ERROR_UNSUPPORTED). A failed collective returns QJIT_ERROR_COMMUNICATION naming it, with y
 * set to NaN. Calls on one MLP are serialised: it owns one set of device scratch buffers. */
QJIT_API qjit_status qjit_tp_mlp_forward_cuda(qjit_tp_mlp* mlp, const qjit_device_communicator* comm, const void* x,
                                              int64_t m, qjit_dtype dtype, void* y, void* stream);

QJIT_API qjit_status qjit_tp_mlp_get_info(const qjit_tp_mlp* mlp, qjit_tp_mlp_info* info);
QJIT_API qjit_status qjit_tp_mlp_traffic(const qjit_tp_mlp* mlp, int64_t m, qjit_tp_traffic* traffic);
/* A shard layer, owned by the MLP (QJIT_ERROR_INVALID_ARGUMENT for the gate of a GELU MLP). The up
 * and gate shards of QJIT_TP_AWARE have permuted output columns; qjit_linear_get_column_order
 * says which original column each output is. */
QJIT_API qjit_status qjit_tp_mlp_get_layer(qjit_tp_mlp* mlp, qjit_mlp_part part, qjit_linear** layer);

/* Saves this rank's shards (one file: the three layers, P2 and the sharding; checksummed, replaced
 * atomically) and loads them back on any context. */
QJIT_API qjit_status qjit_tp_mlp_save(const qjit_tp_mlp* mlp, const char* path);
QJIT_API qjit_status qjit_tp_mlp_load(qjit_context* context, const char* path, qjit_tp_mlp** out);

/* A layer's output columns as original column indices: order[j] is the original column of output j
 * (count = N); the identity for a layer without permuted columns. */
QJIT_API qjit_status qjit_linear_get_column_order(const qjit_linear* layer, int32_t* order);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* QJIT_QJIT_TP_H */
