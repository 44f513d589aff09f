// bench_moe: the grouped mixture-of-experts call (qjit_moe_forward) against one qjit_linear_forward
// per expert, each with its own gather of the expert's token rows and a scatter of its outputs
// back to token order, on the same layers, tokens and routing.
//
// Each case is 8 experts (random GPTQ weights) of one shape and format with 1-4 rows each, as
// decoding a batch with top-2 routing gives them: 10 tokens, 20 rows (counts 1, 2, 3, 4, 1, 2, 3,
// 4), every token under exactly 2 experts with gate weights. Shapes: Mixtral-8x7B's experts
// (4096x14336 and 14336x4096) and DeepSeekMoE-16B's small ones (2048x1408 and 1408x2048); formats
// q3g64 and q4g128. Both ways are timed cold (every expert's weights flushed from every cache
// before each call, as decoding a model larger than the caches sees them) and warm (back to
// back), interleaved call by call; the table gives medians over the repeats and separate/grouped.
//
//   bench_moe                    every case, 21 repeats per mode (about a minute)
//   bench_moe --quick            the DeepSeek shapes only, 11 repeats
//   bench_moe --repeats=N --threads=T --budget=MS
//
// --budget: the tuner's milliseconds per shape (default 0: the performance model's pick, untimed;
// no tuning database is read or written either way). Layers are tuned for 4 rows per forward.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "bench_common.hpp"
#include "qjit/qjit.h"
#include "runtime/cpu/cache_eviction.hpp"
#include "runtime/linear_layer.hpp"
#include "tools/random_gptq.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using qjit_bench::median;

using Shape = qjit_bench::ModelLayerShape;
// DeepSeekMoE-16B's and Mixtral-8x7B's expert layers (configs/models).
std::vector<Shape> expert_shapes() {
    return qjit_bench::joined({qjit_bench::model_layers("deepseek-moe-16b", "deepseek-moe-16b", "expert_"),
                               qjit_bench::model_layers("mixtral-8x7b", "mixtral-8x7b", "expert_")});
}
struct Format {
    int bits, group;
};
constexpr Format kFormats[] = {{3, 64}, {4, 128}};
constexpr int kExperts = 8;
constexpr int64_t kRowsPerExpert[kExperts] = {1, 2, 3, 4, 1, 2, 3, 4};
constexpr int kTopK = 2;
constexpr int64_t kTuningBatch = 4;

struct Options {
    bool quick = false;
    int repeats = 21;
    int threads = 0;
    double budget_ms = 0;
};

[[noreturn]] void die(const char* what, qjit_status status) {
    std::fprintf(stderr, "bench_moe: %s failed: %s: %s\n", what, qjit_status_string(status), qjit_last_error());
    std::exit(1);
}

void check(qjit_status status, const char* what) {
    if (status != QJIT_OK) die(what, status);
}

Options parse(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg(argv[i]);
        auto value = [&](std::string_view flag) { return arg.starts_with(flag) ? argv[i] + flag.size() : nullptr; };
        if (arg == "--quick") {
            options.quick = true;
            options.repeats = 11;
        } else if (const char* v = value("--repeats=")) {
            options.repeats = std::max(1, std::atoi(v));
        } else if (const char* v = value("--threads=")) {
            options.threads = std::max(0, std::atoi(v));
        } else if (const char* v = value("--budget=")) {
            options.budget_ms = std::max(0.0, std::atof(v));
        } else {
            std::fprintf(stderr, "usage: bench_moe [--quick] [--repeats=N] [--threads=T] [--budget=MS]\n");
            std::exit(arg == "--help" || arg == "-h" ? 0 : 2);
        }
    }
    return options;
}

// The routing of the module comment: expert e takes the next kRowsPerExpert[e] tokens, cyclically,
// so each token lands under exactly kTopK experts, never twice under one.
struct Routing {
    int64_t tokens = 0;
    std::vector<std::vector<int32_t>> rows;
    std::vector<std::vector<float>> weights;
};

