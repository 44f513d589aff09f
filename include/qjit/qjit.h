/*
 * qjit: run-time generated kernels for weight-only quantized linear layers.
 *
 * The C API (C99). Every function returns a qjit_status; on failure,
 * qjit_last_error() returns a message (thread-local) that names the bad
 * argument. Handles are opaque. A context must outlive the layers made with it.
 *
 * A linear layer computes   y[m][n] = sum_k x[m][k] * W[k][n]
 * with fp32 activations x (m x K, row-major) and outputs y (m x N, row-major).
 * W (K x N) is stored quantized along K in groups of `group_size` rows:
 *     W[k][n] = scale[g][n] * (q[k][n] - zero[g][n]),   g = group of row k.
 *
 * Limits, checked before anything is allocated: 1 <= K, N < 2^31 and K x N <= 2^36 weights per
 * layer; a forward takes 1 <= m < 2^31 rows and m x max(K, N) <= 2^40 activations.
 *
 * Threads. Every call may run on several threads at once, on one context, except that a
 * handle's destroy (or close) must not overlap any other call on it or on what was made with it:
 * creating layers (from fp32, GPTQ tensors, a file or a checkpoint), forwards and benchmarks of
 * the same or different layers, the tuning database calls. Layers share their context's thread
 * pool; a call that finds it busy runs on its own thread alone, so concurrent calls are correct
 * but do not speed each other up, and timed searches running at once disturb each other's
 * measurements. CUDA forwards of one layer are serialised (see qjit_linear_forward_cuda).
 * qjit_last_error() is per thread.
 */
#ifndef QJIT_QJIT_H
#define QJIT_QJIT_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define QJIT_API
#else
#define QJIT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define QJIT_VERSION_MAJOR 0
#define QJIT_VERSION_MINOR 1
#define QJIT_VERSION_PATCH 0

typedef enum qjit_status {
    QJIT_OK = 0,
    QJIT_ERROR_INVALID_ARGUMENT = 1, /* a null pointer, an out-of-range value, mismatched sizes */
    QJIT_ERROR_UNSUPPORTED = 2,      /* valid request this build or machine cannot serve */
    QJIT_ERROR_OUT_OF_MEMORY = 3,
    QJIT_ERROR_IO = 4,               /* a file could not be opened, read or written */
    QJIT_ERROR_CORRUPT_DATA = 5,     /* a file is truncated, fails its checksum or is malformed */
    QJIT_ERROR_NO_DEVICE = 6,        /* no usable CUDA device or driver, or no NVRTC to compile for one */
    QJIT_ERROR_INTERNAL = 7,
    QJIT_ERROR_COMMUNICATION = 8,    /* a collective of the caller's communicator failed (qjit_tp.h) */
    QJIT_ERROR_STALE = 9,            /* a pack file made from another source, or for other kernels (qjit_pack_open) */
    QJIT_STATUS_MIN_ENUM = -0x7fffffff - 1, /* these two make the enum a 32-bit int; not statuses */
    QJIT_STATUS_MAX_ENUM = 0x7fffffff
} qjit_status;

/* Each enum ends in *_MIN_ENUM and *_MAX_ENUM members, INT32_MIN and INT32_MAX, so that it is a
 * 32-bit int and every int a caller passes, -1 included, is a valid value of it in C and in C++.
 * The library checks each value it is given and rejects one that names nothing with a message. */

/* Names of the instruction sets a context may use, in increasing order. */
typedef enum qjit_isa {
    QJIT_ISA_AUTO = 0,        /* the best the CPU and OS support */
    QJIT_ISA_PORTABLE = 1,    /* plain C++ only */
    QJIT_ISA_AVX2 = 2,        /* AVX2 + FMA (+ F16C) */
    QJIT_ISA_AVX2_VNNI = 3,   /* AVX2 + AVX-VNNI (VEX-encoded vpdpbusd) */
    QJIT_ISA_AVX512 = 4,      /* AVX-512 F/BW/VL */
    QJIT_ISA_AVX512_VNNI = 5, /* AVX-512 + AVX512-VNNI */
    QJIT_ISA_MIN_ENUM = -0x7fffffff - 1,
    QJIT_ISA_MAX_ENUM = 0x7fffffff
} qjit_isa;

typedef enum qjit_dtype {
    QJIT_DTYPE_F32 = 0,
    QJIT_DTYPE_F16 = 1,
    QJIT_DTYPE_BF16 = 2,
    QJIT_DTYPE_MIN_ENUM = -0x7fffffff - 1,
    QJIT_DTYPE_MAX_ENUM = 0x7fffffff
} qjit_dtype;

/* How the CPU kernels treat fp32 activations. */
typedef enum qjit_activations {
    QJIT_ACTIVATIONS_AUTO = 0, /* the default: docs/cpu-kernels.md says which path and why */
    QJIT_ACTIVATIONS_F32 = 1,  /* exact: weights unpacked to fp32 and multiplied in fp32 */
    QJIT_ACTIVATIONS_INT8 = 2, /* activations quantized to int8 per group on the fly; integer dot products */
    QJIT_ACTIVATIONS_MIN_ENUM = -0x7fffffff - 1,
    QJIT_ACTIVATIONS_MAX_ENUM = 0x7fffffff
} qjit_activations;

