// bench_creation: how fast qjit turns GPTQ tensors into a layer, as GB/s of checkpoint bytes
// (qweight + qzeros + scales + g_idx), next to two bounds measured in the same run with the same
// thread count: a memory read probe, and the copy of the layer's qweight bytes into new pages
// (huge-page hinted, as the library allocates packed codes). Creation writes a new buffer, and
// the first touch of each new page costs a fault and a zero-fill in the kernel (on a VM, more than
// the copy itself): the fresh copy is the floor of any creation; the read probe is what the
// project's target is stated against. Created layers are kept until their row is done, as a
// model load keeps them, so each creation gets new pages too.
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
//   bench_creation --checkpoint=DIR [--threads=T]
//                                  every layer of a checkpoint (e.g. one qjit-synthetic-checkpoint
//                                  wrote): a first pass tunes it into a scratch database (budget
//                                  30 ms a shape), then a second context on that database creates
//                                  every layer from hits; the second pass's wall time is reported
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "bench_common.hpp"
#include "qjit/qjit.h"
#include "tools/bandwidth_probe.hpp"
#include "tools/random_gptq.hpp"

namespace {

using qjit_bench::median;

using Clock = std::chrono::steady_clock;

constexpr int kGroup = 128;

struct Shape {
    int64_t k, n;
};

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "bench_creation: %s failed: %s\n", what, qjit_last_error());
    std::exit(1);
}

// No database and no timing unless given one and a budget.
qjit_context* context_with(int threads, const char* db = "", double budget_ms = 0) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = threads;
    options.tuning_db_path = db;
    options.tuning_budget_ms = budget_ms;
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

// Creates the layer and keeps it in `kept`: as in loading a model, every creation gets new
// memory (a layer destroyed before the next creation would hand its pages back warm).
double create_ms(qjit_context* context, const Shape& shape, const qjit_gptq_tensors& tensors,
                 std::vector<qjit_linear*>* kept) {
    qjit_linear* layer = nullptr;
    const auto start = Clock::now();
    if (qjit_linear_create_from_gptq(context, shape.k, shape.n, &tensors, &layer) != QJIT_OK)
        die("qjit_linear_create_from_gptq");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    kept->push_back(layer);
    return ms;
}

// Copies `bytes` of `source` into new pages (an anonymous mapping, huge-page hinted as the
// library's packed codes are) on `threads` threads, contiguous slices, and unmaps them: the
// milliseconds from the mapping to the last thread's end.
double fresh_copy_ms(const void* source, size_t bytes, int threads) {
    const auto start = Clock::now();
    void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) die("mmap");
    madvise(mapping, bytes, MADV_HUGEPAGE);
    auto* target = static_cast<char*>(mapping);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
            const size_t begin = bytes * size_t(t) / size_t(threads), end = bytes * size_t(t + 1) / size_t(threads);
            std::memcpy(target + begin, static_cast<const char*>(source) + begin, end - begin);
        });
    for (std::thread& worker : workers) worker.join();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    munmap(mapping, bytes);
    return ms;
}

}  // namespace

// Creates every layer of the checkpoint in `context`; returns the wall milliseconds, and the
// checkpoint bytes, layer count and how many tilings came from the database.
struct CheckpointPass {
    double ms = 0;
    int64_t bytes = 0, layers = 0, database_hits = 0;
};

CheckpointPass create_every_layer(qjit_context* context, const std::string& directory) {
    CheckpointPass pass;
    const auto start = Clock::now();
    qjit_checkpoint* checkpoint = nullptr;
    if (qjit_checkpoint_open(context, directory.c_str(), &checkpoint) != QJIT_OK) die("qjit_checkpoint_open");
    if (qjit_checkpoint_num_layers(checkpoint, &pass.layers) != QJIT_OK) die("qjit_checkpoint_num_layers");
    std::vector<qjit_linear*> layers;  // kept, as a model keeps them: every layer gets its own new memory
    for (int64_t i = 0; i < pass.layers; ++i) {
        qjit_checkpoint_layer info;
        qjit_linear* layer = nullptr;
        qjit_linear_tuning tuning;
        if (qjit_checkpoint_get_layer(checkpoint, i, &info) != QJIT_OK) die("qjit_checkpoint_get_layer");
        if (qjit_checkpoint_create_layer(checkpoint, info.name, &layer) != QJIT_OK) die("qjit_checkpoint_create_layer");
        if (qjit_linear_get_tuning(layer, &tuning) != QJIT_OK) die("qjit_linear_get_tuning");
        pass.bytes += info.checkpoint_bytes;
        pass.database_hits += tuning.source == QJIT_TILING_DATABASE || tuning.source == QJIT_TILING_CONTEXT;
        layers.push_back(layer);
    }
    qjit_checkpoint_close(checkpoint);
    pass.ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    for (qjit_linear* layer : layers) qjit_linear_destroy(layer);
    return pass;
}

