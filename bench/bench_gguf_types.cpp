// bench_gguf_types: layers imported from each GGUF block type qjit stores natively, on Llama-2-7B's
// FFN shapes, as fractions of the machine's floors measured in the same run: the streaming-read
// probe (batch 1) and the int8 dot-product peak (batch 16), and per byte against qjit's own Q4_0
// layer (4-bit codes in groups of 32, fp16 scales) of the same shape, threads and batch.
//
// Each row: a layer made by qjit_linear_create_from_gguf from random blocks (normal fp16 scale
// fields), in a context tuned for the row's batch (the library's budget, no database), timed cold
// as bench_cpu_speed times (median of kRounds rounds, the read probe interleaved with them).
//
//   bench_gguf_types                                 every type, 4096x11008 and 11008x4096, 1 and all
//                                                    threads, batch 1 and 16
//   bench_gguf_types --types=Q4_K,Q6_K --threads=2 --batches=1 --shapes=3584x18944,18944x3584
//   bench_gguf_types --types=Q4_0 --threads=1 --batches=1 --shapes=4096x4096 --chain=40 --tiling=tu=1,...
//
// --chain=N also times the row's layer as a model meets it, naturally cold: N copies of it run one
// after another (time_in_chain; N large enough that they overflow the caches). --tiling=T forces
// a tiling on every row instead of tuning one.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>
#include <string>
#include <string_view>
#include <vector>

#include "bench_common.hpp"
#include "qjit/qjit.h"
#include "tools/bandwidth_probe.hpp"
#include "tools/peak_probe.hpp"
#include "tools/random_gguf.hpp"
#include "tools/random_gptq.hpp"

namespace {

using qjit_bench::parse_list;

constexpr int kRounds = 5;
constexpr int kCallsPerRound = 5;
constexpr int kRowProbeSweeps = 2;

struct TypeName {
    const char* name;
    qjit_ggml_type type;
};
constexpr TypeName kTypes[] = {{"Q4_0", QJIT_GGML_Q4_0}, {"Q4_1", QJIT_GGML_Q4_1}, {"Q5_0", QJIT_GGML_Q5_0},
                               {"Q5_1", QJIT_GGML_Q5_1}, {"Q8_0", QJIT_GGML_Q8_0}, {"Q2_K", QJIT_GGML_Q2_K},
                               {"Q3_K", QJIT_GGML_Q3_K}, {"Q4_K", QJIT_GGML_Q4_K}, {"Q5_K", QJIT_GGML_Q5_K},
                               {"Q6_K", QJIT_GGML_Q6_K}, {"IQ4_NL", QJIT_GGML_IQ4_NL}, {"IQ4_XS", QJIT_GGML_IQ4_XS}};

struct Shape {
    int64_t k, n;
};

struct Options {
    std::vector<std::string> types;
    std::vector<Shape> shapes = {{4096, 11008}, {11008, 4096}};
    std::vector<int64_t> batches = {1, 16};
    std::vector<int> threads = {1, qjit_bench::hardware_threads()};
    int chain = 0;       // copies of a row's layer timed one after another; 0: none
    std::string tiling;  // forced on every row; empty: tuned
};

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "bench_gguf_types: %s failed: %s\n", what, qjit_last_error());
    std::exit(1);
}

// "KxN,KxN,...": K a multiple of 32 (a shape whose K is no whole number of a type's blocks skips that
// type, as llama-quantize falls back from the K-quants where rows are no multiple of 256).
std::vector<Shape> parse_shapes(const char* text) {
    std::vector<Shape> shapes;
    for (const std::string& item : parse_list<std::string>("bench_gguf_types", text)) {
        Shape shape{};
        char tail = 0;
        if (std::sscanf(item.c_str(), "%lldx%lld%c", reinterpret_cast<long long*>(&shape.k),
                        reinterpret_cast<long long*>(&shape.n), &tail) != 2 ||
            shape.k <= 0 || shape.n <= 0 || shape.k % 32 != 0) {
            std::fprintf(stderr, "bench_gguf_types: bad shape '%s' (KxN, K a multiple of 32)\n", item.c_str());
            std::exit(2);
        }
        shapes.push_back(shape);
    }
    return shapes;
}

