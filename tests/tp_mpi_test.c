/* The tensor-parallel MLP (qjit/qjit_tp.h) over real MPI through libqjit_mpi, at whatever number
 * of ranks mpirun starts: the adapter's collectives; both algorithms against the unsharded MLP
 * for 2, 3, 4 and 8 bits, SwiGLU and GELU, batches 1 and 5, on shapes whose shards are a few
 * groups; the traffic accounting; a communicator mismatched with the shard; save and load; and a
 * failing collective (with a local fake communicator, since a real collective failing on one rank
 * would leave the others waiting). Exits 0 when every rank passes every check.
 * Usage: mpirun -np N tp_mpi_test SCRATCH_DIR */
#include <math.h>
#include <mpi.h>
#include <qjit/qjit_tp_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp_reference.h"
#include "random_gptq.h"

static int rank, world;
static int failures;

#define EXPECT(condition, ...)                                                            \
    do {                                                                                  \
        if (!(condition)) {                                                               \
            fprintf(stderr, "rank %d: %s:%d: failed: %s: ", rank, __FILE__, __LINE__, #condition); \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            ++failures;                                                                   \
        }                                                                                 \
    } while (0)
#define EXPECT_OK(call) EXPECT((call) == QJIT_OK, "%s", qjit_last_error())

/* As examples/tp_mlp.c: the two sides differ only in how fp32 sums are associated. */
static const double relative_bound = 1e-4;

typedef struct shape {
    int64_t k1, n1, n2;
    int group_size;
    int act_order;
    qjit_dtype scale_dtype;
} shape;

/* N1 / world is a whole number of groups at 1, 2 and 4 ranks: 64 rows (2 groups) per rank at 4. */
static const shape shapes[] = {
    {72, 256, 40, 32, 1, QJIT_DTYPE_F16},  /* K1 not a multiple of the group: a last group of 8 rows */
    {96, 384, 24, 32, 0, QJIT_DTYPE_F32},  /* no act-order: P2 is the identity */
};
static const int bit_widths[] = {2, 3, 4, 8};
static const int64_t batches[] = {1, 5};

static float* random_floats(int64_t count, uint64_t seed) {
    float* values = (float*)malloc(sizeof(float) * (size_t)count);
    uint64_t state = seed;
    int64_t i;
    for (i = 0; i < count; ++i) values[i] = random_signed_unit(&state);
    return values;
}

static float* nan_filled(int64_t count) {
    float* values = (float*)malloc(sizeof(float) * (size_t)count);
    int64_t i;
    for (i = 0; i < count; ++i) values[i] = NAN;
    return values;
}

/* ---- the adapter's collectives ---- */

static void test_communicator(const qjit_communicator* comm) {
    enum { count = 5 };
    float buffer[count], send[count];
    float* receive = nan_filled((int64_t)count * world);
    qjit_communicator unused;
    int i, r;

    EXPECT(comm->rank == rank && comm->world_size == world, "rank %d of %d", comm->rank, comm->world_size);
    for (i = 0; i < count; ++i) buffer[i] = (float)(rank + 1 + i);
    EXPECT(comm->all_reduce_sum_f32(comm->user, buffer, count) == 0, "all_reduce_sum_f32");
    for (i = 0; i < count; ++i) /* sum over r of (r + 1 + i) */
        EXPECT(buffer[i] == (float)(world * (world + 1) / 2 + world * i), "buffer[%d] = %g", i, buffer[i]);

    for (i = 0; i < count; ++i) send[i] = (float)(100 * rank + i);
    EXPECT(comm->all_gather_f32(comm->user, send, receive, count) == 0, "all_gather_f32");
    for (r = 0; r < world; ++r)
        for (i = 0; i < count; ++i)
            EXPECT(receive[r * count + i] == (float)(100 * r + i), "receive[%d] = %g", r * count + i,
                   receive[r * count + i]);

    /* A negative count is refused on every rank before any MPI call, and its code has a name. */
    {
        const int code = comm->all_reduce_sum_f32(comm->user, buffer, -1);
        EXPECT(code != 0, "a negative count");
        EXPECT(comm->error_string != NULL && strlen(comm->error_string(comm->user, code)) > 0, "error_string");
    }
    EXPECT(qjit_mpi_communicator_create(MPI_COMM_NULL, &unused) == QJIT_ERROR_INVALID_ARGUMENT, "MPI_COMM_NULL");
    EXPECT(qjit_mpi_communicator_create(MPI_COMM_WORLD, NULL) == QJIT_ERROR_INVALID_ARGUMENT, "NULL out");
    EXPECT(qjit_mpi_communicator_destroy(NULL) == QJIT_OK, "destroy(NULL)");
    free(receive);
}

/* ---- the sharded MLP against the whole one ---- */

static void expect_traffic(qjit_tp_mlp* shard, qjit_tp_algorithm algorithm, const qjit_mlp_gptq* mlp, int64_t m) {
    qjit_tp_traffic traffic;
    const int64_t gather_bytes = m * mlp->n1 * (int64_t)sizeof(float), reduce_bytes = m * mlp->n2 * (int64_t)sizeof(float);
    const int gathers = algorithm == QJIT_TP_NAIVE && world > 1, reduces = world > 1;
    /* ring accounting: (w - 1) / w of a gather, 2 (w - 1) / w of a reduction */
    const double expected_sent = (double)(world - 1) / world * ((gathers ? gather_bytes : 0) + 2.0 * reduce_bytes);
    EXPECT_OK(qjit_tp_mlp_traffic(shard, m, &traffic));
    EXPECT(traffic.all_gathers == gathers && traffic.all_reduces == reduces, "%d all-gathers, %d all-reduces",
           traffic.all_gathers, traffic.all_reduces);
    /* the bytes of the collectives a forward makes: none at world 1 */
    EXPECT(traffic.all_reduce_bytes == reduces * reduce_bytes, "all_reduce_bytes %lld",
           (long long)traffic.all_reduce_bytes);
    EXPECT(traffic.all_gather_bytes == gathers * gather_bytes, "all_gather_bytes %lld",
           (long long)traffic.all_gather_bytes);
    EXPECT(fabs((double)traffic.bytes_sent - expected_sent) <= 1.0, "bytes_sent %lld, expected %.1f",
           (long long)traffic.bytes_sent, expected_sent);
}

static void expect_info(qjit_tp_mlp* shard, qjit_tp_algorithm algorithm, const qjit_mlp_gptq* mlp, int act_order) {
    qjit_tp_mlp_info info;
    EXPECT_OK(qjit_tp_mlp_get_info(shard, &info));
    EXPECT(info.kind == mlp->kind && info.algorithm == algorithm, "kind %d, algorithm %d", (int)info.kind,
           (int)info.algorithm);
    EXPECT(info.rank == rank && info.world_size == world, "rank %d of %d", info.rank, info.world_size);
    EXPECT(info.k1 == mlp->k1 && info.n1 == mlp->n1 && info.n2 == mlp->n2, "sizes %lld %lld %lld",
           (long long)info.k1, (long long)info.n1, (long long)info.n2);
    EXPECT(info.shard_n1 == mlp->n1 / world, "shard_n1 %lld", (long long)info.shard_n1);
    EXPECT(!info.act_order == !act_order, "act_order %d", info.act_order);
    EXPECT(info.weight_bytes > 0, "weight_bytes %lld", (long long)info.weight_bytes);
}

static void test_against_reference(qjit_context* context, const qjit_communicator* comm, const shape* s, int bits,
                                   qjit_mlp_kind kind) {
    random_gptq_mlp weights;
    mlp_reference reference;
    int algorithm, b;
    const char* label = kind == QJIT_MLP_SWIGLU ? "swiglu" : "gelu";

    if (random_gptq_mlp_init(&weights, kind, s->k1, s->n1, s->n2, bits, s->group_size, s->act_order,
                             s->scale_dtype, 1000 + (uint64_t)bits) != 0) {
        EXPECT(0, "out of memory");
        return;
    }
    EXPECT_OK(mlp_reference_create(context, &weights.mlp, &reference));
    for (algorithm = QJIT_TP_NAIVE; algorithm <= QJIT_TP_AWARE; ++algorithm) {
        qjit_tp_mlp* shard = NULL;
        EXPECT_OK(qjit_tp_mlp_create_from_gptq(context, &weights.mlp, rank, world, (qjit_tp_algorithm)algorithm,
                                               &shard));
        if (shard == NULL) continue;
        expect_info(shard, (qjit_tp_algorithm)algorithm, &weights.mlp, s->act_order);
        for (b = 0; b < 2; ++b) {
            const int64_t m = batches[b];
            float* x = random_floats(m * s->k1, 77 + (uint64_t)m);
            float* y = nan_filled(m * s->n2);
            float* expected = nan_filled(m * s->n2);
            double max_abs_diff, max_abs_ref;
            EXPECT_OK(mlp_reference_forward(&reference, x, m, expected));
            EXPECT_OK(qjit_tp_mlp_forward(shard, comm, x, m, y, NULL));
            mlp_reference_compare(y, expected, m * s->n2, &max_abs_diff, &max_abs_ref);
            EXPECT(max_abs_ref > 0 && max_abs_diff <= relative_bound * max_abs_ref,
                   "%s, %d bits, K1 %lld, algorithm %d, m %lld: max_abs_diff %g, max_abs_ref %g", label, bits,
                   (long long)s->k1, algorithm, (long long)m, max_abs_diff, max_abs_ref);
            expect_traffic(shard, (qjit_tp_algorithm)algorithm, &weights.mlp, m);
            free(x);
            free(y);
            free(expected);
        }
        qjit_tp_mlp_destroy(shard);
    }
    mlp_reference_destroy(&reference);
    random_gptq_mlp_free(&weights);
}

/* ---- a communicator that is not the shard's ---- */

static void test_mismatched_communicator(qjit_context* context, const qjit_communicator* comm) {
    const shape* s = &shapes[0];
    random_gptq_mlp weights;
    qjit_tp_mlp* other_rank = NULL;
    qjit_tp_mlp* other_world = NULL;
    float* x = random_floats(s->k1, 5);
    float* y = nan_filled(s->n2);

    if (random_gptq_mlp_init(&weights, QJIT_MLP_SWIGLU, s->k1, s->n1, s->n2, 4, s->group_size, s->act_order,
                             s->scale_dtype, 3) != 0) {
        EXPECT(0, "out of memory");
        return;
    }
    /* Refused before any collective, on every rank alike, so no rank is left waiting. */
    if (world > 1) {
        EXPECT_OK(qjit_tp_mlp_create_from_gptq(context, &weights.mlp, (rank + 1) % world, world, QJIT_TP_AWARE,
                                               &other_rank));
        EXPECT(qjit_tp_mlp_forward(other_rank, comm, x, 1, y, NULL) == QJIT_ERROR_INVALID_ARGUMENT,
               "the shard of rank %d through rank %d's communicator", (rank + 1) % world, rank);
    }
    EXPECT_OK(qjit_tp_mlp_create_from_gptq(context, &weights.mlp, rank, 2 * world, QJIT_TP_NAIVE, &other_world));
    EXPECT(qjit_tp_mlp_forward(other_world, comm, x, 1, y, NULL) == QJIT_ERROR_INVALID_ARGUMENT,
           "a shard of world %d through a communicator of world %d", 2 * world, world);
    qjit_tp_mlp_destroy(other_rank);
    qjit_tp_mlp_destroy(other_world);
    random_gptq_mlp_free(&weights);
    free(x);
    free(y);
}

/* ---- save and load ---- */

static int info_equal(const qjit_tp_mlp_info* a, const qjit_tp_mlp_info* b) { /* field by field: padding */
    return a->kind == b->kind && a->algorithm == b->algorithm && a->rank == b->rank &&
           a->world_size == b->world_size && a->k1 == b->k1 && a->n1 == b->n1 && a->n2 == b->n2 &&
           a->shard_n1 == b->shard_n1 && a->act_order == b->act_order && a->weight_bytes == b->weight_bytes;
}

static void test_save_load(qjit_context* context, const qjit_communicator* comm, const char* scratch_dir) {
    const shape* s = &shapes[0];
    const int64_t m = 5;
    random_gptq_mlp weights;
    qjit_tp_mlp* saved = NULL;
    qjit_tp_mlp* loaded = NULL;
    qjit_tp_mlp_info saved_info, loaded_info;
    char path[4096];
    float* x = random_floats(m * s->k1, 11);
    float* y_saved = nan_filled(m * s->n2);
    float* y_loaded = nan_filled(m * s->n2);

    snprintf(path, sizeof(path), "%s/tp_mpi_test.rank%d-of-%d.qjit", scratch_dir, rank, world);
    if (random_gptq_mlp_init(&weights, QJIT_MLP_SWIGLU, s->k1, s->n1, s->n2, 3, s->group_size, s->act_order,
                             s->scale_dtype, 4) != 0) {
        EXPECT(0, "out of memory");
        return;
    }
    EXPECT_OK(qjit_tp_mlp_create_from_gptq(context, &weights.mlp, rank, world, QJIT_TP_NAIVE, &saved));
    EXPECT_OK(qjit_tp_mlp_save(saved, path));
    EXPECT_OK(qjit_tp_mlp_load(context, path, &loaded));
    if (saved && loaded) {
        EXPECT_OK(qjit_tp_mlp_get_info(saved, &saved_info));
        EXPECT_OK(qjit_tp_mlp_get_info(loaded, &loaded_info));
        EXPECT(info_equal(&saved_info, &loaded_info), "the loaded shard's info differs");
        EXPECT_OK(qjit_tp_mlp_forward(saved, comm, x, m, y_saved, NULL));
        EXPECT_OK(qjit_tp_mlp_forward(loaded, comm, x, m, y_loaded, NULL));
        /* The same shards in the same context: the same kernels, the same y to the bit. */
        EXPECT(memcmp(y_saved, y_loaded, sizeof(float) * (size_t)(m * s->n2)) == 0, "the loaded shard's y differs");
    }
    remove(path);
    qjit_tp_mlp_destroy(saved);
    qjit_tp_mlp_destroy(loaded);
    random_gptq_mlp_free(&weights);
    free(x);
    free(y_saved);
    free(y_loaded);
}

/* ---- a failing collective ---- */

/* Rank 0 of a world of 2, alone (a world of 1 calls no collective at all): its all-gather copies this rank's part into both places (the
 * values do not matter here) and fails when told to; its all-reduce fails when told to. */
typedef struct fake_world {
    int fail_all_gather, fail_all_reduce;
    int calls;
} fake_world;

enum { injected_code = 42 };

static int fake_all_reduce(void* user, float* buffer, int64_t count) {
    fake_world* fake = (fake_world*)user;
    (void)buffer;
    (void)count;
    ++fake->calls;
    return fake->fail_all_reduce ? injected_code : 0;
}

static int fake_all_gather(void* user, const float* send, float* receive, int64_t count) {
    fake_world* fake = (fake_world*)user;
    ++fake->calls;
    if (fake->fail_all_gather) return injected_code;
    memcpy(receive, send, sizeof(float) * (size_t)count);
    memcpy(receive + count, send, sizeof(float) * (size_t)count);
    return 0;
}

static const char* fake_error_string(void* user, int code) {
    (void)user;
    return code == injected_code ? "injected failure" : "unknown code";
}

static void expect_communication_failure(qjit_tp_mlp* shard, fake_world* fake, const shape* s, const char* what) {
    const int64_t m = 2;
    const qjit_communicator comm = {0, 2, fake, fake_all_reduce, fake_all_gather, fake_error_string};
    float* x = random_floats(m * s->k1, 9);
    float* y = random_floats(m * s->n2, 10); /* finite: each must become NaN */
    int64_t i, finite = 0;
    fake->calls = 0;
    EXPECT(qjit_tp_mlp_forward(shard, &comm, x, m, y, NULL) == QJIT_ERROR_COMMUNICATION, "%s", what);
    EXPECT(strstr(qjit_last_error(), "injected failure") != NULL, "%s: the error names the communicator's: %s", what,
           qjit_last_error());
    EXPECT(fake->calls > 0, "%s: no collective was called", what);
    for (i = 0; i < m * s->n2; ++i) finite += !isnan(y[i]);
    EXPECT(finite == 0, "%s: %lld of y are not NaN", what, (long long)finite);
    free(x);
    free(y);
}

static void test_failing_collective(qjit_context* context) {
    const shape* s = &shapes[0];
    random_gptq_mlp weights;
    qjit_tp_mlp* naive = NULL;
    qjit_tp_mlp* aware = NULL;
    fake_world fake = {0, 0, 0};

    if (random_gptq_mlp_init(&weights, QJIT_MLP_SWIGLU, s->k1, s->n1, s->n2, 4, s->group_size, s->act_order,
                             s->scale_dtype, 6) != 0) {
        EXPECT(0, "out of memory");
        return;
    }
    EXPECT_OK(qjit_tp_mlp_create_from_gptq(context, &weights.mlp, 0, 2, QJIT_TP_NAIVE, &naive));
    EXPECT_OK(qjit_tp_mlp_create_from_gptq(context, &weights.mlp, 0, 2, QJIT_TP_AWARE, &aware));
    if (naive && aware) {
        fake.fail_all_gather = 1;
        expect_communication_failure(naive, &fake, s, "naive, the all-gather failing");
        fake.fail_all_gather = 0;
        fake.fail_all_reduce = 1;
        expect_communication_failure(naive, &fake, s, "naive, the all-reduce failing");
        expect_communication_failure(aware, &fake, s, "TP-aware, the all-reduce failing");
    }
    qjit_tp_mlp_destroy(naive);
    qjit_tp_mlp_destroy(aware);
    random_gptq_mlp_free(&weights);
}

int main(int argc, char** argv) {
    qjit_communicator comm;
    qjit_context_options options;
    qjit_context* context = NULL;
    int all_failures = 0;
    size_t s, b;
    int kind;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc != 2) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -np N %s SCRATCH_DIR\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    if (qjit_mpi_communicator_create(MPI_COMM_WORLD, &comm) != QJIT_OK) {
        fprintf(stderr, "rank %d: qjit_mpi_communicator_create failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* One thread per rank (the ranks share the machine), untimed tilings, no tuning database. */
    qjit_context_options_init(&options);
    options.num_threads = 1;
    options.tuning_budget_ms = 0;
    options.tuning_db_path = "";
    options.activations = QJIT_ACTIVATIONS_F32;
    EXPECT_OK(qjit_context_create(&options, &context));

    if (context) {
        test_communicator(&comm);
        for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s)
            for (b = 0; b < sizeof(bit_widths) / sizeof(bit_widths[0]); ++b)
                for (kind = QJIT_MLP_SWIGLU; kind <= QJIT_MLP_GELU; ++kind)
                    test_against_reference(context, &comm, &shapes[s], bit_widths[b], (qjit_mlp_kind)kind);
        test_mismatched_communicator(context, &comm);
        test_save_load(context, &comm, argv[1]);
        test_failing_collective(context);
    }

    MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("tp_mpi_test: %d rank(s), %s\n", world, all_failures == 0 ? "all checks pass" : "checks failed");
    qjit_context_destroy(context);
    qjit_mpi_communicator_destroy(&comm);
    MPI_Finalize();
    return all_failures == 0 ? 0 : 1;
}
