// "LLM in a flash" on this machine: the I/O table of Alizadeh et al. (their Table 2) for FFN
// layers served from a neuron file on the local disk with half the memory they need.
//
// Each row adds its technique to those above it:
//   naive      every neuron of every layer read for every token (split file, nothing resident)
//   hybrid     half of each layer's neurons resident (the most often active), the rest read
//   predictor  only the neurons the low-rank predictor names are read
//   windowing  neurons active in the last k tokens stay resident (the budget shared with the hot set)
//   bundling   each neuron's up column and down row in one record: one read instead of two
// and, for reference, `resident`: every neuron in memory (the predictor still picks the neurons).
// The set is synthetic and OPT-6.7B-shaped (bench/flash_synthetic.hpp); reads are O_DIRECT, the
// files are evicted from the page cache before each row, and each row reports how much of them is
// cached after it (mincore).
//
//     build/bench/bench_flash [--json] [--f16] [--layers=32] [--tokens=32] [--window=4] [--dir=DIR]
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "bench/flash_synthetic.hpp"
#include "io/neuron_file.hpp"
#include "runtime/context.hpp"
#include "runtime/flash/flash_ffn.hpp"
#include "runtime/flash/read_tuning.hpp"

namespace {

using qjit::FlashFfn;
using qjit::NeuronFileHeader;
using qjit_bench::SyntheticFfnSpec;

struct Options {
    SyntheticFfnSpec spec;
    int bits = 4;
    int64_t group = 128;
    bool f16 = false;
    int tokens = 32;        // measured tokens per row
    int warmup = 8;         // tokens run before measuring (the window fills)
    int full_read_tokens = 3;  // measured tokens of the rows that read every neuron
    int window = 4;
    double budget_fraction = 0.5;  // of the FFN set's bytes
    double target_recall = 0.99;
    int calibration = 256;  // tokens the predictor is fitted on
    int64_t alignment = 512;
    std::string dir;
    bool json = false;
};

[[noreturn]] void usage(int code) {
    std::fprintf(stderr,
                 "usage: bench_flash [--json] [--f16 | --bits=4 --group=128] [--layers=32] [--d-model=4096]\n"
                 "                   [--d-ff=16384] [--activity=0.03] [--tokens=32] [--warmup=8] [--window=4]\n"
                 "                   [--budget=0.5] [--recall=0.99] [--calibration=256] [--full-read-tokens=3]\n"
                 "                   [--alignment=512] [--layer-rho=0.9] [--dir=DIR]\n");
    std::exit(code);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg(argv[i]);
        auto value = [&](std::string_view flag) { return arg.starts_with(flag) ? argv[i] + flag.size() : nullptr; };
        if (arg == "--json") o.json = true;
        else if (arg == "--f16") o.f16 = true;
        else if (const char* v = value("--bits=")) o.bits = std::atoi(v);
        else if (const char* v = value("--group=")) o.group = std::atoll(v);
        else if (const char* v = value("--layers=")) o.spec.layers = std::atoll(v);
        else if (const char* v = value("--d-model=")) o.spec.d_model = std::atoll(v);
        else if (const char* v = value("--d-ff=")) o.spec.d_ff = std::atoll(v);
        else if (const char* v = value("--activity=")) o.spec.activity = std::atof(v);
        else if (const char* v = value("--layer-rho=")) o.spec.layer_rho = std::atof(v);
        else if (const char* v = value("--tokens=")) o.tokens = std::max(1, std::atoi(v));
        else if (const char* v = value("--warmup=")) o.warmup = std::max(0, std::atoi(v));
        else if (const char* v = value("--window=")) o.window = std::max(1, std::atoi(v));
        else if (const char* v = value("--budget=")) o.budget_fraction = std::atof(v);
        else if (const char* v = value("--recall=")) o.target_recall = std::atof(v);
        else if (const char* v = value("--alignment=")) o.alignment = std::atoll(v);
        else if (const char* v = value("--calibration=")) o.calibration = std::max(1, std::atoi(v));
        else if (const char* v = value("--full-read-tokens=")) o.full_read_tokens = std::max(1, std::atoi(v));
        else if (const char* v = value("--dir=")) o.dir = v;
        else usage(arg == "--help" || arg == "-h" ? 0 : 2);
    }
    if (o.dir.empty()) {  // beside the executable, so the files land in the build tree
        char exe[4096];
        const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
        o.dir = n > 0 ? std::string(exe, size_t(n)).substr(0, std::string(exe, size_t(n)).rfind('/')) : ".";
        o.dir += "/flash-data";
    }
    return o;
}

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

