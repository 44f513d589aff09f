/* Open a GPTQ checkpoint directory, create every quantized linear layer and run one forward of
 * each on random activations. Usage: run_checkpoint DIR [ROWS]
 * Tiling comes from the tuning database ($QJIT_TUNING_DB or ~/.cache/qjit/tuning.yaml) when
 * `qjit-tune --checkpoint DIR` has filled it, else from a timed search at creation. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime in strict C99 */
#include <qjit/qjit.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        qjit_status status_ = (call);                                                               \
        if (status_ != QJIT_OK) {                                                                   \
            fprintf(stderr, "%s: %s: %s\n", #call, qjit_status_string(status_), qjit_last_error()); \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static const char* source_name(qjit_tiling_source source) {
    switch (source) {
        case QJIT_TILING_DATABASE: return "database";
        case QJIT_TILING_CONTEXT: return "context";
        case QJIT_TILING_SEARCHED: return "searched";
        case QJIT_TILING_MODEL: return "model";
        case QJIT_TILING_FORCED: return "forced";
        default: return "portable";
    }
}

int main(int argc, char** argv) {
    qjit_context_options options;
    qjit_context* context = NULL;
    qjit_checkpoint* checkpoint = NULL;
    int64_t count = 0, i, j, rows;
    double total_ms = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s CHECKPOINT_DIR [ROWS]\n", argv[0]);
        return 2;
    }
    rows = argc > 2 ? atoll(argv[2]) : 1;
    if (rows < 1) rows = 1;
    qjit_context_options_init(&options);
    options.tuning_batch = rows; /* tune (or look up) tilings for this many rows per forward */
    CHECK(qjit_context_create(&options, &context));
    CHECK(qjit_checkpoint_open(context, argv[1], &checkpoint));
    CHECK(qjit_checkpoint_num_layers(checkpoint, &count));

    for (i = 0; i < count; ++i) {
        qjit_checkpoint_layer info;
        qjit_linear* layer = NULL;
        qjit_linear_tuning tuning;
        float *x, *y;
        double start, created_ms, forward_ms;

        CHECK(qjit_checkpoint_get_layer(checkpoint, i, &info));
        start = now_ms();
        CHECK(qjit_checkpoint_create_layer(checkpoint, info.name, &layer));
        created_ms = now_ms() - start;
        total_ms += created_ms;
        CHECK(qjit_linear_get_tuning(layer, &tuning));

        x = malloc(sizeof(float) * (size_t)(rows * info.k));
        y = malloc(sizeof(float) * (size_t)(rows * info.n));
        for (j = 0; j < rows * info.k; ++j) x[j] = (float)rand() / (float)RAND_MAX - 0.5f;
        start = now_ms();
        CHECK(qjit_linear_forward(layer, x, rows, y));
        forward_ms = now_ms() - start;
        printf("%-40s %6lldx%-6lld %-16s tiling from %-8s created in %7.1f ms, forward of %lld rows %8.3f ms, y[0] = %g\n",
               info.name, (long long)info.k, (long long)info.n, info.format, source_name(tuning.source), created_ms,
               (long long)rows, forward_ms, y[0]);
        free(x);
        free(y);
        CHECK(qjit_linear_destroy(layer));
    }
    printf("%lld layers created in %.1f ms\n", (long long)count, total_ms);
    CHECK(qjit_checkpoint_close(checkpoint));
    CHECK(qjit_context_destroy(context));
    return 0;
}
