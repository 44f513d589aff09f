// The throwaway timing program behind the "GEMV in cache" and "cold tilings" figures of this
// page: layers made by qjit_linear_create_from_gguf from random blocks of each type, timed
// back to back (an L2-resident layer: the kernels' compute), or each call after 96 MiB of other
// data were read (COLD=1), or with the library's own cold timing (FLUSH=1: qjit_linear_benchmark,
// the weights flushed with clflushopt). Build from the repository root after a build into build/:
//   g++ -O2 -std=c++20 -Iinclude -I. hot_gemv.cpp build/tools/libqjit_tools.a -Lbuild -lqjit \
//       -Wl,-rpath,$PWD/build -o hot_gemv
//   ./hot_gemv 512 512 "tu=1,mb=1,prefetch=0,ku=1,ksplit=1"      # K N [forced tiling]
//   THREADS=2 COLD=1 TYPES=Q4_K ./hot_gemv 2048 8192 "tu=8,mb=2,prefetch=0,ku=1,ksplit=1"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>
#include "qjit/qjit.h"
#include "tools/random_gguf.hpp"
#include "tools/random_gptq.hpp"
int main(int argc, char** argv) {
    const char* only = getenv("TYPES");
    int64_t k = atoi(argv[1]), n = atoi(argv[2]);
    const char* forced = argc > 3 ? argv[3] : nullptr;
    struct T { const char* name; qjit_ggml_type t; } types[] = {{"Q4_0", QJIT_GGML_Q4_0}, {"Q5_0", QJIT_GGML_Q5_0}, {"Q8_0", QJIT_GGML_Q8_0}, {"Q4_K", QJIT_GGML_Q4_K}, {"Q6_K", QJIT_GGML_Q6_K}};
    for (auto& t : types) {
        if (k % qjit_tools::ggml_block_shape(t.t).values) continue;
        if (only && !strstr(only, t.name)) continue;
        qjit_tools::Rng rng(1);
        auto bytes = qjit_tools::random_gguf_tensor(t.t, k, n, 1, [&] { return qjit_tools::benchmark_half(rng.next()); });
        qjit_context_options o; qjit_context_options_init(&o); o.num_threads = getenv("THREADS") ? atoi(getenv("THREADS")) : 1; o.tuning_db_path = ""; o.activations = QJIT_ACTIVATIONS_INT8;
        if (forced) o.tiling = forced;
        qjit_context* c; qjit_context_create(&o, &c);
        qjit_linear* l; if (qjit_linear_create_from_gguf(c, t.t, bytes.data(), bytes.size(), k, n, &l) != QJIT_OK) { printf("%s: %s\n", t.name, qjit_last_error()); continue; }
        qjit_linear_tuning tu; qjit_linear_get_tuning(l, &tu);
        std::vector<float> x(k, 0.3f), y(n);
        for (int i = 0; i < 200; ++i) qjit_linear_forward(l, x.data(), 1, y.data());
        std::vector<double> ts;
        static std::vector<char> junk(size_t(96) << 20, 1);
        const bool cold = getenv("COLD") != nullptr;
        for (int r = 0; r < 15; ++r) {
            long sum = 0;
            if (cold) for (size_t j = 0; j < junk.size(); j += 64) sum += junk[j]++;
            auto s = std::chrono::steady_clock::now();
            const int calls = cold ? 1 : 200;
            for (int i = 0; i < calls; ++i) qjit_linear_forward(l, x.data(), 1, y.data());
            ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count() / calls);
            if (sum == 12345) printf(" ");
        }
        std::sort(ts.begin(), ts.end());
        if (getenv("FLUSH")) { double us = 0; qjit_linear_benchmark(l, 1, 15, 1, &us); ts.assign(15, us * 1e-6); }
        double bytes_n = double(bytes.size());
        printf("%s %s: %.2f us, %.1f GB/s (file bytes), %.2f ns per 32x16 block\n", t.name, tu.tiling, ts[7] * 1e6, bytes_n / ts[7] / 1e9, ts[7] * 1e9 / (k / 32.0 * n / 16.0));
        qjit_linear_destroy(l); qjit_context_destroy(c);
    }
}