NeuronFileHeader header_for(const Options& o, bool bundled) {
    NeuronFileHeader h;
    h.d_model = o.spec.d_model;
    h.bundled = bundled;
    h.alignment = o.alignment;
    if (o.f16) {
        h.vector = qjit::f16_vector_layout(o.spec.d_model);
    } else {
        qjit::WeightFormat format = qjit::f16_scaled_format();
        format.bits = o.bits;
        format.group_size = o.group;
        h.vector = qjit::quantized_vector_layout(format, o.spec.d_model);
    }
    return h;
}

// Which neurons are truly active for each of n inputs: x . up_i + b_i > 0.
std::vector<uint8_t> true_activity(const std::vector<float>& x, int64_t n, const std::vector<float>& up,
                                   const std::vector<float>& bias, int64_t d_model, int64_t d_ff) {
    std::vector<uint8_t> active(size_t(n * d_ff));
    std::vector<float> pre(static_cast<size_t>(d_ff));
    for (int64_t t = 0; t < n; ++t) {
        std::copy(bias.begin(), bias.end(), pre.begin());
        for (int64_t k = 0; k < d_model; ++k) {
            const float xv = x[size_t(t * d_model + k)];
            const float* row = up.data() + k * d_ff;
            for (int64_t i = 0; i < d_ff; ++i) pre[size_t(i)] += xv * row[i];
        }
        for (int64_t i = 0; i < d_ff; ++i) active[size_t(t * d_ff + i)] = pre[size_t(i)] > 0;
    }
    return active;
}

struct Method {
    const char* name;
    bool bundled;
    bool resident_half;  // pin the hot neurons up to the budget
    bool predictor;
    bool window;
    bool everything_resident;
    bool read_ahead = false;
};

struct Setup {
    Options options;
    std::string split_path, bundled_path;
    NeuronFileHeader bundled_header;
    int64_t model_bytes = 0;  // the FFN set's vectors and biases, without record padding
    qjit::ReadCurve curve;
    qjit::NeuronPredictor predictor;
    std::vector<int32_t> hot;          // neurons by calibration activity, most active first
    double predicted_per_token = 0;    // predicted neurons per layer and token on the calibration
    std::vector<std::vector<float>> inputs;  // [layer][token][d_model]
    qjit_context* context = nullptr;
};

void print_row(const Setup& s, const Method& m, const FlashFfn& ffn, double wall_seconds, int tokens,
               double cache_fraction) {
    const qjit::FlashFfnCounters& c = ffn.counters();
    const double per_token = 1e3 / tokens;
    const double layers_tokens = double(s.options.spec.layers) * tokens;
    const double read_gbps = c.io_seconds > 0 ? double(c.bytes_read) / c.io_seconds * 1e-9 : 0.0;
    if (s.options.json) {
        std::printf("{\"method\": \"%s\", \"file\": \"%s\", \"format\": \"%s\", \"tokens\": %d, \"dram_bytes\": %lld, "
                    "\"model_bytes\": %lld, \"bytes_read_per_token\": %.0f, \"reads_per_token\": %.1f, "
                    "\"read_gbps\": %.3f, \"io_ms_per_token\": %.3f, \"io_wait_ms_per_token\": %.3f, \"cache_ms_per_token\": %.3f, "
                    "\"compute_ms_per_token\": %.3f, \"predict_ms_per_token\": %.3f, \"total_ms_per_token\": %.3f, "
                    "\"active_per_layer\": %.1f, \"loaded_per_layer\": %.1f, \"hit_rate\": %.4f, "
                    "\"page_cache_fraction\": %.4f}\n",
                    m.name, m.bundled ? "bundled" : "split",
                    s.bundled_header.vector.coding == qjit::VectorCoding::F16 ? "f16" : s.bundled_header.vector.format.name().c_str(),
                    tokens, (long long)ffn.dram_bytes(), (long long)s.model_bytes, double(c.bytes_read) / tokens,
                    double(c.reads) / tokens, read_gbps, c.io_seconds * per_token, c.io_wait_seconds * per_token,
                    c.cache_seconds * per_token,
                    c.compute_seconds * per_token, c.predict_seconds * per_token, wall_seconds * per_token,
                    double(c.active_neurons) / layers_tokens, double(c.neurons_loaded) / layers_tokens,
                    c.active_neurons ? double(c.cache_hits) / double(c.active_neurons) : 0.0, cache_fraction);
    } else {
        std::printf("%-10s %8.2f GB %9.1f MB %7.3f GB/s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f ms\n", m.name,
                    ffn.dram_bytes() * 1e-9, c.bytes_read * 1e-6 / tokens, read_gbps, c.io_seconds * per_token,
                    c.io_wait_seconds * per_token,
                    c.cache_seconds * per_token, c.compute_seconds * per_token, c.predict_seconds * per_token,
                    wall_seconds * per_token);
    }
    std::fflush(stdout);
}

