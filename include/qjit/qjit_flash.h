/*
 * qjit flash FFNs: a model's FFN layers kept in a file and read neuron by neuron, for models
 * larger than the memory they are given ("LLM in a flash", Alizadeh et al.).
 *
 * The FFN:   ReLU    y = sum_i max(0, x . up_i + b_i) * down_i                (OPT)
 *            SwiGLU  y = sum_i silu(x . gate_i) * (x . up_i) * down_i         (Llama)
 * over the neurons i that are active for the token: the caller's list, the layer's predictor's
 * (a low-rank product and a threshold fitted for a recall target), or every neuron.
 *
 * A neuron file (qjit_flash_writer_*, or `qjit-flash-convert` from a GGUF file or a GPTQ
 * checkpoint) stores each neuron's vectors together, quantized in a qjit format, in records
 * aligned for direct reads. A flash FFN keeps, per layer, a cache of resident neurons sized from a
 * DRAM budget: pinned neurons and, with a window of k tokens, those active in the last k tokens.
 * Active neurons not resident are read with O_DIRECT (io_uring, or a pool of pread calls) in reads
 * planned from the device's measured read-throughput curve, checked (CRC-32 per record) and added
 * to the cache. Details: docs/flash.md.
 *
 * Threads: a flash FFN is used by one thread at a time; its computation runs on the context's pool.
 */
#ifndef QJIT_QJIT_FLASH_H
#define QJIT_QJIT_FLASH_H

#include "qjit/qjit.h"
#include "qjit/qjit_ffn.h" /* qjit_ffn_activation: a neuron file takes QJIT_FFN_RELU or QJIT_FFN_SWIGLU */

