// Per-call time of small layers at 1 and 2 threads, after the layers were created on one context
// either by one thread or by two threads at once: the p50 and p99 of single calls and the
// involuntary context switches per call (getrusage). A call that waits for a pool thread that
// shares its core costs hundreds of microseconds and about two involuntary switches; a healthy one
// costs a few microseconds and none.
//
// The shapes are a 135M model's (576x1536, 1536x576, 576x576, 576x192) at 2, 3, 4 and 8 bits.
// `--pin-one-core` confines the process to one core first, which puts every pool thread on the
// caller's core: the stall's mechanism on demand, whatever else runs on the machine.
//
// Usage: bench_call_jitter [--creation serial|concurrent] [--threads 1,2] [--copies N] [--calls N]
//                          [--bits 2,3,4,8] [--pin-one-core] [--json]
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"
#include "qjit/qjit.h"

namespace {

using qjit_bench::parse_list;

struct Options {
    bool concurrent = true;
    std::vector<int> threads{1, 2};
    int copies = 4;  // of each layer, all timed: more layers than one, as a model has
    int calls = 201;
    std::vector<int> bits{2, 3, 4, 8};
    bool pin_one_core = false;
    bool json = false;
};

struct Shape {
    int64_t k, n;
};
constexpr Shape kShapes[] = {{576, 1536}, {1536, 576}, {576, 576}, {576, 192}};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "bench_call_jitter: %s\nusage: bench_call_jitter [--creation serial|concurrent] [--threads 1,2] "
                 "[--copies N] [--calls N] [--bits 2,3,4,8] [--pin-one-core] [--json]\n",
                 why);
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&] {
            if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
            return argv[++i];
        };
        if (arg == "--creation") {
            const std::string mode = value();
            if (mode != "serial" && mode != "concurrent") usage("--creation is serial or concurrent");
            o.concurrent = mode == "concurrent";
        } else if (arg == "--threads") {
            o.threads = parse_list<int>("bench_call_jitter", value());
        } else if (arg == "--copies") {
            o.copies = std::max(1, std::atoi(value()));
        } else if (arg == "--calls") {
            o.calls = std::max(3, std::atoi(value()));
        } else if (arg == "--bits") {
            o.bits = parse_list<int>("bench_call_jitter", value());
        } else if (arg == "--pin-one-core") {
            o.pin_one_core = true;
        } else if (arg == "--json") {
            o.json = true;
        } else {
            usage(("unknown option " + arg).c_str());
        }
    }
    return o;
}

void check(qjit_status status, const char* what) {
    if (status == QJIT_OK) return;
    std::fprintf(stderr, "bench_call_jitter: %s: %s\n", what, qjit_last_error());
    std::exit(1);
}

long involuntary_switches() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_nivcsw;
}

double percentile(std::vector<double> values, double p) {
    std::sort(values.begin(), values.end());
    return values[std::min(values.size() - 1, size_t(p * double(values.size() - 1) + 0.5))];
}

// Copy 0 of every layer tunes alone (a database miss); the other copies, database hits, are made
// by one thread or by two at once, as a loader in a hurry does.
std::vector<qjit_linear*> create_layers(qjit_context* context, const Options& o, int bits) {
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.bits = bits;
    config.group_size = 32;
    const size_t shapes = std::size(kShapes);
    std::vector<std::vector<float>> weights;
    for (const Shape& s : kShapes) {
        std::vector<float> w(size_t(s.k * s.n));
        qjit_bench::Rng rng(uint64_t(s.k * 31 + s.n));
        for (float& v : w) v = rng.uniform(-0.5f, 0.5f);
        weights.push_back(std::move(w));
    }
    std::vector<qjit_linear*> layers(shapes * size_t(o.copies), nullptr);
    auto make = [&](size_t i) {
        const Shape& s = kShapes[i % shapes];
        check(qjit_linear_create_from_f32(context, &config, s.k, s.n, weights[i % shapes].data(), QJIT_LAYOUT_K_BY_N,
                                          &layers[i]),
              "layer creation");
    };
    for (size_t i = 0; i < shapes; ++i) make(i);
    if (o.concurrent) {
        auto half = [&](size_t first) {
            for (size_t i = shapes + first; i < layers.size(); i += 2) make(i);
        };
        std::thread a(half, 0), b(half, 1);
        a.join();
        b.join();
    } else {
        for (size_t i = shapes; i < layers.size(); ++i) make(i);
    }
    return layers;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    if (o.pin_one_core) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu(), &one);
        if (sched_setaffinity(0, sizeof one, &one) != 0) usage("cannot confine the process to one core");
    }
    if (!o.json)
        std::printf("%-12s %4s %7s %9s %9s %12s  (creation: %s%s)\n", "shape", "bits", "threads", "p50 us", "p99 us",
                    "nivcsw/call", o.concurrent ? "two threads at once" : "one thread",
                    o.pin_one_core ? ", process on one core" : "");
    for (const int threads : o.threads) {
        qjit_context_options options;
        qjit_context_options_init(&options);
        options.num_threads = threads;
        options.tuning_db_path = "";  // in memory: copy 0 tunes, the copies hit
        qjit_context* context = nullptr;
        check(qjit_context_create(&options, &context), "context");
        for (const int bits : o.bits) {
            const std::vector<qjit_linear*> layers = create_layers(context, o, bits);
            for (size_t shape = 0; shape < std::size(kShapes); ++shape) {
                const Shape& s = kShapes[shape];
                std::vector<float> x(size_t(s.k), 0.25f), y(size_t(s.n));
                std::vector<double> times;
                long switches = 0;
                for (int copy = 0; copy < o.copies; ++copy) {
                    qjit_linear* layer = layers[size_t(copy) * std::size(kShapes) + shape];
                    check(qjit_linear_forward(layer, x.data(), 1, y.data()), "forward");  // first call: warm-up
                    const long before = involuntary_switches();
                    for (int call = 0; call < o.calls; ++call) {
                        const auto start = std::chrono::steady_clock::now();
                        check(qjit_linear_forward(layer, x.data(), 1, y.data()), "forward");
                        times.push_back(
                            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
                    }
                    switches += involuntary_switches() - before;
                }
                const double per_call = double(switches) / double(times.size());
                const std::string name = std::to_string(s.k) + "x" + std::to_string(s.n);
                if (o.json) {
                    std::printf("{\"shape\": \"%s\", \"bits\": %d, \"threads\": %d, \"creation\": \"%s\", "
                                "\"pinned_one_core\": %s, \"p50_us\": %.2f, \"p99_us\": %.2f, "
                                "\"involuntary_switches_per_call\": %.3f}\n",
                                name.c_str(), bits, threads, o.concurrent ? "concurrent" : "serial",
                                o.pin_one_core ? "true" : "false", percentile(times, 0.5), percentile(times, 0.99),
                                per_call);
                } else {
                    std::printf("%-12s %4d %7d %9.1f %9.1f %12.3f\n", name.c_str(), bits, threads,
                                percentile(times, 0.5), percentile(times, 0.99), per_call);
                }
            }
            for (qjit_linear* layer : layers) qjit_linear_destroy(layer);
        }
        qjit_context_destroy(context);
    }
    return 0;
}