/* How a context's layers get their tiling (docs/tuning.md). */
typedef enum qjit_tuning_mode {
    QJIT_TUNING_DEFAULT = 0,    /* this machine's database record, else a timed search within the budget (stored) */
    QJIT_TUNING_RETUNE = 1,     /* search within the budget even when the database has a record; store the result */
    QJIT_TUNING_EXHAUSTIVE = 2, /* time every tiling the registers allow, no pruning, no budget; store the result */
    QJIT_TUNING_MODE_MIN_ENUM = -0x7fffffff - 1,
    QJIT_TUNING_MODE_MAX_ENUM = 0x7fffffff
} qjit_tuning_mode;

/* Where a layer's tiling came from. */
typedef enum qjit_tiling_source {
    QJIT_TILING_PORTABLE = 0, /* no generated kernel serves the layer: the portable path runs it */
    QJIT_TILING_FORCED = 1,   /* options.tiling */
    QJIT_TILING_DATABASE = 2, /* a database record measured on this machine: nothing was timed */
    QJIT_TILING_CONTEXT = 3,  /* chosen for an earlier layer with the same kernel key in this context */
    QJIT_TILING_SEARCHED = 4, /* timed now, then stored */
    QJIT_TILING_MODEL = 5,    /* the performance model's first pick, untimed (budget 0); not stored */
    QJIT_TILING_PACK = 6,     /* read from a pack file with the layer's panels (qjit_linear_create_from_pack) */
    QJIT_TILING_SOURCE_MIN_ENUM = -0x7fffffff - 1,
    QJIT_TILING_SOURCE_MAX_ENUM = 0x7fffffff
} qjit_tiling_source;

/* How a dense fp32 weight matrix is laid out in memory. */
typedef enum qjit_weight_layout {
    QJIT_LAYOUT_K_BY_N = 0, /* W[k][n]: row k holds the N weights that input k feeds */
    QJIT_LAYOUT_N_BY_K = 1, /* W[n][k]: PyTorch nn.Linear.weight, llama2.c matrices */
    QJIT_LAYOUT_MIN_ENUM = -0x7fffffff - 1,
    QJIT_LAYOUT_MAX_ENUM = 0x7fffffff
} qjit_weight_layout;

/* The zero-point convention of a GPTQ checkpoint (its "checkpoint_format"). */
typedef enum qjit_gptq_format {
    QJIT_GPTQ_V1 = 1, /* "gptq": qzeros hold zero - 1, subtracted from each whole int32 word (1 per field,
                         with borrows; per field for 3 bits), as AutoGPTQ and GPTQModel write it */
    QJIT_GPTQ_V2 = 2, /* "gptq_v2": qzeros hold the zero point as is */
    QJIT_GGUF_BLOCKS = 3, /* not GPTQ: a GGUF file's tensor in ggml's blocks (qjit_checkpoint_layer.ggml_type) */
    QJIT_GPTQ_MIN_ENUM = -0x7fffffff - 1,
    QJIT_GPTQ_MAX_ENUM = 0x7fffffff
} qjit_gptq_format;

/* ggml's quantized tensor types that qjit_linear_create_from_gguf imports, by the numbers GGUF files
 * store (ggml.h's enum ggml_type). */
typedef enum qjit_ggml_type {
    QJIT_GGML_Q4_0 = 2,
    QJIT_GGML_Q4_1 = 3,
    QJIT_GGML_Q5_0 = 6,
    QJIT_GGML_Q5_1 = 7,
    QJIT_GGML_Q8_0 = 8,
    QJIT_GGML_Q2_K = 10,
    QJIT_GGML_Q3_K = 11,
    QJIT_GGML_Q4_K = 12,
    QJIT_GGML_Q5_K = 13,
    QJIT_GGML_Q6_K = 14,
    QJIT_GGML_IQ4_NL = 20,
    QJIT_GGML_IQ4_XS = 23,
    QJIT_GGML_TYPE_MIN_ENUM = -0x7fffffff - 1,
    QJIT_GGML_TYPE_MAX_ENUM = 0x7fffffff
} qjit_ggml_type;

/* group_size value meaning one group spanning all K rows (one scale per column). */
#define QJIT_GROUP_PER_COLUMN (-1)

typedef struct qjit_context qjit_context;
typedef struct qjit_linear qjit_linear;
typedef struct qjit_checkpoint qjit_checkpoint;

typedef struct qjit_context_options {
    int num_threads;             /* 0: one per available core */
    const char* tuning_db_path;  /* NULL: $QJIT_TUNING_DB, else $XDG_CACHE_HOME/qjit/tuning.yaml
                                    (~/.cache/qjit/tuning.yaml); "": no database, tune in memory only */
    qjit_isa max_isa;            /* cap on the instruction set; QJIT_ISA_AUTO: no cap ($QJIT_MAX_ISA may cap) */
    int verbosity;               /* 0 quiet; 1 one line per layer creation on stderr ($QJIT_VERBOSE) */
    qjit_activations activations; /* AUTO: the default path ($QJIT_ACTIVATIONS=f32|int8 overrides) */
    const char* tiling;          /* NULL: tuned per layer; else e.g. "tu=4,mb=4,prefetch=8,ku=1,ksplit=1" for
                                    all layers (knobs left out: the model's best pick that agrees with those given) */
    double tuning_budget_ms;     /* wall time a layer creation may spend timing tilings on a database miss;
                                    < 0: $QJIT_TUNING_BUDGET_MS, else 300. 0: the model's pick, untimed */
    qjit_tuning_mode tuning_mode;
    int64_t tuning_batch;        /* activation rows per forward the tiling is tuned for; 0: 1 (decoding) */
    int cuda_device;             /* -1 (the default): CPU only. >= 0: layers also upload their weights to this
                                    CUDA device at creation and serve qjit_linear_forward_cuda; creating the
                                    context fails with QJIT_ERROR_NO_DEVICE where there is no such device */
    qjit_dtype cuda_dtype;       /* activation type the CUDA kernels are tuned and compiled for at layer
                                    creation: QJIT_DTYPE_F16 (the default) or QJIT_DTYPE_BF16 */
} qjit_context_options;

