// bench_sparse_ffn: the sparse FFN's kernels on one resident layer, each variant the CPU runs, held
// against the read probe measured in the same run.
//
// One SwiGLU layer of Llama-2-7B's shape (4096 -> 11008) with random weights, 4-bit g128 per neuron
// vector (or --group, --f16), written as a neuron file in memory and served with every neuron resident. Per
// variant and share of active neurons (all, 30 %): the median over --repeats of a forward's compute
// time (the flash FFN's own counter: gate and up products, activations, down), the bytes of the
// active neurons' vectors over that time, and that throughput over the probe's.
//
//   bench_sparse_ffn [--d-model=4096] [--d-ff=11008] [--f16] [--group=128] [--rows=1] [--repeats=15] [--threads=0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include <unistd.h>
#include <vector>

#include "base/error.hpp"
#include "io/neuron_file.hpp"
#include "runtime/cpu/thread_pool.hpp"
#include "format/packed_codes.hpp"
#include "runtime/flash/flash_ffn.hpp"
#include "runtime/flash/neuron_cache_data.hpp"
#include "runtime/flash/sparse_product_jit.hpp"
#include "runtime/flash/sparse_ffn_kernels.hpp"
#include "tools/bandwidth_probe.hpp"

namespace {

using qjit::SparseFfnKernels;

struct Options {
    int64_t d_model = 4096, d_ff = 11008;
    bool f16 = false;
    int64_t group = 128;  // rows per group of the 4-bit vectors
    int64_t rows = 1;
    int repeats = 15;
    int threads = 0;  // 0: every core
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg(argv[i]);
        auto value = [&](std::string_view flag) { return arg.starts_with(flag) ? argv[i] + flag.size() : nullptr; };
        if (arg == "--f16") o.f16 = true;
        else if (const char* v = value("--d-model=")) o.d_model = std::atoll(v);
        else if (const char* v = value("--d-ff=")) o.d_ff = std::atoll(v);
        else if (const char* v = value("--group=")) o.group = std::max<int64_t>(16, std::atoll(v));
        else if (const char* v = value("--rows=")) o.rows = std::max<int64_t>(1, std::atoll(v));
        else if (const char* v = value("--repeats=")) o.repeats = std::max(1, std::atoi(v));
        else if (const char* v = value("--threads=")) o.threads = std::max(0, std::atoi(v));
        else {
            std::fprintf(stderr, "usage: bench_sparse_ffn [--d-model=4096] [--d-ff=11008] [--f16] [--group=128] [--rows=1] "
                                 "[--repeats=15] [--threads=0]\n");
            std::exit(2);
        }
    }
    return o;
}

// The header of the one SwiGLU layer: fp16 vectors, or 4-bit ones in groups of --group rows.
qjit::NeuronFileHeader layer_header(const Options& o, bool f16) {
    qjit::NeuronFileHeader h;
    h.layers = 1;
    h.d_model = o.d_model;
    h.d_ff = o.d_ff;
    h.activation = qjit::FfnActivation::SwiGlu;
    h.alignment = 512;
    if (f16) {
        h.vector = qjit::f16_vector_layout(o.d_model);
    } else {
        qjit::WeightFormat f = qjit::f16_scaled_format();
        f.bits = 4;
        f.group_size = o.group;
        h.vector = qjit::quantized_vector_layout(f, o.d_model);
    }
    return h;
}