int parse_chain(const char* text) {
    char* end = nullptr;
    const long copies = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || copies < 2 || copies > 1000) {
        std::fprintf(stderr, "bench_gguf_types: bad --chain '%s' (copies of a layer, 2 to 1000)\n", text);
        std::exit(2);
    }
    return int(copies);
}

Options parse(int argc, char** argv) {
    Options options;
    for (const TypeName& t : kTypes) options.types.push_back(t.name);
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg(argv[i]);
        auto value = [&](std::string_view flag) { return arg.starts_with(flag) ? argv[i] + flag.size() : nullptr; };
        if (const char* v = value("--types=")) options.types = parse_list<std::string>("bench_gguf_types", v);
        else if (const char* v = value("--batches=")) options.batches = parse_list<int64_t>("bench_gguf_types", v);
        else if (const char* v = value("--threads=")) options.threads = parse_list<int>("bench_gguf_types", v);
        else if (const char* v = value("--shapes=")) options.shapes = parse_shapes(v);
        else if (const char* v = value("--chain=")) options.chain = parse_chain(v);
        else if (const char* v = value("--tiling=")) options.tiling = v;
        else {
            std::fprintf(stderr, "usage: bench_gguf_types [--types=Q4_0,Q4_K,...] [--batches=1,16] [--threads=1,2] "
                                 "[--shapes=4096x11008,...] [--chain=N] [--tiling=T]\n");
            std::exit(2);
        }
    }
    return options;
}

const TypeName& type_named(const std::string& name) {
    for (const TypeName& t : kTypes)
        if (name == t.name) return t;
    std::fprintf(stderr, "bench_gguf_types: unknown type %s\n", name.c_str());
    std::exit(2);
}

struct Row {
    std::string type, format;
    Shape shape;
    int threads;
    int64_t batch;
    std::string tiling;
    double micros = 0, held_bits = 0, streamed_bits = 0, file_bits = 0, gbps = 0, probe_gbps = 0, macs = 0, peak_macs = 0;
    double chain_micros = 0;  // naturally cold, in a chain of copies (--chain); 0: not timed
};

// The row's layer timed in a chain of `copies` layers made from the same bytes in `context`.
double chain_micros(qjit_context* context, const TypeName& t, Shape shape, const std::vector<uint8_t>& bytes,
                    int copies, int64_t batch) {
    constexpr int kChainRounds = 9;
    std::vector<qjit_linear*> layers;
    for (int i = 0; i < copies; ++i) {
        qjit_linear* layer = nullptr;
        if (qjit_linear_create_from_gguf(context, t.type, bytes.data(), bytes.size(), shape.k, shape.n, &layer) != QJIT_OK)
            die("qjit_linear_create_from_gguf (chain)");
        layers.push_back(layer);
    }
    const double micros = qjit_bench::time_in_chain(layers, batch, shape.k, shape.n, kChainRounds);
    for (qjit_linear* layer : layers) qjit_linear_destroy(layer);
    if (micros < 0) die("qjit_linear_forward (chain)");
    return micros;
}

