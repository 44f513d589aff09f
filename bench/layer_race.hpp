// What the benchmarks that race a few layers of one shape share (bench_low_rank, bench_mixed): the
// command line, the shape filter, the CPU's name, and the race itself: the layers timed cold and
// round-robin, each round starting at the next layer so this VM's drift hits them alike, with the
// read probe before every round and after the last.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench_common.hpp"
#include "qjit/qjit.h"
#include "tools/bandwidth_probe.hpp"

namespace qjit_bench {

struct RaceOptions {
    int threads = 0;  // 0: the library's default, one per core
    int rounds = 7;
    int repeats = 5;  // cold calls per qjit_linear_benchmark, whose median is one round's figure
    std::string shapes = "all";
};

[[noreturn]] inline void race_die(const char* program, const char* what) {
    std::fprintf(stderr, "%s: %s failed: %s\n", program, what, qjit_last_error());
    std::exit(1);
}

// --quick (one shape, few rounds), --threads=N, --rounds=N, --repeats=N, --shapes=all|model|KxN,...
// (also as "--flag value"); anything else prints the usage and exits.
inline RaceOptions parse_race_options(int argc, char** argv, const char* program) {
    auto usage = [&] {
        std::fprintf(stderr, "usage: %s [--quick] [--threads=N] [--rounds=N] [--repeats=N] "
                             "[--shapes=all|MODEL|KxN,...]\n", program);
        std::exit(2);
    };
    auto non_negative = [&](const char* text) {
        char* end = nullptr;
        const long value = std::strtol(text, &end, 10);
        if (end == text || *end || value < 0 || value > 1 << 20) usage();
        return int(value);
    };
    RaceOptions options;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg(argv[i]);
        auto value = [&](std::string_view flag) -> const char* {
            if (arg.starts_with(flag) && arg.size() > flag.size() && arg[flag.size()] == '=')
                return argv[i] + flag.size() + 1;
            if (arg == flag) {
                if (i + 1 >= argc) usage();
                return argv[++i];
            }
            return nullptr;
        };
        if (arg == "--quick") {
            options.shapes = "4096x4096";
            options.rounds = 3;
            options.repeats = 3;
        } else if (const char* v = value("--threads")) {
            options.threads = non_negative(v);
        } else if (const char* v = value("--rounds")) {
            options.rounds = std::max(1, non_negative(v));
        } else if (const char* v = value("--repeats")) {
            options.repeats = std::max(1, non_negative(v));
        } else if (const char* v = value("--shapes")) {
            options.shapes = v;
        } else {
            usage();
        }
    }
    return options;
}

// --shapes: "all", a model name, or a comma-separated list of names and KxN shapes.
inline bool shape_selected(const ModelLayerShape& shape, const std::string& wanted) {
    const std::string dims = std::to_string(shape.k) + "x" + std::to_string(shape.n);
    for (size_t begin = 0; begin <= wanted.size();) {
        const size_t end = std::min(wanted.find(',', begin), wanted.size());
        const std::string item = wanted.substr(begin, end - begin);
        if (item == "all" || item == shape.model || item == dims) return true;
        begin = end + 1;
    }
    return false;
}

inline std::string cpu_name() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
        if (line.starts_with("model name")) {
            const size_t colon = line.find(':');
            return colon == std::string::npos ? line : line.substr(line.find_first_not_of(" \t", colon + 1));
        }
    return "unknown CPU";
}

// A context tuned for `batch` rows (the library's budget, no database).
inline qjit_context* race_context(int threads, int64_t batch, const char* program) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = threads;
    options.tuning_db_path = "";
    options.tuning_batch = batch;
    qjit_context* context = nullptr;
    if (qjit_context_create(&options, &context) != QJIT_OK) race_die(program, "qjit_context_create");
    return context;
}

// The thread count layers run on (0 resolved to the library's default), for the probe.
inline int race_threads(int requested, const char* program) {
    qjit_context* context = race_context(requested, 1, program);
    int threads = 0;
    if (qjit_context_num_threads(context, &threads) != QJIT_OK) race_die(program, "qjit_context_num_threads");
    qjit_context_destroy(context);
    return threads;
}

inline constexpr int kRaceProbeSweeps = 2;

struct RaceResult {
    std::vector<double> micros;  // per layer: the median over rounds of each round's median
    double probe_gbps = 0;       // the best probe sweep of the race
};

