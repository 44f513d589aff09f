// qjit-tune: times qjit's kernels on LLM layer shapes and prints a table.
//
// With no arguments it runs the embedded default: the Llama-2-7B linear layers at 4-bit, group
// 128, batch 1; --model configs/models/NAME.yaml times another model's layers. Until the timed
// tuner lands it times the kernel each layer gets from the tiling heuristic.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "qjit/qjit.h"
#include "tuner/model_config.hpp"

namespace {

using qjit::LinearShape;

// The embedded default, Llama-2-7B (as configs/models/llama-2-7b.yaml): hidden 4096, MLP 11008.
const qjit::ModelConfig kLlama2_7b = {"llama-2-7b",
                                      32,
                                      {{"q_proj", 4096, 4096},
                                       {"k_proj", 4096, 4096},
                                       {"v_proj", 4096, 4096},
                                       {"o_proj", 4096, 4096},
                                       {"gate_proj", 4096, 11008},
                                       {"up_proj", 4096, 11008},
                                       {"down_proj", 11008, 4096}}};

struct Options {
    int bits = 4;
    int group = 128;
    bool symmetric = false;
    int64_t batch = 1;
    int threads = 0;
    int repeats = 20;
    std::string activations = "auto";
    std::string tiling;
    std::string model;  // empty: the embedded Llama-2-7B
};

[[noreturn]] void die(const char* what, qjit_status status) {
    std::fprintf(stderr, "qjit-tune: %s failed: %s: %s\n", what, qjit_status_string(status), qjit_last_error());
    std::exit(1);
}

void check(qjit_status status, const char* what) {
    if (status != QJIT_OK) die(what, status);
}

std::vector<float> random_values(size_t count, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> values(count);
    for (float& v : values) v = normal(rng);
    return values;
}

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

void time_shape(qjit_context* context, const LinearShape& shape, const Options& options) {
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.bits = options.bits;
    config.group_size = options.group;
    config.symmetric = options.symmetric;
    qjit_linear* layer = nullptr;
    {
        const std::vector<float> weights = random_values(size_t(shape.k * shape.n), 1);
        check(qjit_linear_create_from_f32(context, &config, shape.k, shape.n, weights.data(), QJIT_LAYOUT_K_BY_N,
                                          &layer),
              "qjit_linear_create_from_f32");
    }
    const std::vector<float> x = random_values(size_t(options.batch * shape.k), 2);
    std::vector<float> y(size_t(options.batch * shape.n));
    check(qjit_linear_forward(layer, x.data(), options.batch, y.data()), "qjit_linear_forward");  // warm-up
    std::vector<double> seconds;
    for (int i = 0; i < options.repeats; ++i) {
        const auto start = std::chrono::steady_clock::now();
        check(qjit_linear_forward(layer, x.data(), options.batch, y.data()), "qjit_linear_forward");
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    qjit_linear_info info;
    const char* description = nullptr;
    check(qjit_linear_get_info(layer, &info), "qjit_linear_get_info");
    check(qjit_linear_describe(layer, &description), "qjit_linear_describe");
    const std::string kernel(description, std::string(description).find(' '));
    const double t = median(seconds);
    std::printf("%-28s %6lld x %-6lld %-44s %10.1f %8.2f\n", shape.name.c_str(), (long long)shape.k,
                (long long)shape.n, kernel.c_str(), t * 1e6, double(info.weight_bytes) / t * 1e-9);
    qjit_linear_destroy(layer);
}

}  // namespace

int main(int argc, char** argv) {
    Options options;
    CLI::App app{"qjit-tune: time qjit kernels on LLM layer shapes (default: Llama-2-7B, 4-bit, group 128)"};
    app.add_option("--model", options.model, "model config, e.g. configs/models/llama-2-70b.yaml")
        ->check(CLI::ExistingFile);
    app.add_option("--bits", options.bits, "weight bits: 2, 3, 4 or 8")->check(CLI::IsMember({2, 3, 4, 8}));
    app.add_option("--group", options.group, "group size: 16, 32, 64, 128, 256 or -1 (per column)");
    app.add_flag("--symmetric", options.symmetric, "symmetric quantization (zero point 2^(bits-1))");
    app.add_option("--batch", options.batch, "activation rows (m)")->check(CLI::PositiveNumber);
    app.add_option("--threads", options.threads, "threads (0: all cores)")->check(CLI::NonNegativeNumber);
    app.add_option("--repeats", options.repeats, "timed runs per shape (the median is shown)")
        ->check(CLI::PositiveNumber);
    app.add_option("--activations", options.activations, "activation path: auto, f32 (exact) or int8")
        ->check(CLI::IsMember({"auto", "f32", "int8"}));
    app.add_option("--tiling", options.tiling, "force a tiling, e.g. tu=4,mb=4,prefetch=8");
    CLI11_PARSE(app, argc, argv);

    qjit::ModelConfig model = kLlama2_7b;
    if (!options.model.empty()) {
        try {
            model = qjit::load_model_config(options.model);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "qjit-tune: %s\n", e.what());
            return 1;
        }
    }

    qjit_context_options context_options;
    qjit_context_options_init(&context_options);
    context_options.num_threads = options.threads;
    context_options.activations = options.activations == "f32"    ? QJIT_ACTIVATIONS_F32
                                  : options.activations == "int8" ? QJIT_ACTIVATIONS_INT8
                                                                  : QJIT_ACTIVATIONS_AUTO;
    if (!options.tiling.empty()) context_options.tiling = options.tiling.c_str();
    qjit_context* context = nullptr;
    check(qjit_context_create(&context_options, &context), "qjit_context_create");
    int threads = 0;
    check(qjit_context_num_threads(context, &threads), "qjit_context_num_threads");

    std::printf("qjit %s: %s layers, %d-bit, group %d, %s, batch %lld, %d threads, median of %d runs\n",
                qjit_version(), model.name.c_str(), options.bits, options.group,
                options.symmetric ? "symmetric" : "asymmetric",
                (long long)options.batch, threads, options.repeats);
    std::printf("%-28s %15s %-44s %10s %8s\n", "layer", "K x N", "kernel", "time_us", "GB/s");
    for (const LinearShape& shape : qjit::distinct_shapes(model.linear)) time_shape(context, shape, options);
    qjit_context_destroy(context);
    return 0;
}