Row measure_row(const TypeName& t, Shape shape, const std::vector<uint8_t>& bytes, int threads, int64_t batch,
                qjit_tools::BandwidthProbe& probe, double peak_macs, const Options& options) {
    qjit_context* context = qjit_bench::batch_tuned_context(threads, batch,
                                                            options.tiling.empty() ? nullptr : options.tiling.c_str());
    if (context == nullptr) die("qjit_context_create");
    qjit_linear* layer = nullptr;
    if (qjit_linear_create_from_gguf(context, t.type, bytes.data(), bytes.size(), shape.k, shape.n, &layer) != QJIT_OK)
        die("qjit_linear_create_from_gguf");
    qjit_linear_tuning tuning;
    qjit_linear_info info;
    if (qjit_linear_get_tuning(layer, &tuning) != QJIT_OK || qjit_linear_get_info(layer, &info) != QJIT_OK)
        die("qjit_linear_get_tuning/info");
    const char* described = nullptr;
    if (qjit_linear_describe(layer, &described) != QJIT_OK) die("qjit_linear_describe");
    const std::string description = described;
    const size_t format_at = description.find("format=");
    Row row{t.name, description.substr(format_at + 7, description.find(' ', format_at) - format_at - 7), shape, threads,
            batch, tuning.tiling};
    const qjit_bench::ColdTiming timing =
        qjit_bench::time_cold(layer, batch, threads, probe, kRounds, kCallsPerRound, kRowProbeSweeps);
    if (timing.micros < 0) die("qjit_linear_benchmark");
    row.probe_gbps = timing.probe_gbps;
    const double weights = double(shape.k) * double(shape.n);
    row.micros = timing.micros;
    row.held_bits = double(info.stored_bytes) * 8 / weights;
    row.streamed_bits = double(info.weight_bytes) * 8 / weights;
    row.file_bits = double(bytes.size()) * 8 / weights;
    row.gbps = double(info.weight_bytes) / row.micros * 1e-3;
    row.macs = double(batch) * weights / row.micros * 1e6;
    row.peak_macs = peak_macs;
    if (options.chain > 0) row.chain_micros = chain_micros(context, t, shape, bytes, options.chain, batch);
    qjit_linear_destroy(layer);
    qjit_context_destroy(context);
    return row;
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = parse(argc, argv);
    qjit_tools::BandwidthProbe probe;
    std::map<int, double> peak_macs = qjit_bench::print_floors(probe, options.threads);
    std::printf("\n| type | stored as | shape | threads | batch | tiling | bits/weight held / streamed / file | µs "
                "| GB/s | read probe GB/s | of read probe | GB/s per Q4_0's | of int8 peak | µs in a chain |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    // Q4_0 first, so that every other type's row has its per-byte reference.
    std::vector<std::string> types = {"Q4_0"};
    for (const std::string& name : options.types)
        if (name != "Q4_0") types.push_back(name);
    std::map<std::tuple<int64_t, int64_t, int, int64_t>, double> q4_0_gbps;
    uint64_t seed = 1;
    for (const Shape shape : options.shapes)
        for (const std::string& name : types) {
            const TypeName& t = type_named(name);
            if (shape.k % qjit_tools::ggml_block_shape(t.type).values != 0) {
                std::fprintf(stderr, "bench_gguf_types: %s skipped at K = %lld (no whole number of its blocks)\n",
                             t.name, (long long)shape.k);
                continue;
            }
            qjit_tools::Rng rng(seed++);
            const std::vector<uint8_t> bytes = qjit_tools::random_gguf_tensor(
                t.type, shape.k, shape.n, seed, [&] { return qjit_tools::benchmark_half(rng.next()); });
            for (int threads : options.threads)
                for (int64_t batch : options.batches) {
                    const Row r = measure_row(t, shape, bytes, threads, batch, probe, peak_macs[threads], options);
                    const auto key = std::make_tuple(shape.k, shape.n, threads, batch);
                    if (name == "Q4_0") q4_0_gbps[key] = r.gbps;
                    std::printf("| %s | %s | %lldx%lld | %d | %lld | %s | %.3f / %.3f / %.3f | %.0f | %.1f | %.1f | %.2f "
                                "| %.2f | %.2f | %s |\n",
                                r.type.c_str(), r.format.c_str(), (long long)shape.k, (long long)shape.n, threads,
                                (long long)batch, r.tiling.c_str(), r.held_bits, r.streamed_bits, r.file_bits, r.micros,
                                r.gbps, r.probe_gbps, r.gbps / r.probe_gbps, r.gbps / q4_0_gbps[key],
                                r.peak_macs > 0 ? r.macs / r.peak_macs : 0.0,
                                r.chain_micros > 0 ? std::to_string(int64_t(r.chain_micros + 0.5)).c_str() : "-");
                    std::fflush(stdout);
                }
        }
    return 0;
}
