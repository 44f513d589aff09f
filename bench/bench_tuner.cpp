// bench_tuner: how good the budgeted tuner's choice is, and what tuning and a database hit cost.
//
// For each shape: a layer tuned within the default budget, a layer tuned exhaustively (every
// tiling the registers allow, no pruning), and a layer created from a database that holds the
// shape. The two tuned layers are then timed cold in alternation (rounds of
// qjit_linear_benchmark, median of the rounds), so that drift in the machine's speed hits both.
//
//   bench_tuner                 Llama-2-7B's three shapes at batch 1, its MLP at batch 16, and
//                               Llama-2-70B's two MLP shapes at batch 1 and 16 (4-bit g128)
//   bench_tuner --budget=MS     the budget of the tuned layer (default: the library's, 300 ms)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench_common.hpp"
#include "qjit/qjit.h"
#include "tools/random_gptq.hpp"

namespace {

using qjit_bench::median;

using Clock = std::chrono::steady_clock;

struct Shape {
    int64_t k, n, batch;
};
constexpr Shape kShapes[] = {{4096, 4096, 1},   {4096, 11008, 1},   {11008, 4096, 1},  {4096, 11008, 16},
                             {8192, 28672, 1},  {8192, 28672, 16},  {28672, 8192, 1}, {28672, 8192, 16}};
constexpr int kRounds = 7;
constexpr int kCallsPerRound = 9;

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "bench_tuner: %s failed: %s\n", what, qjit_last_error());
    std::exit(1);
}

qjit_context* context_for(int64_t batch, qjit_tuning_mode mode, double budget_ms, const char* db) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.tuning_db_path = db;
    options.tuning_mode = mode;
    options.tuning_budget_ms = budget_ms;
    options.tuning_batch = batch;
    qjit_context* context = nullptr;
    if (qjit_context_create(&options, &context) != QJIT_OK) die("qjit_context_create");
    return context;
}

struct Made {
    qjit_linear* layer = nullptr;
    qjit_linear_tuning tuning{};
    double create_ms = 0;
};

Made make(qjit_context* context, const Shape& shape, const qjit_tools::GptqTensors& tensors) {
    Made made;
    const auto start = Clock::now();
    if (qjit_linear_create_from_gptq(context, shape.k, shape.n, &tensors.view, &made.layer) != QJIT_OK)
        die("qjit_linear_create_from_gptq");
    made.create_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (qjit_linear_get_tuning(made.layer, &made.tuning) != QJIT_OK) die("qjit_linear_get_tuning");
    return made;
}

}  // namespace

int main(int argc, char** argv) {
    double budget_ms = -1;
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--budget=", 9) == 0) budget_ms = std::atof(argv[i] + 9);
        else {
            std::fprintf(stderr, "usage: bench_tuner [--budget=MS]\n");
            return 2;
        }
    }
    const std::string db = (std::filesystem::temp_directory_path() / ("bench_tuner-" + std::to_string(getpid()) + ".yaml")).string();
    if (budget_ms >= 0) std::printf("tuned within a budget of %.0f ms\n\n", budget_ms);
    else std::printf("tuned within the library's budget ($QJIT_TUNING_BUDGET_MS, else 300 ms)\n\n");
    std::printf("| shape | m | tuned tiling | timed | tuning ms | exhaustive tiling | timed | exhaustive ms | tuned / exhaustive time | on a hit: tiling lookup + code emission ms (whole creation incl. GPTQ import and packing) |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Shape& shape : kShapes) {
        qjit_tools::GptqTensors tensors;
        qjit_tools::random_gptq(shape.k, shape.n, 4, 128, uint64_t(shape.k + shape.n), &tensors);
        qjit_context* tuned_context = context_for(shape.batch, QJIT_TUNING_RETUNE, budget_ms, db.c_str());
        qjit_context* exhaustive_context = context_for(shape.batch, QJIT_TUNING_EXHAUSTIVE, 0, "");
        qjit_context* hit_context = context_for(shape.batch, QJIT_TUNING_DEFAULT, budget_ms, db.c_str());
        const Made tuned = make(tuned_context, shape, tensors);
        const Made exhaustive = make(exhaustive_context, shape, tensors);
        const Made hit = make(hit_context, shape, tensors);
        if (hit.tuning.source != QJIT_TILING_DATABASE) std::fprintf(stderr, "bench_tuner: expected a database hit\n");

        std::vector<double> tuned_us, exhaustive_us;
        for (int round = 0; round < kRounds; ++round) {
            double us = 0;
            if (qjit_linear_benchmark(tuned.layer, shape.batch, kCallsPerRound, 1, &us) != QJIT_OK) die("benchmark");
            tuned_us.push_back(us);
            if (qjit_linear_benchmark(exhaustive.layer, shape.batch, kCallsPerRound, 1, &us) != QJIT_OK) die("benchmark");
            exhaustive_us.push_back(us);
        }
        std::printf("| %lldx%lld | %lld | %s | %d/%d | %.0f | %s | %d/%d | %.0f | %.3f (%.1f / %.1f us) | %.2f + %.2f (%.0f) |\n",
                    (long long)shape.k, (long long)shape.n, (long long)shape.batch, tuned.tuning.tiling,
                    tuned.tuning.candidates_timed, tuned.tuning.candidates_ranked, tuned.tuning.tuning_ms,
                    exhaustive.tuning.tiling, exhaustive.tuning.candidates_timed, exhaustive.tuning.candidates_ranked,
                    exhaustive.tuning.tuning_ms, median(tuned_us) / median(exhaustive_us), median(tuned_us),
                    median(exhaustive_us), hit.tuning.tuning_ms, hit.tuning.kernel_ms, hit.create_ms);
        std::fflush(stdout);
        for (const Made* m : {&tuned, &exhaustive, &hit}) qjit_linear_destroy(m->layer);
        for (qjit_context* c : {tuned_context, exhaustive_context, hit_context}) qjit_context_destroy(c);
    }
    std::filesystem::remove(db);
    std::filesystem::remove(db + ".lock");
    return 0;
}