inline RaceResult race_layers(const std::vector<qjit_linear*>& layers, int64_t batch, const RaceOptions& options,
                              int threads, qjit_tools::BandwidthProbe& probe, const char* program) {
    RaceResult result;
    auto run_probe = [&] {
        for (int i = 0; i < kRaceProbeSweeps; ++i)
            result.probe_gbps =
                std::max(result.probe_gbps, probe.measure(threads, qjit_tools::BandwidthProbe::kPeakWindowBytes));
    };
    std::vector<std::vector<double>> rounds(layers.size());
    for (int round = 0; round < options.rounds; ++round) {
        run_probe();
        for (size_t step = 0; step < layers.size(); ++step) {
            const size_t i = (size_t(round) + step) % layers.size();
            double us = 0;
            if (qjit_linear_benchmark(layers[i], batch, options.repeats, 1, &us) != QJIT_OK)
                race_die(program, "qjit_linear_benchmark");
            rounds[i].push_back(us);
        }
    }
    run_probe();
    for (const std::vector<double>& r : rounds) result.micros.push_back(median(r));
    return result;
}

// One layer of a race as the tables print it; Variant names it (`name`).
template <typename Variant>
struct RaceRow {
    const ModelLayerShape* shape = nullptr;
    int64_t batch = 0;
    const Variant* variant = nullptr;
    qjit_linear_info info{};
    std::string tiling;
    double micros = 0, probe_gbps = 0;
    double gbps() const { return double(info.weight_bytes) / micros * 1e-3; }
};

// Races layers[i] (made for variants[i] in `context`), one row each; destroys the layers and the
// context.
template <typename Variant>
std::vector<RaceRow<Variant>> race_rows(const ModelLayerShape& shape, int64_t batch, const Variant* variants,
                                        const std::vector<qjit_linear*>& layers, qjit_context* context,
                                        const RaceOptions& options, int threads, qjit_tools::BandwidthProbe& probe,
                                        const char* program) {
    std::vector<RaceRow<Variant>> rows(layers.size());
    for (size_t i = 0; i < layers.size(); ++i) {
        qjit_linear_tuning tuning;
        rows[i].shape = &shape;
        rows[i].batch = batch;
        rows[i].variant = &variants[i];
        if (qjit_linear_get_info(layers[i], &rows[i].info) != QJIT_OK ||
            qjit_linear_get_tuning(layers[i], &tuning) != QJIT_OK)
            race_die(program, "qjit_linear_get_info/tuning");
        rows[i].tiling = *tuning.tiling ? tuning.tiling : "portable";
    }
    const RaceResult race = race_layers(layers, batch, options, threads, probe, program);
    for (size_t i = 0; i < layers.size(); ++i) {
        rows[i].micros = race.micros[i];
        rows[i].probe_gbps = race.probe_gbps;
        qjit_linear_destroy(layers[i]);
    }
    qjit_context_destroy(context);
    return rows;
}

inline constexpr const char* kRaceTableHeader =
    "| shape | batch | layer | bits/weight | MiB streamed | µs | vs INT3 | vs INT4 | GB/s | probe GB/s | of probe "
    "| tiling |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";

// One table line per row; rows[int3] and rows[int4] are the references of the ratio columns.
template <typename Variant>
void print_race_rows(const std::vector<RaceRow<Variant>>& rows, size_t int3, size_t int4) {
    for (const RaceRow<Variant>& r : rows) {
        char of_probe[16] = "-";
        if (r.batch == 1) std::snprintf(of_probe, sizeof of_probe, "%.2f", r.gbps() / r.probe_gbps);
        const double bits_per_weight = double(r.info.stored_bytes) * 8 / double(r.shape->k * r.shape->n);
        std::printf("| %s %s %lldx%lld | %lld | %s | %.2f | %.2f | %.0f | %.3f | %.3f | %.1f | %.1f | %s | %s |\n",
                    r.shape->model.c_str(), r.shape->layer.c_str(), (long long)r.shape->k, (long long)r.shape->n, (long long)r.batch,
                    r.variant->name, bits_per_weight, double(r.info.weight_bytes) / double(kMiB), r.micros,
                    r.micros / rows[int3].micros, r.micros / rows[int4].micros, r.gbps(), r.probe_gbps, of_probe,
                    r.tiling.c_str());
    }
    std::fflush(stdout);
}

}  // namespace qjit_bench