#ifdef __cplusplus
extern "C" {
#endif

/* How a neuron's gate activation is scored against its layer's threshold (calibrated sparsity). */
typedef enum qjit_flash_sparsity_score {
    QJIT_SPARSITY_GATE = 0,          /* |silu(x . gate_i)| (CATS) */
    QJIT_SPARSITY_GATE_WEIGHTED = 1, /* |silu(x . gate_i)| * rms(x . up_i) * |down_i| over the calibration */
    QJIT_SPARSITY_SCORE_MIN_ENUM = -0x7fffffff - 1,
    QJIT_SPARSITY_SCORE_MAX_ENUM = 0x7fffffff
} qjit_flash_sparsity_score;

/* ---- writing a neuron file ---- */
typedef struct qjit_flash_file_options {
    int64_t layers, d_model, d_ff;
    qjit_ffn_activation activation;
    int has_bias;           /* ReLU only: a bias per neuron on the up projection */
    int f16;                /* nonzero: vectors stored as fp16, `quant` ignored */
    qjit_quant_config quant;/* RTN per neuron vector: bits, group_size, symmetric, scale_dtype,
                               float_offsets (method must be RTN) */
    int bundled;            /* nonzero (the default): one record per neuron; 0: one per neuron and part */
    int64_t alignment;      /* record alignment in bytes, a power of two >= 512 (4096) */
    double sparsity;        /* SwiGLU, training-free sparsity: 0 (none, the default) or the share in
                               (0, 1) of (token, neuron) pairs each layer's threshold zeroes on its
                               calibration rows; layers are then added with
                               qjit_flash_writer_add_layer_calibrated, and a bundled file keeps the
                               gates in records of their own (they stay resident when it is served) */
    int sparsity_score;     /* a qjit_flash_sparsity_score (QJIT_SPARSITY_GATE_WEIGHTED by default) */
} qjit_flash_file_options;

QJIT_API void qjit_flash_file_options_init(qjit_flash_file_options* options); /* 4-bit g128, bundled */

typedef struct qjit_flash_writer qjit_flash_writer;
/* Writes to PATH.tmp-<pid>, renamed over `path` by qjit_flash_writer_finish: an existing file is
 * replaced only by a complete one. */
QJIT_API qjit_status qjit_flash_writer_create(const char* path, const qjit_flash_file_options* options,
                                              qjit_flash_writer** writer);
/* The next layer: up, gate: [d_model][d_ff] row-major (gate NULL for ReLU); down: [d_ff][d_model];
 * bias: [d_ff] or NULL. */
QJIT_API qjit_status qjit_flash_writer_add_layer(qjit_flash_writer* writer, const float* up, const float* gate,
                                                 const float* down, const float* bias);
/* The same for a file with sparsity: x holds n >= 1 calibration rows (n x d_model) of this layer's
 * FFN input (what the model feeds it on calibration tokens), on which the layer's threshold is set
 * to zero `sparsity` of the (row, neuron) pairs. */
QJIT_API qjit_status qjit_flash_writer_add_layer_calibrated(qjit_flash_writer* writer, const float* up,
                                                            const float* gate, const float* down, const float* x,
                                                            int64_t n);
QJIT_API qjit_status qjit_flash_writer_finish(qjit_flash_writer* writer);
QJIT_API void qjit_flash_writer_destroy(qjit_flash_writer* writer); /* without finish: nothing is written */

/* ---- running FFNs from a neuron file ---- */
typedef struct qjit_flash_options {
    int64_t dram_budget_bytes; /* for the resident neurons of all layers (0: none resident) */
    int window;                /* tokens a neuron stays resident after it was last active (4);
                                  0: only pinned neurons stay */
    int direct_io;             /* nonzero (the default): O_DIRECT, reads reach the device */
    int coalesce_reads;        /* nonzero (the default): neighbouring records read together */
    int tune_reads;            /* nonzero: measure the device's read curve when the tuning database
                                  has none for it (seconds, once per device) and plan reads from it
                                  (0 by default: the stored curve when there is one, else defaults) */
    int use_sparsity;          /* nonzero (the default): a file written with sparsity keeps every gate
                                  resident (read when the FFN is created, out of dram_budget_bytes) and
                                  runs, per token and layer, only the neurons above the thresholds,
                                  reading up and down alone; 0: served as a file without */
    int read_ahead;            /* nonzero: once a layer's reads are in, the next layer's neurons are
                                  predicted from this layer's input (thresholds, predictor, else all)
                                  and those not resident read while this layer computes and the caller
                                  runs attention; the next forward reads only what they missed (0 by
                                  default) */
    int activations;           /* how the products of quantized gate and up vectors read x:
                                  QJIT_ACTIVATIONS_INT8 quantizes each row to int8 per group for the
                                  generated kernels, where the CPU and the vector format have one
                                  (docs/flash.md); QJIT_ACTIVATIONS_F32 keeps x in fp32 (exact, slower);
                                  QJIT_ACTIVATIONS_AUTO (the default) chooses as for dense layers:
                                  int8 for vectors of 6 bits or fewer, else fp32 */
} qjit_flash_options;

QJIT_API void qjit_flash_options_init(qjit_flash_options* options);

typedef struct qjit_flash_ffn qjit_flash_ffn;
QJIT_API qjit_status qjit_flash_ffn_create(qjit_context* context, const char* path, const qjit_flash_options* options,
                                           qjit_flash_ffn** ffn);
QJIT_API void qjit_flash_ffn_destroy(qjit_flash_ffn* ffn);

typedef struct qjit_flash_ffn_info {
    int64_t layers, d_model, d_ff;
    qjit_ffn_activation activation;
    int bundled;
    int64_t record_bytes;      /* bytes read for one neuron (bundled) or one neuron's part */
    int64_t resident_neurons;  /* a layer's resident cache capacity */
    int64_t dram_bytes;        /* held now: resident gates, caches, read staging, predictors */
    int gate_apart;            /* the gates in records of their own (a file written with sparsity) */
    double sparsity;           /* the file's calibrated target when in use (gates resident), else 0 */
    int64_t resident_gate_bytes; /* the resident gates' share of dram_bytes */
    int64_t weight_bytes;      /* every layer's vectors (and biases) */
    int64_t all_resident_bytes; /* the dram_budget_bytes that keeps every neuron resident (gates included) */
    char format[64];           /* the vectors' format name ("q4g128_asym", "f16") */
    char storage[256];         /* "file PATH (io_uring, O_DIRECT, block 4096)" */
    char kernels[512];         /* the generated sparse kernels, their tilings chosen through the
                                  context's tuning ("q4g32_asym_sparse_i8_avx2_v2pf1, ..."); "" where
                                  hand-written ones run (fp16 vectors, 16-row groups, no AVX2) */
} qjit_flash_ffn_info;
QJIT_API qjit_status qjit_flash_ffn_get_info(const qjit_flash_ffn* ffn, qjit_flash_ffn_info* info);

/* Keeps neurons of a layer resident for good (the most often active ones), reading them now. */
QJIT_API qjit_status qjit_flash_ffn_pin(qjit_flash_ffn* ffn, int64_t layer, const int32_t* neurons, int64_t count);

/* Fits the layer's predictor on n calibration rows x (n x d_model): the truly active neurons are
 * those with x . up + b > 0 (ReLU) or |silu(x . gate) * (x . up)| > magnitude_threshold (SwiGLU);
 * the threshold on the low-rank score is set so that target_recall of them are predicted. Reads the
 * layer once. */
QJIT_API qjit_status qjit_flash_ffn_fit_predictor(qjit_flash_ffn* ffn, int64_t layer, const float* x, int64_t n,
                                                  double target_recall, float magnitude_threshold);

/* y (m x d_model) = the layer's FFN on x (m x d_model). active: `count` distinct neuron ids taking
 * part for every row; NULL: with calibrated sparsity in use, those above the layer's threshold (in a
 * row where a neuron falls below, it adds nothing), else the predictor's (union over the rows) when
 * the layer has one, else all. */
QJIT_API qjit_status qjit_flash_ffn_forward(qjit_flash_ffn* ffn, int64_t layer, const float* x, int64_t m, float* y,
                                            const int32_t* active, int64_t count);

typedef struct qjit_flash_counters {
    int64_t tokens;          /* forward calls */
    int64_t active_neurons;  /* summed over calls */
    int64_t cache_hits;      /* active neurons found resident */
    int64_t neurons_loaded;  /* active neurons read from storage */
    int64_t predicted;       /* neurons the predictors named */
    int64_t bytes_read;
    int64_t reads;           /* read requests issued */
    double io_seconds;       /* the reads, start to end (they overlap the resident neurons' compute) */
    double io_wait_seconds;  /* waiting for reads: the part of io_seconds that compute did not hide */
    double cache_seconds;    /* cache bookkeeping, record checks, filling slots */
    double compute_seconds;  /* the sparse FFN */
    double predict_seconds;  /* the predictors */
    int64_t read_ahead_neurons; /* neurons read ahead of their layer (their bytes are in bytes_read) */
    int64_t read_ahead_used;    /* ... of which their layer needed (active, not resident) */
} qjit_flash_counters;
QJIT_API qjit_status qjit_flash_ffn_get_counters(const qjit_flash_ffn* ffn, qjit_flash_counters* counters);
QJIT_API qjit_status qjit_flash_ffn_reset_counters(qjit_flash_ffn* ffn);

/* The read throughput (1e9 bytes a second) that the device's measured curve, which plans the reads,
 * gives reads of chunk_bytes at their best queue depth: what the counters' bytes_read / io_seconds
 * compares with. 0 when no curve is known (see tune_reads). */
QJIT_API qjit_status qjit_flash_ffn_curve_gbps(const qjit_flash_ffn* ffn, int64_t chunk_bytes, double* gbps);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* QJIT_QJIT_FLASH_H */