Routing decoding_routing() {
    Routing routing;
    int64_t total = 0;
    for (const int64_t count : kRowsPerExpert) total += count;
    routing.tokens = total / kTopK;
    qjit_bench::Rng rng(7);
    int64_t next = 0;
    for (const int64_t count : kRowsPerExpert) {
        std::vector<int32_t> rows;
        std::vector<float> weights;
        for (int64_t i = 0; i < count; ++i) {
            rows.push_back(int32_t(next++ % routing.tokens));
            weights.push_back(rng.uniform(0.1f, 0.9f));
        }
        routing.rows.push_back(rows);
        routing.weights.push_back(weights);
    }
    return routing;
}

void evict_expert(const qjit_linear& layer) { qjit::evict_layer_from_caches(layer); }

// The baseline: per expert a gather of its token rows, a forward, and a weighted scatter-add.
struct SeparateCalls {
    std::vector<float> gathered, out;

    void run(const std::vector<qjit_linear*>& layers, const Routing& routing, const float* x, int64_t k, int64_t n,
             float* y) {
        std::fill(y, y + routing.tokens * n, 0.0f);
        for (size_t e = 0; e < layers.size(); ++e) {
            const std::vector<int32_t>& rows = routing.rows[e];
            const int64_t count = int64_t(rows.size());
            for (int64_t i = 0; i < count; ++i)
                std::copy(x + rows[size_t(i)] * k, x + (rows[size_t(i)] + 1) * k, gathered.data() + i * k);
            check(qjit_linear_forward(layers[e], gathered.data(), count, out.data()), "qjit_linear_forward");
            for (int64_t i = 0; i < count; ++i) {
                const float w = routing.weights[e][size_t(i)];
                float* target = y + rows[size_t(i)] * n;
                const float* source = out.data() + i * n;
                for (int64_t c = 0; c < n; ++c) target[c] += w * source[c];
            }
        }
    }
};