/* How fp32 weights are quantized (all calibration-free: they need only the weights). */
typedef enum qjit_quant_method {
    QJIT_QUANT_RTN = 0,  /* round to nearest, each group's scale and zero point from its min and max */
    QJIT_QUANT_HQQ = 1,  /* each group's offset (or integer zero point) and scale optimised against an lp
                            (p < 1) norm of its weighted error by half-quadratic splitting (HQQ) */
    QJIT_QUANT_MILO = 2, /* MiLo: HQQ plus a low-rank compensator U (K x rank) V (rank x N) fitted to the
                            residual by alternating truncated SVDs; y = x Wq + (x U) V */
    QJIT_QUANT_GPTQ = 3,  /* GPTQ: needs a calibration (qjit_linear_create_calibrated); each row's rounding error
                             fed forward through the Cholesky factor of H^-1; act_order, damp */
    QJIT_QUANT_MIXED = 4, /* 2/4/16: K-groups in 4 or 2 bits by sensitivity (the mixed_alpha most sensitive in 4),
                             second-order scales, fp16 outliers from the 2-bit groups; GPTQ with a calibration,
                             round to nearest with a range-based sensitivity without one; `bits` is ignored */
    QJIT_QUANT_METHOD_MIN_ENUM = -0x7fffffff - 1,
    QJIT_QUANT_METHOD_MAX_ENUM = 0x7fffffff
} qjit_quant_method;

/* qjit_quant_config.float_offsets: the zero-point form measured best for the method. */
#define QJIT_FLOAT_OFFSETS_BY_METHOD (-1)

typedef struct qjit_quant_config {
    int bits;               /* 2, 3, 4 or 8 */
    int group_size;         /* 16, 32, 64, 128, 256 or QJIT_GROUP_PER_COLUMN */
    int symmetric;          /* nonzero: zero point fixed at 2^(bits-1) */
    qjit_dtype scale_dtype; /* F16 rounds each scale to half precision before quantizing */
    qjit_quant_method method; /* RTN by default */
    int rank;               /* MILO: the compensator's rank, 1 .. min(K, N, 1024); 0 with other methods */
    int low_rank_bits;      /* MILO: how U and V are stored: 8 (the default) or 3 (symmetric codes, one
                               scale per column), or 16 (fp16) */
    int act_order;          /* GPTQ, MIXED with a calibration: quantize rows in decreasing diag(H); the layer
                               stores them in that order and gathers activations (0 by default) */
    double damp;            /* GPTQ, MIXED: damp * mean(diag(H)) added to H's diagonal (0.01) */
    double mixed_alpha;     /* MIXED: fraction of K-groups in 4 bits, 0 .. 1 (0.25) */
    double outlier_fraction;/* MIXED: fraction of weights kept as fp16 outliers, 0 .. 0.005 (0.002) */
    int second_order_scales;/* MIXED: nonzero (the default): group scales quantized to 4 bits in groups of 16
                               columns with an fp16 scale and zero each */
    int float_offsets;      /* RTN, HQQ, MILO (RTN or HQQ base): 1: a real-valued offset per group instead of an
                               integer zero point, W = scale * code + offset (RTN: over each group's own
                               min..max, as llama.cpp's Q4_1; HQQ: fitted); stored at scale_dtype. 0: integer
                               zero points. QJIT_FLOAT_OFFSETS_BY_METHOD (the default): the form measured best
                               for the method, float offsets for HQQ, integer zero points otherwise (MiLo's
                               HQQ base included) and whenever symmetric is set. 1 excludes symmetric */
    double mixed_bits_per_weight; /* MIXED: > 0: as many 4-bit groups (the most sensitive) as keep the layer's
                               stored bits per weight (qjit_linear_info) at or below this budget, in place of
                               mixed_alpha; 0 (the default): mixed_alpha decides */
    int milo_base;          /* MILO: the quantizer of the base, QJIT_QUANT_HQQ (the default), QJIT_QUANT_RTN or
                               QJIT_QUANT_GPTQ (needs a calibration). With a calibration every MILO step
                               minimises the layer's output error on it instead of the weights' error */
} qjit_quant_config;

/* GPTQ tensors exactly as AutoGPTQ / GPTQModel store them (int32 words, little-endian bit order). */
typedef struct qjit_gptq_tensors {
    int bits;                     /* 2, 3, 4 or 8 */
    int group_size;               /* as in the checkpoint's quantize_config; -1: per column */
    const int32_t* qweight;       /* [ceil(K*bits/32)][N]: values packed along K, value i at bit bits*i */
    const int32_t* qzeros;        /* [G][ceil(N*bits/32)]: zero points packed along N */
    const void* scales;           /* [G][N] of scale_dtype: QJIT_DTYPE_F16, QJIT_DTYPE_BF16 or QJIT_DTYPE_F32 */
    qjit_dtype scale_dtype;
    const int32_t* g_idx;         /* [K] group of each row, or NULL for g_idx[k] = k / group_size */
    qjit_gptq_format checkpoint_format;
} qjit_gptq_tensors;