// A one-layer SwiGLU neuron file of random weights, as bytes.
std::string random_layer_file(const Options& o) {
    const qjit::NeuronFileHeader h = layer_header(o, o.f16);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> up(size_t(o.d_model * o.d_ff)), gate(up.size()), down(up.size());
    for (auto* w : {&up, &gate, &down})
        for (float& v : *w) v = normal(rng);
    const qjit::FfnLayerWeights weights = qjit::quantize_ffn_layer(h, up.data(), gate.data(), down.data(), nullptr);
    const std::string path = "/tmp/bench_sparse_ffn." + std::to_string(::getpid()) + ".qnf";
    {
        qjit::NeuronFileWriter writer(path, h);
        writer.add_layer(weights);
        writer.finish();
    }
    std::FILE* f = std::fopen(path.c_str(), "rb");
    std::string bytes(size_t(h.file_bytes()), '\0');
    const size_t read = std::fread(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    std::remove(path.c_str());
    if (read != bytes.size()) throw std::runtime_error("bench_sparse_ffn: could not read back " + path);
    return bytes;
}

template <typename Run>
double median_seconds(int repeats, Run&& run) {
    std::vector<double> seconds;
    for (int r = 0; r < repeats + 2; ++r) {
        const auto start = std::chrono::steady_clock::now();
        run();
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        if (r >= 2) seconds.push_back(took.count());  // two warm-ups
    }
    std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
    return seconds[seconds.size() / 2];
}

// The up products alone and the down sums alone, on one thread: the generated kernels against the
// hand-written ones, over the up vectors of the layer's weights in a cache of every neuron.
void products_table(const Options& o, double probe_one_thread) {
    const qjit::NeuronFileHeader h = layer_header(o, false);
    const qjit::WeightFormat& f = h.vector.format;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> w(size_t(o.d_model * o.d_ff));
    for (float& v : w) v = normal(rng);
    const qjit::FfnLayerWeights weights = qjit::quantize_ffn_layer(h, w.data(), w.data(), w.data(), nullptr);
    const qjit::PackedCodes packed = qjit::pack_codes(weights.up.codes.data(), 4, o.d_model, o.d_ff, 8);
    qjit::TuningMemory tuning;  // no database: the generated kernels' tilings timed here, as on a miss
    qjit::NeuronCache cache(h, o.d_ff, 0, {qjit::NeuronPart::Up, qjit::NeuronPart::Down}, QJIT_ISA_AUTO, {&tuning, {}});
    std::vector<int32_t> all(size_t(o.d_ff));
    std::iota(all.begin(), all.end(), 0);
    const std::vector<int32_t> slots = cache.pin(all);
    std::vector<uint8_t> vector(size_t(h.vector.bytes()));
    for (int64_t n = 0; n < o.d_ff; ++n) {
        qjit::encode_quantized_vector(h.vector, weights.up, packed, n, vector.data());
        cache.fill(slots[size_t(n)], qjit::NeuronPart::Up, vector.data());
        cache.fill(slots[size_t(n)], qjit::NeuronPart::Down, vector.data());  // (the same bytes: speed only)
    }
    const qjit::NeuronCache::Data& d = cache.data();
    std::vector<float> x(size_t(o.rows * o.d_model)), out(size_t(o.rows * o.d_ff));
    for (float& v : x) v = normal(rng);
    const double bytes = double(o.d_ff * h.vector.bytes());

    std::printf("up products and down sums alone, %s, 1 thread (read probe %.1f GB/s):\n", f.kernel_name().c_str(), probe_one_thread);
    if (const qjit::SparseProductJit* jit = d.generated) {
        qjit::SparseActivations prepared;
        const double s = median_seconds(o.repeats, [&] {
            jit->prepare(x.data(), o.rows, prepared);
            jit->products(d.vectors[int(qjit::NeuronPart::Up)].data(), slots.data(), o.d_ff, prepared, o.rows,
                          out.data());
        });
        std::printf("  %-10s %10.1f us %8.2f GB/s %6.2f of the probe\n", "generated", s * 1e6, bytes / s * 1e-9,
                    bytes / s * 1e-9 / probe_one_thread);
        std::vector<float> a(size_t(o.rows * o.d_ff), 0.01f), y(size_t(o.rows * o.d_model));
        const double down = median_seconds(o.repeats, [&] {
            jit->down(d.vectors[int(qjit::NeuronPart::Down)].data(), slots.data(), o.d_ff, a.data(), o.rows, 0, d.blocks,
                      y.data());
        });
        std::printf("  %-10s %10.1f us %8.2f GB/s %6.2f of the probe (down)\n  kernels: %s\n", "generated", down * 1e6,
                    bytes / down * 1e-9, bytes / down * 1e-9 / probe_one_thread, jit->describe().c_str());
    }
    for (SparseFfnKernels k : {SparseFfnKernels::Avx2, SparseFfnKernels::Baseline}) {
        if (!qjit::sparse_ffn_kernels_supported(k)) continue;
        qjit::use_sparse_ffn_kernels(k);
        const int64_t stride = d.blocks * 32;
        std::vector<float> padded(size_t(o.rows * stride), 0.0f), sums(size_t(o.rows * d.groups), 0.0f);
        const double s = median_seconds(o.repeats, [&] {
            for (int64_t r = 0; r < o.rows; ++r)
                for (int64_t i = 0; i < o.d_model; ++i) {
                    padded[size_t(r * stride + i)] = x[size_t(r * o.d_model + i)];
                    sums[size_t(r * d.groups + i / o.group)] += x[size_t(r * o.d_model + i)];
                }
            for (int64_t n = 0; n < o.d_ff; ++n)
                qjit::column_products(d, qjit::NeuronPart::Up, slots[size_t(n)], padded.data(), sums.data(), o.rows,
                                      out.data() + n * o.rows);
        });
        std::printf("  %-10s %10.1f us %8.2f GB/s %6.2f of the probe\n", k == SparseFfnKernels::Avx2 ? "avx2" : "baseline",
                    s * 1e6, bytes / s * 1e-9, bytes / s * 1e-9 / probe_one_thread);
        std::vector<float> a(size_t(o.rows * o.d_ff), 0.01f), y(size_t(o.rows * o.d_model));
        const double down = median_seconds(o.repeats, [&] {
            qjit::down_accumulate(d, slots.data(), o.d_ff, a.data(), o.rows, 0, d.blocks, y.data());
        });
        std::printf("  %-10s %10.1f us %8.2f GB/s %6.2f of the probe (down)\n", k == SparseFfnKernels::Avx2 ? "avx2" : "baseline",
                    down * 1e6, bytes / down * 1e-9, bytes / down * 1e-9 / probe_one_thread);
    }
    qjit::use_sparse_ffn_kernels(SparseFfnKernels::Fastest);
}

const char* name_of(SparseFfnKernels k) {
    switch (k) {
    case SparseFfnKernels::Jit: return "generated";
    case SparseFfnKernels::Avx2: return "avx2";
    case SparseFfnKernels::Baseline: return "baseline";
    default: return "fastest";
    }
}

}  // namespace