int bench_checkpoint(const std::string& directory, int threads) {
    const std::string db = (std::filesystem::temp_directory_path() / "bench_creation_tuning.yaml").string();
    std::filesystem::remove(db);
    qjit_context* tuning = context_with(threads, db.c_str(), 30);
    const CheckpointPass first = create_every_layer(tuning, directory);
    qjit_context_destroy(tuning);
    qjit_context* warm = context_with(threads, db.c_str(), 30);
    const CheckpointPass second = create_every_layer(warm, directory);
    qjit_context_destroy(warm);
    std::filesystem::remove(db);
    qjit_tools::BandwidthProbe probe;
    const double probe_gbps = probe.peak(threads);
    const double gbps = double(second.bytes) / (second.ms * 1e6);
    std::printf("checkpoint %s: %lld layers, %.2f GB, %d threads\n", directory.c_str(), (long long)second.layers,
                double(second.bytes) * 1e-9, threads);
    std::printf("first pass (tuning a scratch database, 30 ms a shape): %.0f ms\n", first.ms);
    std::printf("second pass (warm database: %lld of %lld tilings from it): %.0f ms, %.2f GB/s, %.3f of the read probe "
                "(%.1f GB/s)\n", (long long)second.database_hits, (long long)second.layers, second.ms, gbps,
                gbps / probe_gbps, probe_gbps);
    return 0;
}

int main(int argc, char** argv) {
    int repeats = 5, threads = 2;
    bool quick = false;
    std::string checkpoint;
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--repeats=", 10) == 0) repeats = std::max(1, std::atoi(argv[i] + 10));
        else if (std::strcmp(argv[i], "--quick") == 0) quick = true;
        else if (std::strncmp(argv[i], "--checkpoint=", 13) == 0) checkpoint = argv[i] + 13;
        else if (std::strncmp(argv[i], "--threads=", 10) == 0) threads = std::max(1, std::atoi(argv[i] + 10));
        else {
            std::fprintf(stderr, "usage: bench_creation [--repeats=N] [--quick] | --checkpoint=DIR [--threads=T]\n");
            return 2;
        }
    }
    if (!checkpoint.empty()) return bench_checkpoint(checkpoint, threads);
    std::vector<Shape> shapes = {{4096, 11008}};
    if (!quick) shapes.push_back({8192, 28672});
    const int thread_counts[] = {1, 2};
    qjit_context* contexts[] = {context_with(1), context_with(2)};
    qjit_tools::BandwidthProbe probe;

    std::printf("| shape | bits | act-order | threads | create ms | GB/s | read probe GB/s | fraction of read probe "
                "| fresh copy ms | fraction of fresh copy |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
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
                    std::vector<double> ms, copy_ms;
                    std::vector<qjit_linear*> kept;
                    for (int r = 0; r < repeats; ++r) {
                        ms.push_back(create_ms(contexts[t], shape, view, &kept));
                        copy_ms.push_back(fresh_copy_ms(tensors.qweight.data(), tensors.qweight.size() * sizeof(int32_t),
                                                        thread_counts[t]));
                    }
                    for (qjit_linear* layer : kept) qjit_linear_destroy(layer);
                    const double probe_gbps = probe.peak(thread_counts[t]);
                    const double gbps = double(bytes) / (median(ms) * 1e6);
                    std::printf("| %lldx%lld | %d | %s | %d | %.1f | %.2f | %.2f | %.3f | %.1f | %.2f |\n",
                                (long long)shape.k, (long long)shape.n, bits, act_order ? "yes" : "no", thread_counts[t],
                                median(ms), gbps, probe_gbps, gbps / probe_gbps, median(copy_ms),
                                median(copy_ms) / median(ms));
                    std::fflush(stdout);
                }
            }
        }
    for (qjit_context* c : contexts) qjit_context_destroy(c);
    return 0;
}