/* What a layer is: shape, format and storage footprint. */
typedef struct qjit_linear_info {
    int64_t k;
    int64_t n;
    int bits;
    int group_size;         /* rows per group; K when per column */
    int symmetric;
    int act_order;          /* nonzero: rows stored permuted, activations gathered at run time */
    int64_t weight_bytes;   /* packed weights + scales + zero points (+ compensator), the bytes one forward
                               streams */
    int low_rank;           /* the compensator's rank; 0: none */
    int low_rank_bits;      /* 8, 3 or 16 with a compensator; 0 without */
    int64_t stored_bytes;   /* what the format stores: codes at `bits`, scales at their type, zero points at
                               `bits` (asymmetric), the act-order permutation, the compensator's codes and
                               scales or fp16 values: stored_bytes * 8 / (K N) is the bits per weight */
    int64_t low_rank_bytes; /* the compensator's part of stored_bytes */
    int64_t wide_groups;    /* mixed 2/4-bit layers: K-groups stored in 4 bits (of ceil(K / group_size)); 0 otherwise */
    int second_order_scales;/* nonzero: scales stored as 4-bit codes with fp16 scales and zeros per 16 columns */
    int64_t outliers;       /* sparse fp16 outliers added to the weights */
    int float_offsets;      /* nonzero: real-valued offsets per group (stored like the scales) instead of
                               integer zero points */
    int scale_code_bits;    /* super-block scales (GGUF's K-quants): the width of each group's scale (and
                               min) code under an fp16 super-scale per 256 rows; 0 for other scales */
} qjit_linear_info;

/* How a layer's tiling was chosen. Strings are owned by the layer. */
typedef struct qjit_linear_tuning {
    qjit_tiling_source source;
    const char* kernel_key;  /* the database key: "gemm_q4g128_asym_i8_avx512vnni K=4096 N=11008 m=1 threads=2"; "" portable */
    const char* tiling;      /* "tu=3,mb=8,prefetch=4,ku=1,ksplit=1"; "" portable */
    double tuning_ms;        /* choosing the tiling: database lookup or timed search */
    double kernel_ms;        /* generating the kernels' machine code (one per row count up to mb) */
    double measured_us;      /* a cold call as timed by the search or the record; 0 when untimed */
    int candidates_timed;    /* by this layer's search; 0 otherwise */
    int candidates_ranked;   /* tilings the search could time, after pruning; 0 without a search */
    const char* warning;     /* a problem with the tuning database (e.g. set aside as corrupt), or "" */
} qjit_linear_tuning;

/* A CUDA device as the driver reports it. */
typedef struct qjit_cuda_device_info {
    char name[256];
    int ordinal;
    int compute_major, compute_minor;   /* compute capability, e.g. 9.0 */
    int sm_count;
    int64_t shared_memory_per_sm;       /* bytes */
    int64_t shared_memory_per_block;    /* bytes a block may opt in to */
    int64_t l2_bytes;
    int64_t global_memory_bytes;
    int memory_bus_bits;
    int memory_clock_khz;
    double peak_bandwidth_gbps;         /* 2 x bus width x memory clock (the data sheet figure) */
    int driver_version;                 /* e.g. 13000 */
} qjit_cuda_device_info;

/* ---- library ---- */
QJIT_API const char* qjit_version(void);              /* "MAJOR.MINOR.PATCH" */
QJIT_API const char* qjit_status_string(qjit_status status);
/* The message of this thread's last failed call; successful calls leave it as it is. "" if no call on this
 * thread has failed. */
QJIT_API const char* qjit_last_error(void);

/* ---- context ---- */
QJIT_API void qjit_context_options_init(qjit_context_options* options);
/* options may be NULL for the defaults. */
QJIT_API qjit_status qjit_context_create(const qjit_context_options* options, qjit_context** context);
QJIT_API qjit_status qjit_context_destroy(qjit_context* context);   /* NULL is a no-op */
QJIT_API qjit_status qjit_context_num_threads(const qjit_context* context, int* num_threads);
/* The instruction set every kernel of the context uses: the CPU's best at or below its cap. */
QJIT_API qjit_status qjit_context_isa(const qjit_context* context, qjit_isa* isa);
/* One line: CPU, instruction set in use, caches, hardware fingerprint, tuning database path. Owned by the context. */
QJIT_API qjit_status qjit_context_describe(const qjit_context* context, const char** description);

/* A caller's loop over [0, count) run on the context's threads (the pool its CPU layers run on, the
 * calling thread included): fn(user, begin, end) is called on disjoint ranges that cover [0, count),
 * each of at least `grain` indices except the last, and the call returns once all have returned.
 * Ranges run concurrently, in no set order; fn must not call qjit_parallel_for on the same context
 * (such a call, like one made while another thread's job runs on the pool, runs its ranges on the
 * calling thread alone). count 0 calls nothing. For the work between layers: norms, attention, element-wise
 * activations. */
typedef void (*qjit_range_fn)(void* user, int64_t begin, int64_t end);
QJIT_API qjit_status qjit_parallel_for(qjit_context* context, int64_t count, int64_t grain, qjit_range_fn fn,
                                       void* user);

/* ---- tuning database (the context's; see tuning_db_path) ---- */
/* A table of every record, this machine's marked with '*'. Owned by the context until the next call. */
QJIT_API qjit_status qjit_tuning_db_list(qjit_context* context, const char** text);
/* Writes every record to `path` (replaced atomically). */
QJIT_API qjit_status qjit_tuning_db_export(qjit_context* context, const char* path);
/* Merges the records of the database file at `path` into the context's (theirs win on equal keys). */
QJIT_API qjit_status qjit_tuning_db_import(qjit_context* context, const char* path);

