/* Quantize a random 4096 x 1024 fp32 matrix to 4-bit (group 128) and run one batch-1 forward. */
#include <qjit/qjit.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        qjit_status status_ = (call);                                                      \
        if (status_ != QJIT_OK) {                                                          \
            fprintf(stderr, "%s: %s: %s\n", #call, qjit_status_string(status_), qjit_last_error()); \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

int main(void) {
    enum { K = 4096, N = 1024 };
    float* w = malloc(sizeof(float) * K * N);
    float x[K], y[N];
    qjit_context* context = NULL;
    qjit_linear* layer = NULL;
    qjit_quant_config config;
    const char* description = NULL;
    int i;

    for (i = 0; i < K * N; ++i) w[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (i = 0; i < K; ++i) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;

    CHECK(qjit_context_create(NULL, &context));  /* default options: all cores */
    qjit_quant_config_init(&config);            /* 4-bit, group 128, asymmetric, fp16 scales */
    CHECK(qjit_linear_create_from_f32(context, &config, K, N, w, QJIT_LAYOUT_K_BY_N, &layer));
    free(w);                                     /* the layer keeps its own packed copy */
    CHECK(qjit_linear_forward(layer, x, 1, y)); /* y = x W */
    CHECK(qjit_linear_describe(layer, &description));
    printf("qjit %s: %s\ny[0] = %f\n", qjit_version(), description, y[0]);

    qjit_linear_destroy(layer);
    qjit_context_destroy(context);
    return 0;
}
