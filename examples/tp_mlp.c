/* A GPTQ MLP split across MPI ranks (qjit/qjit_tp.h over qjit/qjit_tp_mpi.h), checked against
 * the unsharded MLP: every rank makes the same random 4-bit act-order GPTQ tensors (same seed),
 * computes the reference from the whole layers, then for each algorithm makes its shard, runs a
 * forward through MPI and prints one JSON line:
 *   {"rank": r, "world": w, "algorithm": "naive", "max_abs_diff": d, "max_abs_ref": a,
 *    "bytes_communicated": b}
 * Exits nonzero when a difference exceeds the bound below or a call fails.
 *
 *   mpirun -np 4 ./tp_mlp [--k1 320] [--n1 768] [--n2 288] [--bits 4] [--batch 3] [--kind swiglu|gelu]
 */
#include <mpi.h>
#include <qjit/qjit_tp_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp_reference.h"
#include "random_gptq.h"

enum { group_size = 32 };
static const uint64_t weights_seed = 20240601, inputs_seed = 7;

/* Both sides compute the same fp32 products and differ only in how the sums are associated (the
 * shard layers' tilings, and the ranks' partial sums of W_down added by the all-reduce). For
 * random terms that reassociation moves y by about sqrt(n) * FLT_EPSILON of the terms' scale,
 * around 1e-6 of max|y| at these sizes; 1e-4 of max|y| leaves a wide margin, while a real fault
 * (a wrong permutation, a missing shard) moves y by the order of max|y| itself. */
static const double relative_bound = 1e-4;

typedef struct options {
    int64_t k1, n1, n2, batch;
    int bits;
    qjit_mlp_kind kind;
} options;

static int parse_options(int argc, char** argv, options* out) {
    int i;
    out->k1 = 320;
    out->n1 = 768;
    out->n2 = 288;
    out->batch = 3;
    out->bits = 4;
    out->kind = QJIT_MLP_SWIGLU;
    for (i = 1; i + 1 < argc; i += 2) {
        const char* flag = argv[i];
        const char* value = argv[i + 1];
        if (strcmp(flag, "--k1") == 0) out->k1 = atoll(value);
        else if (strcmp(flag, "--n1") == 0) out->n1 = atoll(value);
        else if (strcmp(flag, "--n2") == 0) out->n2 = atoll(value);
        else if (strcmp(flag, "--batch") == 0) out->batch = atoll(value);
        else if (strcmp(flag, "--bits") == 0) out->bits = atoi(value);
        else if (strcmp(flag, "--kind") == 0 && strcmp(value, "swiglu") == 0) out->kind = QJIT_MLP_SWIGLU;
        else if (strcmp(flag, "--kind") == 0 && strcmp(value, "gelu") == 0) out->kind = QJIT_MLP_GELU;
        else return -1;
    }
    return i == argc && out->k1 > 0 && out->n1 > 0 && out->n2 > 0 && out->batch > 0 ? 0 : -1;
}

/* A failed call ends the whole job: the other ranks would otherwise wait in a collective. */
static void check(qjit_status status, const char* what) {
    int rank = 0;
    if (status == QJIT_OK) return;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, qjit_status_string(status), qjit_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void* allocate(size_t bytes) {
    void* memory = malloc(bytes);
    if (memory == NULL) check(QJIT_ERROR_OUT_OF_MEMORY, "malloc");
    return memory;
}

/* Runs one algorithm's shard against the reference y; returns 0 when within the bound. */
static int run_algorithm(qjit_context* context, const random_gptq_mlp* weights, const qjit_communicator* comm,
                         qjit_tp_algorithm algorithm, const float* x, const float* reference_y, int64_t m) {
    const int64_t count = m * weights->mlp.n2;
    float* y = (float*)allocate(sizeof(float) * (size_t)count);
    qjit_tp_mlp* shard = NULL;
    qjit_tp_traffic traffic;
    double max_abs_diff, max_abs_ref;
    int within_bound;

    check(qjit_tp_mlp_create_from_gptq(context, &weights->mlp, comm->rank, comm->world_size, algorithm, &shard),
          "qjit_tp_mlp_create_from_gptq");
    check(qjit_tp_mlp_forward(shard, comm, x, m, y, NULL), "qjit_tp_mlp_forward");
    check(qjit_tp_mlp_traffic(shard, m, &traffic), "qjit_tp_mlp_traffic");
    mlp_reference_compare(y, reference_y, count, &max_abs_diff, &max_abs_ref);
    within_bound = max_abs_diff <= relative_bound * max_abs_ref; /* false for NaN */
    printf("{\"rank\": %d, \"world\": %d, \"algorithm\": \"%s\", \"max_abs_diff\": %.9g, \"max_abs_ref\": %.9g, "
           "\"bytes_communicated\": %lld}\n",
           comm->rank, comm->world_size, algorithm == QJIT_TP_NAIVE ? "naive" : "tp_aware", max_abs_diff,
           max_abs_ref, (long long)traffic.bytes_sent);
    fflush(stdout);
    if (!within_bound)
        fprintf(stderr, "rank %d: max_abs_diff %g exceeds %g * max_abs_ref\n", comm->rank, max_abs_diff,
                relative_bound);
    qjit_tp_mlp_destroy(shard);
    free(y);
    return within_bound ? 0 : 1;
}

int main(int argc, char** argv) {
    options options;
    qjit_context_options context_options;
    qjit_context* context = NULL;
    qjit_communicator comm;
    random_gptq_mlp weights;
    mlp_reference reference;
    float *x, *reference_y;
    uint64_t state = inputs_seed;
    int64_t i;
    int failures = 0;

    MPI_Init(&argc, &argv);
    if (parse_options(argc, argv, &options) != 0) {
        fprintf(stderr, "usage: %s [--k1 N] [--n1 N] [--n2 N] [--bits 2|3|4|8] [--batch M] [--kind swiglu|gelu]\n",
                argv[0]);
        MPI_Finalize();
        return 2;
    }
    check(qjit_mpi_communicator_create(MPI_COMM_WORLD, &comm), "qjit_mpi_communicator_create");

    /* fp32 activations: the shards and the reference then compute the same products. */
    qjit_context_options_init(&context_options);
    context_options.activations = QJIT_ACTIVATIONS_F32;
    check(qjit_context_create(&context_options, &context), "qjit_context_create");

    if (random_gptq_mlp_init(&weights, options.kind, options.k1, options.n1, options.n2, options.bits, group_size,
                             1, QJIT_DTYPE_F16, weights_seed) != 0)
        check(QJIT_ERROR_OUT_OF_MEMORY, "random_gptq_mlp_init");
    x = (float*)allocate(sizeof(float) * (size_t)(options.batch * options.k1));
    reference_y = (float*)allocate(sizeof(float) * (size_t)(options.batch * options.n2));
    for (i = 0; i < options.batch * options.k1; ++i) x[i] = random_signed_unit(&state);

    check(mlp_reference_create(context, &weights.mlp, &reference), "mlp_reference_create");
    check(mlp_reference_forward(&reference, x, options.batch, reference_y), "mlp_reference_forward");
    failures += run_algorithm(context, &weights, &comm, QJIT_TP_NAIVE, x, reference_y, options.batch);
    failures += run_algorithm(context, &weights, &comm, QJIT_TP_AWARE, x, reference_y, options.batch);

    mlp_reference_destroy(&reference);
    random_gptq_mlp_free(&weights);
    free(x);
    free(reference_y);
    qjit_context_destroy(context);
    qjit_mpi_communicator_destroy(&comm);
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
}