/* ---- linear layers ---- */
QJIT_API void qjit_quant_config_init(qjit_quant_config* config); /* 4-bit, group 128, asymmetric, f16 scales, RTN */
/* Whether `config` makes float offsets: its float_offsets with QJIT_FLOAT_OFFSETS_BY_METHOD resolved for its
   method; *uses is 1 or 0. An invalid method or milo_base is refused. */
QJIT_API qjit_status qjit_quant_config_float_offsets(const qjit_quant_config* config, int* uses);

/* Quantize fp32 weights (K x N logically, stored as `layout`). The weights are copied. */
QJIT_API qjit_status qjit_linear_create_from_f32(qjit_context* context, const qjit_quant_config* config,
                                                 int64_t k, int64_t n, const float* weights,
                                                 qjit_weight_layout layout, qjit_linear** layer);

/* ---- Calibration: what GPTQ and the 2/4/16 format learn from a layer's inputs ---- */
/* Keeps H = sum of x^T x over every row added (K x K, double precision). */
typedef struct qjit_calibration qjit_calibration;
QJIT_API qjit_status qjit_calibration_create(int64_t k, qjit_calibration** calibration);
QJIT_API qjit_status qjit_calibration_destroy(qjit_calibration* calibration); /* NULL is a no-op */
/* Adds m >= 1 rows of the layer's inputs (x: m x K, row-major); call it for any number of batches. */
QJIT_API qjit_status qjit_calibration_add(qjit_calibration* calibration, const float* x, int64_t m);
/* Replaces what was added by H itself (K x K, symmetric, row-major) or by its diagonal alone (K values,
 * >= 0; GPTQ then feeds no error forward, and act-order and the sensitivities use the diagonal). */
QJIT_API qjit_status qjit_calibration_set_hessian(qjit_calibration* calibration, const float* h);
QJIT_API qjit_status qjit_calibration_set_diagonal(qjit_calibration* calibration, const float* diagonal);
QJIT_API qjit_status qjit_calibration_rows(const qjit_calibration* calibration, int64_t* rows);
/* As qjit_linear_create_from_f32, with the calibration of the layer's inputs (K must match). GPTQ needs
 * one; MIXED without one (NULL) ranks groups by their range instead; HQQ weighs each row's error by
 * diag(H); MILO fits its compensator to the output error (and GPTQ as its base needs one); RTN ignores it. */
QJIT_API qjit_status qjit_linear_create_calibrated(qjit_context* context, const qjit_quant_config* config,
                                                   const qjit_calibration* calibration, int64_t k, int64_t n,
                                                   const float* weights, qjit_weight_layout layout,
                                                   qjit_linear** layer);

/* For a 2/4/16 budget shared by many matrices (a model's): what widening each of a matrix's
 * ceil(K / group_size) K-groups to 4 bits gains, in estimated output error on the calibration's inputs
 * (its 2-bit rounding error less its 4-bit one, each row weighed as GPTQ weighs it), into gains[]; and
 * the bits a QJIT_QUANT_MIXED layer of config stores with `wide_groups` groups in 4 bits (full groups
 * counted first: at least what any choice of that many stores). Pass each matrix's share back as
 * config->mixed_bits_per_weight. */
QJIT_API qjit_status qjit_mixed_widening_gains(const qjit_quant_config* config, const qjit_calibration* calibration,
                                               int64_t k, int64_t n, const float* weights,
                                               qjit_weight_layout layout, double* gains);
QJIT_API qjit_status qjit_mixed_stored_bits(const qjit_quant_config* config, int64_t k, int64_t n,
                                            int64_t wide_groups, double* bits);

/* Import a GPTQ layer of K inputs and N outputs. The tensors are copied. With act-order (a g_idx that is
 * not k / group_size) rows are sorted by group and activations are gathered by that order at run time. */
QJIT_API qjit_status qjit_linear_create_from_gptq(qjit_context* context, int64_t k, int64_t n,
                                                  const qjit_gptq_tensors* tensors, qjit_linear** layer);

/* Import a GGUF weight tensor of ggml type `ggml_type` (a qjit_ggml_type) with dims {K, N}: N rows of
 * K values, each row a run of the type's blocks, as llama.cpp stores it (`data`, `bytes` long). The
 * layer dequantizes (qjit_linear_dequantize) to exactly the fp32 values ggml's dequantizer gives,
 * transposed to K x N; 5- and 6-bit codes are held in 8 bits, K-quant scales as fp32 (docs/gguf.md).
 * The data are copied. QJIT_ERROR_INVALID_ARGUMENT: a NULL pointer, a K that is not a multiple of
 * the type's block (32 or 256 values), `bytes` other than N * (K / block values) * block bytes, an
 * infinite or NaN fp16 scale field; QJIT_ERROR_UNSUPPORTED: any other type (F32, F16, BF16: not
 * quantized; IQ*, TQ*, Q8_1, Q8_K, MXFP4), or, in a context with a CUDA device, a format its kernels
 * do not run (float offsets: Q4_1, Q5_1, Q2_K, Q4_K, Q5_K; groups of 16: Q3_K, Q6_K). */
QJIT_API qjit_status qjit_linear_create_from_gguf(qjit_context* context, uint32_t ggml_type, const void* data,
                                                  size_t bytes, int64_t k, int64_t n, qjit_linear** layer);