int main(int argc, char** argv) try {
    const Options o = parse(argc, argv);
    const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    qjit::ThreadPool pool(threads);
    std::fprintf(stderr, "bench_sparse_ffn: writing a %lld -> %lld layer\n", (long long)o.d_model, (long long)o.d_ff);
    const std::string file = random_layer_file(o);

    qjit::FlashFfnOptions options;
    options.dram_budget_bytes = int64_t(1) << 40;  // every neuron resident
    qjit::FlashFfn ffn(qjit::make_memory_storage(file, 512), options, pool);
    std::vector<int32_t> all(size_t(o.d_ff));
    std::iota(all.begin(), all.end(), 0);
    ffn.pin(0, all);
    std::vector<int32_t> some;  // 30 %, spread over the layer
    for (int64_t i = 0; i < o.d_ff; ++i)
        if ((i * 37) % 100 < 30) some.push_back(int32_t(i));

    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    std::vector<float> x(size_t(o.rows * o.d_model)), y(x.size());
    for (float& v : x) v = normal(rng);

    qjit_tools::BandwidthProbe probe;
    const int64_t neuron_bytes = 3 * ffn.header().vector.bytes();
    std::printf("layer %lld -> %lld, %s, %lld rows, %d threads; read probe (%s loads): ", (long long)o.d_model,
                (long long)o.d_ff, o.f16 ? "f16" : ffn.header().vector.format.kernel_name().c_str(), (long long)o.rows, threads,
                qjit_tools::BandwidthProbe::load_width_name());
    const double probe_before = probe.median(threads, 5);
    std::printf("%.1f GB/s\n", probe_before);
    std::printf("%-10s %8s %10s %10s %8s\n", "kernels", "active", "us/call", "GB/s", "/probe");
    for (SparseFfnKernels k : {SparseFfnKernels::Jit, SparseFfnKernels::Avx2, SparseFfnKernels::Baseline}) {
        if (!qjit::sparse_ffn_kernels_supported(k)) continue;
        qjit::use_sparse_ffn_kernels(k);
        for (const std::vector<int32_t>* active : {&all, &some}) {
            std::vector<double> seconds;
            for (int r = 0; r < o.repeats + 2; ++r) {
                ffn.reset_counters();
                ffn.forward(0, x.data(), o.rows, y.data(), active);
                if (r >= 2) seconds.push_back(ffn.counters().compute_seconds);  // two warm-ups
            }
            std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
            const double median = seconds[seconds.size() / 2];
            const double gbps = double(int64_t(active->size()) * neuron_bytes) / median * 1e-9;
            std::printf("%-10s %7.0f%% %10.1f %10.2f %8.2f\n", name_of(k), 100.0 * double(active->size()) / double(o.d_ff),
                        median * 1e6, gbps, gbps / probe_before);
        }
    }
    qjit::use_sparse_ffn_kernels(SparseFfnKernels::Fastest);
    std::printf("read probe after: %.1f GB/s\n", probe.median(threads, 5));
    if (!o.f16) products_table(o, probe.median(1, 5));
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sparse_ffn: %s\n", e.what());
    return 1;
}