void run_method(const Setup& s, const Method& m) {
    const Options& o = s.options;
    const int64_t layers = o.spec.layers, d_ff = o.spec.d_ff;
    const std::string& path = m.bundled ? s.bundled_path : s.split_path;
    qjit::drop_from_page_cache(path);

    qjit::FlashFfnOptions flash;
    flash.read_curve = s.curve;
    flash.window = m.window ? o.window : 0;
    flash.read_ahead = m.read_ahead;
    if (m.everything_resident)
        flash.dram_budget_bytes = int64_t(1) << 50;  // capped at every neuron
    else if (m.resident_half)
        flash.dram_budget_bytes = int64_t(o.budget_fraction * double(s.model_bytes));
    FlashFfn ffn(qjit::open_file_storage(path), flash, *s.context->pool);

    // The resident share: every neuron, or the hot ones, leaving room for the window's.
    int64_t pinned = 0;
    if (m.everything_resident || m.resident_half) {
        const int64_t window_room =
            m.window ? int64_t(std::ceil(1.25 * (o.window + 1) * s.predicted_per_token)) : 0;
        pinned = std::max<int64_t>(0, ffn.resident_capacity() - window_room);
    }
    std::vector<int32_t> pins(s.hot.begin(), s.hot.begin() + pinned);
    for (int64_t l = 0; l < layers; ++l) {
        if (pinned > 0) ffn.pin(l, pins);
        if (m.predictor) ffn.set_predictor(l, s.predictor);
    }

    const bool reads_everything = !m.predictor;
    const int tokens = reads_everything ? o.full_read_tokens : o.tokens;
    const int warmup = reads_everything ? 1 : o.warmup;
    std::vector<float> y(size_t(o.spec.d_model));
    double start = 0;
    for (int t = 0; t < warmup + tokens; ++t) {
        if (t == warmup) {
            ffn.reset_counters();
            start = now_seconds();
        }
        for (int64_t l = 0; l < layers; ++l)
            ffn.forward(l, s.inputs[size_t(l)].data() + size_t(t) * size_t(o.spec.d_model), 1, y.data());
    }
    const double wall = now_seconds() - start;
    (void)d_ff;
    print_row(s, m, ffn, wall, tokens, qjit::page_cache_fraction(path));
}

}  // namespace

