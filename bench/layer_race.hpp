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

}  // namespace qjit_bench