/* A low-rank compensator given as dense factors: the layer computes y = x Wq + (x U) V. */
typedef struct qjit_low_rank {
    int rank;          /* 1 .. min(K, N, 1024) */
    int bits;          /* how qjit stores U and V: 8 or 3 (symmetric codes, one scale per column) or 16 (fp16) */
    const float* u;    /* [K][rank] row-major, rows in the layer's original input order */
    const float* v;    /* [rank][N] row-major */
} qjit_low_rank;
/* Import a layer stored as quantized weights plus a compensator: Wq as GPTQ tensors (as
 * qjit_linear_create_from_gptq takes them) and U, V quantized here at low_rank->bits. Copied. */
QJIT_API qjit_status qjit_linear_create_with_low_rank(qjit_context* context, int64_t k, int64_t n,
                                                      const qjit_gptq_tensors* tensors,
                                                      const qjit_low_rank* low_rank, qjit_linear** layer);
/* How a set of layers shares a budget of compensator rank (MiLo's rank policies). */
typedef enum qjit_rank_policy {
    QJIT_RANK_UNIFORM = 0,   /* every matrix the average rank */
    QJIT_RANK_DENSE = 1,     /* dense-r: attention and dense/shared matrices get the rank, routed experts little */
    QJIT_RANK_SPARSE = 2,    /* sparse-r: the opposite */
    QJIT_RANK_KURTOSIS = 3,  /* kurtosis-r: in proportion to each matrix's weight kurtosis (heavy tails) */
    QJIT_RANK_FREQUENCY = 4, /* frequency-r: routed experts by the activation counts given */
    QJIT_RANK_POLICY_MIN_ENUM = -0x7fffffff - 1,
    QJIT_RANK_POLICY_MAX_ENUM = 0x7fffffff
} qjit_rank_policy;
typedef enum qjit_matrix_role {
    QJIT_ROLE_ATTENTION = 0,
    QJIT_ROLE_DENSE = 1,     /* a dense FFN matrix or a shared expert's */
    QJIT_ROLE_EXPERT = 2,    /* a routed expert's */
    QJIT_ROLE_MIN_ENUM = -0x7fffffff - 1,
    QJIT_ROLE_MAX_ENUM = 0x7fffffff
} qjit_matrix_role;
typedef struct qjit_rank_matrix {
    int64_t k, n;
    qjit_matrix_role role;
    const float* weights;       /* [K][N] row-major: needed by QJIT_RANK_KURTOSIS, else may be NULL */
    double activation_count;    /* routed experts under QJIT_RANK_FREQUENCY: how often the router picks it */
} qjit_rank_matrix;
/* One rank per matrix (ranks[count]) under the budget sum_i rank_i (K_i + N_i) <= average_rank *
 * sum_i (K_i + N_i), each at most min(K_i, N_i, 1024): pass them as qjit_quant_config.rank. */
QJIT_API qjit_status qjit_assign_ranks(qjit_rank_policy policy, double average_rank,
                                       const qjit_rank_matrix* matrices, int64_t count, int* ranks);
/* The largest rank (0 when none fits) whose compensator, stored at config->low_rank_bits, adds at most
 * `fraction` (> 0) of the stored bytes of the K x N layer config makes without one: the rank that keeps a
 * MILO layer within +fraction of its base's bytes. config->method is not read. */
QJIT_API qjit_status qjit_rank_within_budget(const qjit_quant_config* config, int64_t k, int64_t n, double fraction,
                                             int* rank);
QJIT_API qjit_status qjit_linear_destroy(qjit_linear* layer); /* NULL is a no-op */

/* y (m x N) = x (m x K) * W. m >= 1. x and y must not overlap. Safe to call from several threads. */
QJIT_API qjit_status qjit_linear_forward(qjit_linear* layer, const float* x, int64_t m, float* y);

/* ys[i] (m x N_i) = x (m x K) * W_i for `count` layers of one context that read the same inputs (an
 * attention block's q, k and v; an FFN's gate and up): one call instead of `count`, the layers'
 * products in one parallel dispatch where their kernels allow it (x86 JIT layers without outliers),
 * each output what qjit_linear_forward computes, bit for bit. No y may overlap x or another y. */
QJIT_API qjit_status qjit_linear_forward_shared_input(qjit_linear* const* layers, int count, const float* x, int64_t m,
                                                      float* const* ys);

/* The devices a layer runs on: every layer on the CPU; in a context created with options.cuda_device,
 * on that CUDA device too. */
typedef enum qjit_device {
    QJIT_DEVICE_CPU = 0,
    QJIT_DEVICE_CUDA = 1,
    QJIT_DEVICE_MIN_ENUM = -0x7fffffff - 1,
    QJIT_DEVICE_MAX_ENUM = 0x7fffffff
} qjit_device;
/* y (m x N) = x (m x K) * W on `device`, the device-neutral form of qjit_linear_forward and
 * qjit_linear_forward_cuda. CPU: host pointers, dtype QJIT_DTYPE_F32, stream ignored (as
 * qjit_linear_forward). CUDA: device pointers, QJIT_DTYPE_F16 or QJIT_DTYPE_BF16, enqueued on `stream` (as
 * qjit_linear_forward_cuda). QJIT_ERROR_NO_DEVICE when the layer has no copy on `device`. */
QJIT_API qjit_status qjit_linear_forward_on(qjit_linear* layer, qjit_device device, const void* x, void* y, int64_t m,
                                            qjit_dtype dtype, void* stream);

/* The dense fp32 matrix the layer represents, written as W[k][n] in the original row order. */
QJIT_API qjit_status qjit_linear_dequantize(const qjit_linear* layer, float* weights_k_by_n);

QJIT_API qjit_status qjit_linear_get_info(const qjit_linear* layer, qjit_linear_info* info);

QJIT_API qjit_status qjit_linear_get_tuning(const qjit_linear* layer, qjit_linear_tuning* tuning);