double micros_since(Clock::time_point start) {
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

struct Row {
    std::string shape, format, kernel;
    double separate_cold = 0, grouped_cold = 0, separate_warm = 0, grouped_warm = 0;
};

Row run_case(qjit_context* context, const Shape& shape, const Format& format, const Options& options) {
    const Routing routing = decoding_routing();
    std::vector<qjit_tools::GptqTensors> tensors(kExperts);
    std::vector<qjit_linear*> layers(kExperts);
    for (int e = 0; e < kExperts; ++e) {
        qjit_tools::random_gptq(shape.k, shape.n, format.bits, format.group, uint64_t(100 + e), &tensors[size_t(e)]);
        check(qjit_linear_create_from_gptq(context, shape.k, shape.n, &tensors[size_t(e)].view, &layers[size_t(e)]),
              "qjit_linear_create_from_gptq");
        tensors[size_t(e)] = {};  // the layer holds its own copy
    }
    std::vector<qjit_expert_rows> experts;
    for (int e = 0; e < kExperts; ++e)
        experts.push_back({layers[size_t(e)], routing.rows[size_t(e)].data(), routing.weights[size_t(e)].data(),
                           int64_t(routing.rows[size_t(e)].size())});

    const int64_t m = routing.tokens, k = shape.k, n = shape.n;
    std::vector<float> x(size_t(m * k)), y_grouped(size_t(m * n)), y_separate(size_t(m * n));
    qjit_bench::Rng rng(1);
    for (float& v : x) v = rng.uniform(-1.0f, 1.0f);
    SeparateCalls separate;
    separate.gathered.resize(size_t(4 * k));
    separate.out.resize(size_t(4 * n));

    auto grouped_call = [&] {
        check(qjit_moe_forward(context, experts.data(), kExperts, x.data(), m, y_grouped.data()), "qjit_moe_forward");
    };
    auto separate_call = [&] { separate.run(layers, routing, x.data(), k, n, y_separate.data()); };
    auto evict_all = [&] {
        for (qjit_linear* layer : layers) evict_expert(*layer);
    };
    // Warm-up, and a check that both ways agree.
    grouped_call();
    separate_call();
    double worst = 0, scale = 0;
    for (size_t i = 0; i < y_grouped.size(); ++i) {
        worst = std::max(worst, double(std::abs(y_grouped[i] - y_separate[i])));
        scale = std::max(scale, double(std::abs(y_separate[i])));
    }
    if (worst > 1e-4 * scale + 1e-6) {
        std::fprintf(stderr, "bench_moe: grouped and separate outputs differ by %g (largest output %g)\n", worst,
                     scale);
        std::exit(1);
    }

    std::vector<double> separate_cold, grouped_cold, separate_warm, grouped_warm;
    for (int r = 0; r < options.repeats; ++r) {
        for (const bool cold : {true, false}) {
            // Alternate which way goes first, so neither always follows the other.
            for (int turn = 0; turn < 2; ++turn) {
                const bool grouped = (turn + r) % 2 == 0;
                if (cold) evict_all();
                const auto start = Clock::now();
                grouped ? grouped_call() : separate_call();
                const double us = micros_since(start);
                (grouped ? (cold ? grouped_cold : grouped_warm) : (cold ? separate_cold : separate_warm)).push_back(us);
            }
        }
    }
    Row row;
    row.shape = shape.model + " " + shape.layer + " " + std::to_string(k) + "x" + std::to_string(n);
    row.format = "q" + std::to_string(format.bits) + "g" + std::to_string(format.group);
    row.kernel = layers[0]->description.substr(0, layers[0]->description.find(' '));
    row.separate_cold = median(separate_cold);
    row.grouped_cold = median(grouped_cold);
    row.separate_warm = median(separate_warm);
    row.grouped_warm = median(grouped_warm);
    for (qjit_linear* layer : layers) qjit_linear_destroy(layer);
    return row;
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = parse(argc, argv);
    qjit_context_options context_options;
    qjit_context_options_init(&context_options);
    context_options.num_threads = options.threads;
    context_options.tuning_db_path = "";
    context_options.tuning_budget_ms = options.budget_ms;
    context_options.tuning_batch = kTuningBatch;
    qjit_context* context = nullptr;
    check(qjit_context_create(&context_options, &context), "qjit_context_create");
    const char* machine = nullptr;
    int threads = 0;
    check(qjit_context_describe(context, &machine), "qjit_context_describe");
    check(qjit_context_num_threads(context, &threads), "qjit_context_num_threads");
    std::printf("qjit %s: %s\n", qjit_version(), machine);
    std::printf("%d experts, rows per expert 1,2,3,4,1,2,3,4 (%d tokens, top-%d), %d threads, %d repeats, "
                "tuning budget %.0f ms for %lld rows\n\n",
                kExperts, int(decoding_routing().tokens), kTopK, threads, options.repeats, options.budget_ms,
                (long long)kTuningBatch);
    std::printf("| shape | format | kernel | separate cold us | grouped cold us | cold ratio | separate warm us | "
                "grouped warm us | warm ratio |\n|---|---|---|---|---|---|---|---|---|\n");
    std::fflush(stdout);
    const std::vector<Shape> shapes = expert_shapes();
    for (const Shape& shape : shapes) {
        if (options.quick && shape.model != "deepseek-moe-16b") continue;
        for (const Format& format : kFormats) {
            const Row row = run_case(context, shape, format, options);
            std::printf("| %s | %s | %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", row.shape.c_str(),
                        row.format.c_str(), row.kernel.c_str(), row.separate_cold, row.grouped_cold,
                        row.separate_cold / row.grouped_cold, row.separate_warm, row.grouped_warm,
                        row.separate_warm / row.grouped_warm);
            std::fflush(stdout);
        }
    }
    qjit_context_destroy(context);
    return 0;
}
