// bench_cpu_speed: qjit's CPU layers, tuned for each batch, as fractions of the machine's own
// floors measured in the same run: the streaming-read probe (what batch 1 should reach) and the
// int8 dot-product peak (what batch 16 and more should approach).
//
// For each shape, bit width (g128, asymmetric, int8 activations) and thread count, and each batch:
// a layer created in a context tuned for that batch (the library's budget, no database), timed
// cold: the layer's weights are flushed from every cache before each call, as the tuner times
// (qjit_linear_benchmark), median of kRounds rounds of kCallsPerRound calls. The read probe (same
// threads, kRowProbeSweeps sweeps of its smaller window) runs before every round and after the
// last, and the row is held against the best of those sweeps: this VM's read bandwidth drifts by
// tens of percent from minute to minute, so only a probe interleaved with the row says what the
// row could reach.
//
//   bench_cpu_speed                       Llama-2-7B and -70B shapes, 4/3/2 bits, 1 and all threads,
//                                         batch 1, 2, 4, 8, 16, 32, 64
//   bench_cpu_speed --shapes=7b|70b       one model's shapes
//   bench_cpu_speed --bits=4,3 --batches=1,16 --threads=1,2
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "bench_common.hpp"
#include "qjit/qjit.h"
#include "tools/bandwidth_probe.hpp"
#include "tools/peak_probe.hpp"
#include "tools/random_gptq.hpp"

namespace {

using qjit_bench::parse_list;

using Shape = qjit_bench::ModelLayerShape;
// Llama-2-7B's and -70B's distinct layer shapes (configs/models).
std::vector<Shape> model_shapes() {
    return qjit_bench::joined({qjit_bench::model_layers("7b", "llama-2-7b"), qjit_bench::model_layers("70b", "llama-2-70b")});
}
constexpr int kGroup = 128;
constexpr int kRounds = 5;
constexpr int kCallsPerRound = 5;
constexpr int kRowProbeSweeps = 2;

struct Options {
    std::string shapes = "all";
    std::vector<int> bits = {4, 3, 2};
    std::vector<int64_t> batches = {1, 2, 4, 8, 16, 32, 64};
    std::vector<int> threads = {1, qjit_bench::hardware_threads()};
};

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "bench_cpu_speed: %s failed: %s\n", what, qjit_last_error());
    std::exit(1);
}

Options parse(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg(argv[i]);
        auto value = [&](std::string_view flag) { return arg.starts_with(flag) ? argv[i] + flag.size() : nullptr; };
        if (const char* v = value("--shapes=")) options.shapes = v;
        else if (const char* v = value("--bits=")) options.bits = parse_list<int>("bench_cpu_speed", v);
        else if (const char* v = value("--batches=")) options.batches = parse_list<int64_t>("bench_cpu_speed", v);
        else if (const char* v = value("--threads=")) options.threads = parse_list<int>("bench_cpu_speed", v);
        else {
            std::fprintf(stderr, "usage: bench_cpu_speed [--shapes=7b|70b|all] [--bits=4,3,2] "
                                 "[--batches=1,2,4,8,16,32,64] [--threads=1,2]\n");
            std::exit(2);
        }
    }
    return options;
}

struct Row {
    const Shape* shape;
    int threads, bits;
    int64_t batch;
    std::string tiling;
    int timed = 0, ranked = 0;
    double tuning_ms = 0, micros = 0, gbps = 0, probe_gbps = 0, macs = 0, peak_macs = 0;
};

Row measure_row(const Shape& shape, const qjit_tools::GptqTensors& tensors, int threads, int bits, int64_t batch,
                qjit_tools::BandwidthProbe& probe, double peak_macs) {
    qjit_context* context = qjit_bench::batch_tuned_context(threads, batch);
    if (context == nullptr) die("qjit_context_create");
    qjit_linear* layer = nullptr;
    if (qjit_linear_create_from_gptq(context, shape.k, shape.n, &tensors.view, &layer) != QJIT_OK)
        die("qjit_linear_create_from_gptq");
    qjit_linear_tuning tuning;
    qjit_linear_info info;
    if (qjit_linear_get_tuning(layer, &tuning) != QJIT_OK || qjit_linear_get_info(layer, &info) != QJIT_OK)
        die("qjit_linear_get_tuning/info");

    const qjit_bench::ColdTiming timing =
        qjit_bench::time_cold(layer, batch, threads, probe, kRounds, kCallsPerRound, kRowProbeSweeps);
    if (timing.micros < 0) die("qjit_linear_benchmark");
    Row row{&shape, threads, bits, batch, tuning.tiling, tuning.candidates_timed, tuning.candidates_ranked,
            tuning.tuning_ms};
    row.micros = timing.micros;
    row.gbps = double(info.weight_bytes) / row.micros * 1e-3;
    row.probe_gbps = timing.probe_gbps;
    row.macs = double(batch) * double(shape.k) * double(shape.n) / row.micros * 1e6;
    row.peak_macs = peak_macs;
    qjit_linear_destroy(layer);
    qjit_context_destroy(context);
    return row;
}