/* Times `repeats` forwards of m rows (m >= 1, repeats >= 1) on random activations and returns the median in
 * microseconds. cold != 0: the layer's weights are flushed from every cache before each call, as in decoding
 * a model larger than the caches (the tuner times the same way); cold == 0: back-to-back calls. */
QJIT_API qjit_status qjit_linear_benchmark(qjit_linear* layer, int64_t m, int repeats, int cold, double* median_us);

/* ---- checkpoints: a GPTQ directory (as AutoGPTQ, GPTQModel and the Hugging Face tools write it) or a
 * GGUF file (llama.cpp's) ---- */
/* One quantized linear layer of a checkpoint. Strings are owned by the checkpoint. */
typedef struct qjit_checkpoint_layer {
    const char* name;       /* GPTQ: the tensor prefix, e.g. "model.layers.0.self_attn.q_proj"; GGUF: the
                               tensor's name, e.g. "blk.0.attn_q.weight" */
    int64_t k;              /* input features */
    int64_t n;              /* output features */
    int bits;
    int group_size;         /* as in the config: rows per group, or QJIT_GROUP_PER_COLUMN */
    int act_order;          /* nonzero: its g_idx is not row / group_size */
    int symmetric;          /* the config's "sym" (with "sym": false, a layer whose zero points all turn
                               out to be 2^(bits-1) imports as symmetric all the same) */
    const char* format;     /* the qjit format it imports to, e.g. "q4g128_asym" (the tuning key's first word) */
    qjit_gptq_format checkpoint_format;
    qjit_dtype scale_dtype; /* F16, BF16 or F32 */
    int64_t checkpoint_bytes; /* its tensors' bytes in the checkpoint */
    int ggml_type;          /* a GGUF file's layer: its tensor's type (a qjit_ggml_type); -1 for GPTQ */
} qjit_checkpoint_layer;

/* Opens a checkpoint directory: config.json with "quantization_config" (or quantize_config.json)
 * and model.safetensors (or shards listed in model.safetensors.index.json). The tensor files are
 * memory-mapped; their headers and every layer's tensors are checked against the config here.
 * QJIT_ERROR_IO: a missing directory, config or file; QJIT_ERROR_CORRUPT_DATA: a malformed file, a
 * missing tensor, a shape or dtype the config does not imply; QJIT_ERROR_UNSUPPORTED: a method,
 * width, group size or checkpoint format qjit cannot import. `path` naming a file opens it as a
 * GGUF file (memory-mapped and checked whole): each 2-dimensional tensor of a type
 * qjit_linear_create_from_gguf imports is a layer, named as the tensor. The context must outlive it. */
QJIT_API qjit_status qjit_checkpoint_open(qjit_context* context, const char* path, qjit_checkpoint** checkpoint);
QJIT_API qjit_status qjit_checkpoint_close(qjit_checkpoint* checkpoint); /* NULL is a no-op; layers made stay valid */
QJIT_API qjit_status qjit_checkpoint_num_layers(const qjit_checkpoint* checkpoint, int64_t* count);
/* Layer `index` (0 .. count - 1), in natural order of the names (layers.2 before layers.10). */
QJIT_API qjit_status qjit_checkpoint_get_layer(const qjit_checkpoint* checkpoint, int64_t index,
                                               qjit_checkpoint_layer* layer);
/* Creates the layer named `name` on the checkpoint's context, as qjit_linear_create_from_gptq (or
 * qjit_linear_create_from_gguf) would from its tensors (tuned, or a database hit). QJIT_ERROR_INVALID_ARGUMENT for a name the checkpoint
 * does not have. May be called from several threads at once. */
QJIT_API qjit_status qjit_checkpoint_create_layer(qjit_checkpoint* checkpoint, const char* name, qjit_linear** layer);

/* ---- CUDA (the driver is loaded at run time: every build runs where there is no GPU) ---- */
/* Devices the driver sees. QJIT_ERROR_NO_DEVICE, with the reason in qjit_last_error(), where there is no
 * driver (libcuda.so.1), it fails to initialise, or it sees no device; *count is then 0. */
QJIT_API qjit_status qjit_cuda_device_count(int* count);
QJIT_API qjit_status qjit_cuda_get_device_info(int ordinal, qjit_cuda_device_info* info);
/* qjit_linear_forward_on(layer, QJIT_DEVICE_CUDA, ...): y (m x N) = x (m x K) * W on the context's CUDA
 * device (options.cuda_device), enqueued on `stream` (a
 * CUstream; NULL: the legacy default stream) and not waited for. x and y are device pointers to
 * row-major m x K and m x N matrices of `dtype` (QJIT_DTYPE_F16 or QJIT_DTYPE_BF16); m >= 1. Products are
 * accumulated in fp32. Calls on one layer are serialised (a layer owns one scratch buffer). */
QJIT_API qjit_status qjit_linear_forward_cuda(qjit_linear* layer, const void* x, void* y, int64_t m,
                                              qjit_dtype dtype, void* stream);
/* Times `repeats` CUDA forwards of m rows on random activations with CUDA events (after a warm-up) and
 * returns the median in microseconds. The weights stay resident in device memory, as in decoding. */
QJIT_API qjit_status qjit_linear_benchmark_cuda(qjit_linear* layer, int64_t m, qjit_dtype dtype, int repeats,
                                                double* median_us);
/* How the layer's CUDA tiling for `dtype` and m rows was chosen (kernel_ms: NVRTC compile time, zero on a
 * cubin cache hit). Fills the same struct as the CPU's; strings owned by the layer. */
