// bench_creation: how fast qjit_linear_create_from_gptq turns GPTQ tensors into a layer, as GB/s
// of checkpoint bytes (qweight + qzeros + scales + g_idx), next to a memory read probe with the
// same thread count measured in the same run.
//
// Each context has no tuning database and a tuning budget of 0, so no tuning is timed: what is
// timed is what a database hit costs (metadata import, tiling choice, packing, code emission).
// g_idx is always passed, as checkpoints hold it: row / 128 without act-order, a shuffle of that
// (fixed seed) with it.
//
//   bench_creation                 4096x11008 and 8192x28672, bits 2/3/4/8, g128, act-order off/on,
//                                  1 and 2 threads, 5 creations each (median)
//   bench_creation --repeats=N     N creations per row
//   bench_creation --quick         4096x11008 only
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "qjit/qjit.h"
#include "tools/bandwidth_probe.hpp"
#include "tools/random_gptq.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kGroup = 128;
constexpr int kProbeRepeats = 5;
constexpr size_t kProbeSweepBytes = size_t(256) << 20;

struct Shape {
    int64_t k, n;
};

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "bench_creation: %s failed: %s\n", what, qjit_last_error());
    std::exit(1);
}

qjit_context* context_with(int threads) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = threads;
    options.tuning_db_path = "";
    options.tuning_budget_ms = 0;
    qjit_context* context = nullptr;
    if (qjit_context_create(&options, &context) != QJIT_OK) die("qjit_context_create");
    return context;
}

// The group of every row: row / kGroup, shuffled (Fisher-Yates, fixed seed) for act-order.
std::vector<int32_t> group_index(int64_t k, bool act_order) {
    std::vector<int32_t> g_idx(static_cast<size_t>(k));
    for (int64_t row = 0; row < k; ++row) g_idx[size_t(row)] = int32_t(row / kGroup);
    if (act_order) {
        qjit_tools::Rng rng(1234);
        for (size_t i = g_idx.size() - 1; i > 0; --i) std::swap(g_idx[i], g_idx[rng.next() % (i + 1)]);
    }
    return g_idx;
}

int64_t checkpoint_bytes(const qjit_tools::GptqTensors& t, size_t g_idx_rows) {
    return int64_t(t.qweight.size() * sizeof(int32_t) + t.qzeros.size() * sizeof(int32_t) +
                   t.scales.size() * sizeof(uint16_t) + g_idx_rows * sizeof(int32_t));
}

double create_ms(qjit_context* context, const Shape& shape, const qjit_gptq_tensors& tensors) {
    qjit_linear* layer = nullptr;
    const auto start = Clock::now();
    if (qjit_linear_create_from_gptq(context, shape.k, shape.n, &tensors, &layer) != QJIT_OK)
        die("qjit_linear_create_from_gptq");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    qjit_linear_destroy(layer);
    return ms;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int repeats = 5;
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--repeats=", 10) == 0) repeats = std::max(1, std::atoi(argv[i] + 10));
        else if (std::strcmp(argv[i], "--quick") == 0) quick = true;
        else {
            std::fprintf(stderr, "usage: bench_creation [--repeats=N] [--quick]\n");
            return 2;
        }
    }
    std::vector<Shape> shapes = {{4096, 11008}};
    if (!quick) shapes.push_back({8192, 28672});
    const int thread_counts[] = {1, 2};
    qjit_context* contexts[] = {context_with(1), context_with(2)};
    qjit_tools::BandwidthProbe probe;

    std::printf("| shape | bits | act-order | threads | create ms | GB/s | probe GB/s | fraction of probe |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    for (const Shape& shape : shapes)
        for (int bits : {2, 3, 4, 8}) {
            qjit_tools::GptqTensors tensors;
            qjit_tools::random_gptq(shape.k, shape.n, bits, kGroup, uint64_t(shape.k * 31 + shape.n + bits), &tensors);
            for (bool act_order : {false, true}) {
                const std::vector<int32_t> g_idx = group_index(shape.k, act_order);
                qjit_gptq_tensors view = tensors.view;
                view.g_idx = g_idx.data();
                const int64_t bytes = checkpoint_bytes(tensors, g_idx.size());
                for (int t = 0; t < 2; ++t) {
                    std::vector<double> ms;
                    for (int r = 0; r < repeats; ++r) ms.push_back(create_ms(contexts[t], shape, view));
                    const double probe_gbps = probe.median(thread_counts[t], kProbeRepeats, kProbeSweepBytes);
                    const double gbps = double(bytes) / (median(ms) * 1e6);
                    std::printf("| %lldx%lld | %d | %s | %d | %.1f | %.2f | %.2f | %.3f |\n", (long long)shape.k,
                                (long long)shape.n, bits, act_order ? "yes" : "no", thread_counts[t], median(ms), gbps,
                                probe_gbps, gbps / probe_gbps);
                    std::fflush(stdout);
                }
            }
        }
    for (qjit_context* c : contexts) qjit_context_destroy(c);
    return 0;
}