void print_row(const Row& r) {
    std::printf("| %s %s %lldx%lld | %d | %d | %lld | %s | %d/%d | %.0f | %.1f | %.1f | %.1f | %.2f | %.3f | %.2f |\n",
                r.shape->model.c_str(), r.shape->layer.c_str(), (long long)r.shape->k, (long long)r.shape->n, r.threads, r.bits,
                (long long)r.batch, r.tiling.c_str(), r.timed, r.ranked, r.tuning_ms, r.micros, r.gbps, r.probe_gbps,
                r.gbps / r.probe_gbps, r.macs * 1e-12, r.macs / r.peak_macs);
    std::fflush(stdout);
}

// The targets, each checked on every row it concerns; prints the worst case of each.
void print_targets(const std::vector<Row>& rows) {
    std::map<std::tuple<const Shape*, int, int, int64_t>, const Row*> at;
    for (const Row& r : rows) at[{r.shape, r.threads, r.bits, r.batch}] = &r;
    auto find = [&](const Row& r, int bits, int64_t batch) -> const Row* {
        const auto found = at.find({r.shape, r.threads, bits, batch});
        return found == at.end() ? nullptr : found->second;
    };
    const Row *worst_floor = nullptr, *worst_peak = nullptr, *worst_scaling = nullptr, *worst_low_bits = nullptr;
    double low_bits_ratio = 0;
    for (const Row& r : rows) {
        if (r.batch == 1 && (!worst_floor || r.gbps / r.probe_gbps < worst_floor->gbps / worst_floor->probe_gbps))
            worst_floor = &r;
        if (r.batch == 16 && r.bits == 4) {
            if (!worst_peak || r.macs / r.peak_macs < worst_peak->macs / worst_peak->peak_macs) worst_peak = &r;
            if (const Row* one = find(r, 4, 1))
                if (!worst_scaling || r.micros / one->micros > worst_scaling->micros / find(*worst_scaling, 4, 1)->micros)
                    worst_scaling = &r;
        }
        if (r.batch == 16 && r.bits != 4)
            if (const Row* four = find(r, 4, 16); four && r.micros / four->micros > low_bits_ratio) {
                low_bits_ratio = r.micros / four->micros;
                worst_low_bits = &r;
            }
    }
    std::printf("\nTargets (worst row of each):\n");
    auto name = [](const Row& r) {
        return r.shape->model + " " + std::to_string(r.shape->k) + "x" + std::to_string(r.shape->n) +
               " q" + std::to_string(r.bits) + " " + std::to_string(r.threads) + " thread(s)";
    };
    if (worst_floor)
        std::printf("- batch 1 >= 0.90 of the read probe: worst %.2f (%s)\n", worst_floor->gbps / worst_floor->probe_gbps,
                    name(*worst_floor).c_str());
    if (worst_peak)
        std::printf("- 4-bit batch 16 >= 0.50 of the int8 peak: worst %.2f (%s)\n",
                    worst_peak->macs / worst_peak->peak_macs, name(*worst_peak).c_str());
    if (worst_low_bits)
        std::printf("- 3- and 2-bit batch 16 no slower than 4-bit: worst %.2fx the 4-bit time (%s)\n", low_bits_ratio,
                    name(*worst_low_bits).c_str());
    if (worst_scaling)
        std::printf("- 4-bit batch 16 <= 3x batch 1: worst %.2fx (%s)\n",
                    worst_scaling->micros / find(*worst_scaling, 4, 1)->micros, name(*worst_scaling).c_str());
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = parse(argc, argv);
    qjit_tools::BandwidthProbe probe;
    std::map<int, double> peak_macs = qjit_bench::print_floors(probe, options.threads);
    std::printf("\n| shape | threads | bits | batch | tuned tiling | timed | tuning ms | µs | GB/s | read probe GB/s "
                "| of read probe | T MAC/s | of int8 peak |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::vector<Row> rows;
    const std::vector<Shape> shapes = model_shapes();
    for (const Shape& shape : shapes) {
        if (options.shapes != "all" && options.shapes != shape.model) continue;
        for (int bits : options.bits) {
            qjit_tools::GptqTensors tensors;
            qjit_tools::random_gptq(shape.k, shape.n, bits, kGroup, uint64_t(shape.k * 31 + shape.n + bits), &tensors);
            for (int threads : options.threads) {
                for (int64_t batch : options.batches) {
                    rows.push_back(measure_row(shape, tensors, threads, bits, batch, probe, peak_macs[threads]));
                    print_row(rows.back());
                }
            }
        }
    }
    print_targets(rows);
    return 0;
}