QJIT_API qjit_status qjit_linear_get_tuning_cuda(qjit_linear* layer, int64_t m, qjit_dtype dtype,
                                                 qjit_linear_tuning* tuning);

/* A string naming the layer's format, kernel and tiling; owned by the layer. */
QJIT_API qjit_status qjit_linear_describe(const qjit_linear* layer, const char** description);

/* Save a packed layer (versioned, self-describing, checksummed). The file is replaced atomically:
 * an existing file is left untouched if the write fails. */
QJIT_API qjit_status qjit_linear_save(const qjit_linear* layer, const char* path);
QJIT_API qjit_status qjit_linear_load(qjit_context* context, const char* path, qjit_linear** layer);

/* ---- pack files: a model's layers mapped instead of rebuilt ----
 * A pack holds layers as their kernels read them: codes in panels and scales in the panel layout of
 * the kernel each was tuned to. Opening one maps the file (every page at once) and checks every
 * byte against its checksums; a layer made from it reads its weights from the mapping, with no copy
 * and no pages of its own, so a model whose pack is in the page cache is ready in the time its
 * checksums take. The mapping lives as long as the pack or any layer made from it.
 *
 * A writer takes the layers of a model one by one (each layer's entry under a name the caller
 * chooses: a model's tensor names), writes them to a temporary file beside `path` and renames it
 * over `path` at commit, so an existing pack is whole until then; destroying a writer uncommitted
 * leaves it as it was. Layers the panel form does not hold (a portable-path or CUDA-only format, a
 * compensator, act-order, mixed widths, outliers, second-order scales, metadata fp16 cannot hold)
 * are stored as layer files (qjit_linear_save's bytes) and rebuilt when read: they are correct, not
 * mapped.
 *
 * `source` is the caller's name for what the layers were made from (a model file's size, time and
 * path, the options that shaped the layers); qjit_pack_open with another source fails with
 * QJIT_ERROR_STALE, as it does when the context would make other kernels than the pack's (another
 * CPU, instruction-set cap or activation path): the caller rebuilds and writes the pack again.
 * QJIT_ERROR_IO: the file cannot be opened or written; QJIT_ERROR_CORRUPT_DATA: it is truncated,
 * fails a checksum or is malformed. */
typedef struct qjit_pack qjit_pack;
typedef struct qjit_pack_writer qjit_pack_writer;

QJIT_API qjit_status qjit_pack_writer_create(const char* path, const char* source, qjit_pack_writer** writer);
/* Writes the layer's entry now (the layer may be destroyed after). A name given twice: INVALID_ARGUMENT. */
QJIT_API qjit_status qjit_pack_writer_add(qjit_pack_writer* writer, const char* name, const qjit_linear* layer);
/* Flushes the file to disk and renames it over the path; the writer takes no more layers. */
QJIT_API qjit_status qjit_pack_writer_commit(qjit_pack_writer* writer);
QJIT_API void qjit_pack_writer_destroy(qjit_pack_writer* writer);

/* Maps and checks the pack at `path` for layers of `context` (which must outlive them). */
QJIT_API qjit_status qjit_pack_open(qjit_context* context, const char* path, const char* source, qjit_pack** pack);
/* The number of entries and the name of entry i (owned by the pack). */
QJIT_API qjit_status qjit_pack_entries(const qjit_pack* pack, int64_t* count);
QJIT_API qjit_status qjit_pack_entry_name(const qjit_pack* pack, int64_t i, const char** name);
/* The layer stored under `name` (INVALID_ARGUMENT when there is none), in the pack's context: its
 * tuning source is QJIT_TILING_PACK when it reads its weights from the mapping. */
QJIT_API qjit_status qjit_linear_create_from_pack(const qjit_pack* pack, const char* name, qjit_linear** layer);
QJIT_API void qjit_pack_destroy(qjit_pack* pack);

/* ---- mixture of experts ---- */
/* One expert's share of a grouped call: its layer and the token rows routed to it. */
typedef struct qjit_expert_rows {
    qjit_linear* layer;      /* the expert's layer; every expert of a call has the same K and N */
    const int32_t* rows;     /* [count] token indices into x, 0 .. m - 1, each at most once per expert */
    const float* weights;    /* [count] the gate weight of each row; NULL: 1 */
    int64_t count;           /* rows routed to the expert; 0: skipped (rows may then be NULL) */
} qjit_expert_rows;

/* The experts of a mixture-of-experts layer as one call: y (m x N) is overwritten with
 *     y[t] = sum over (e, i) with experts[e].rows[i] == t of  weights[i] * (x[t] W_e)
 * summed in expert order; a token no expert takes gets zeros. A token may go to several experts
 * (top-k routing). x (m x K) holds the m tokens (the limits of qjit_linear_forward); x and y must
 * not overlap. num_experts >= 1; the layers belong to `context`. On the CPU every expert's rows run
 * in one parallel dispatch of the context's pool (not one per expert), so experts with only a few
 * rows each, as in decoding, do not each pay a dispatch and a barrier; layers without generated
 * kernels (the portable path) run one by one inside the call. A layer's low-rank compensator runs
 * on its expert's rows; layers on generated kernels with sparse outliers (QJIT_QUANT_MIXED) are
 * refused (QJIT_ERROR_UNSUPPORTED) until the grouped call runs that pass. */
QJIT_API qjit_status qjit_moe_forward(qjit_context* context, const qjit_expert_rows* experts, int num_experts,
                                      const float* x, int64_t m, float* y);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* QJIT_QJIT_H */