int main(int argc, char** argv) try {
    Setup s;
    s.options = parse(argc, argv);
    const Options& o = s.options;
    const int64_t d_model = o.spec.d_model, d_ff = o.spec.d_ff;
    ::mkdir(o.dir.c_str(), 0755);

    auto context = qjit::make_context(nullptr);
    s.context = context.get();

    const NeuronFileHeader split_header = header_for(o, false);
    s.bundled_header = header_for(o, true);
    s.bundled_header.layers = o.spec.layers;
    s.bundled_header.d_ff = d_ff;
    const std::string stem = o.dir + "/opt-" + std::to_string(o.spec.layers) + "x" + std::to_string(d_model) + "x" +
                             std::to_string(d_ff) + "-" + (o.f16 ? "f16" : s.bundled_header.vector.format.name());
    s.split_path = stem + "-split.qnf";
    s.bundled_path = stem + "-bundled.qnf";

    std::fprintf(stderr, "bench_flash: generating the synthetic FFN set (%lld layers, %lld -> %lld)\n",
                 (long long)o.spec.layers, (long long)d_model, (long long)d_ff);
    const qjit_bench::SyntheticFfn ffn = qjit_bench::make_synthetic_ffn(o.spec);
    for (const auto& [path, header] : {std::pair{s.split_path, split_header}, std::pair{s.bundled_path, s.bundled_header}})
        if (qjit_bench::write_synthetic_file(path, ffn, header))
            std::fprintf(stderr, "bench_flash: wrote %s\n", path.c_str());
    s.model_bytes = o.spec.layers * d_ff * (2 * s.bundled_header.vector.bytes() + 4);

    // The device's read curve, from the tuning database or measured now.
    {
        auto storage = qjit::open_file_storage(s.bundled_path);
        std::lock_guard<std::mutex> lock(context->tuning.mutex);
        qjit::TuningDb* db = context->tuning.database();
        s.curve = db ? qjit::read_curve_for(s.bundled_path, *storage, *db, true) : qjit::measure_read_curve(*storage);
    }

    // The predictor, fitted on layer 0's calibration stream; every layer has the same weights.
    std::fprintf(stderr, "bench_flash: fitting the predictor on %d tokens\n", o.calibration);
    const std::vector<float> calibration = qjit_bench::synthetic_inputs(o.spec, 1, o.calibration, 1)[0];
    {
        FlashFfn fitter(qjit::open_file_storage(s.split_path), {}, *context->pool);
        qjit::PredictorOptions predictor_options;
        predictor_options.target_recall = o.target_recall;
        const qjit::PredictorQuality q = fitter.fit_predictor(0, calibration.data(), o.calibration, predictor_options);
        s.predictor = *fitter.predictor(0);
        s.predicted_per_token = q.predicted_fraction * double(d_ff);
        std::vector<float> bias;
        const std::vector<float> up = fitter.read_part(0, qjit::NeuronPart::Up, &bias);
        const std::vector<uint8_t> active = true_activity(calibration, o.calibration, up, bias, d_model, d_ff);
        std::vector<int64_t> count(size_t(d_ff), 0);
        for (int64_t t = 0; t < o.calibration; ++t)
            for (int64_t i = 0; i < d_ff; ++i) count[size_t(i)] += active[size_t(t * d_ff + i)];
        s.hot.resize(size_t(d_ff));
        std::iota(s.hot.begin(), s.hot.end(), 0);
        std::stable_sort(s.hot.begin(), s.hot.end(), [&](int32_t a, int32_t b) { return count[size_t(a)] > count[size_t(b)]; });

        // Its quality on tokens it was not fitted on (layer 0's measured stream).
        const int64_t n = o.warmup + o.tokens;
        s.inputs = qjit_bench::synthetic_inputs(o.spec, o.spec.layers, n, 2);
        const std::vector<uint8_t> truth = true_activity(s.inputs[0], n, up, bias, d_model, d_ff);
        const qjit::PredictorQuality held_out = s.predictor.evaluate(s.inputs[0].data(), truth.data(), n);
        int64_t truly_active = 0;
        for (uint8_t a : truth) truly_active += a;
        std::printf(o.json ? "{\"predictor_rank\": %d, \"calibration_recall\": %.4f, \"recall\": %.4f, \"precision\": %.4f, "
                             "\"predicted_fraction\": %.4f, \"active_fraction\": %.4f, \"predictor_bytes_per_layer\": %lld}\n"
                           : "predictor: rank %d, calibration recall %.4f; held out: recall %.4f, precision %.4f, "
                             "predicted %.4f of neurons, active %.4f, %lld bytes a layer\n",
                    s.predictor.rank(), q.recall, held_out.recall, held_out.precision, held_out.predicted_fraction,
                    double(truly_active) / double(n * d_ff), (long long)s.predictor.memory_bytes());
    }
    if (o.json)
        std::printf("{\"read_curve\": \"%s\", \"device\": \"%s\"}\n", s.curve.to_text().c_str(),
                    qjit::storage_device_key(s.bundled_path).c_str());
    else
        std::printf("read curve of %s (chunk x depth = GB/s): %s\n", qjit::storage_device_key(s.bundled_path).c_str(),
                    s.curve.to_text().c_str());
    if (!o.json)
        std::printf("%-10s %11s %12s %12s %9s %9s %9s %9s %9s %12s\n", "method", "DRAM", "read/token", "throughput",
                    "I/O", "I/O wait", "cache", "compute", "predict", "total/token");

    const Method methods[] = {
        {"naive", false, false, false, false, false},     {"hybrid", false, true, false, false, false},
        {"predictor", false, true, true, false, false},   {"windowing", false, true, true, true, false},
        {"bundling", true, true, true, true, false},      {"readahead", true, true, true, true, false, true},
        {"resident", true, false, true, false, true},
    };
    for (const Method& m : methods) run_method(s, m);
    return 0;
} catch (const qjit::Error& e) {
    std::fprintf(stderr, "bench_flash: %s\n", e.what());
    return 1;
}
