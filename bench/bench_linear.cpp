// bench_linear: cold-cache throughput of qjit linear layers, each row measured next to a memory
// read-bandwidth probe.
//
// Every row rotates over distinct layers whose packed weights total at least 256 MiB, so each
// forward streams its weights from memory. A row reports effective GB/s (the bytes one forward
// reads, qjit_linear_get_info().weight_bytes, over its time) and the ratio to a streaming-read
// probe with the same number of threads, run just before the row is timed. The same run holds
// the baselines: qjit's portable path, and a dense fp32 kernel of this file.
//
//   bench_linear                      the rows behind the targets of the CPU-kernel issue
//   bench_linear --full               the whole matrix: shape x batch x threads x bits x group x path
//   bench_linear --rotation-mib=N     distinct weight bytes each row rotates over (default 256)
//
// Any Google Benchmark flag works too (--benchmark_filter=..., --benchmark_repetitions=...). The
// markdown summary at the end reports medians over the repetitions.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "tools/bandwidth_probe.hpp"
#include "tools/peak_probe.hpp"
#include "tools/random_gptq.hpp"
#include "bench_common.hpp"
#include "qjit/qjit.h"

namespace {

using namespace qjit_bench;
using namespace qjit_tools;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// What to run
// ---------------------------------------------------------------------------------------------

struct Shape {
    int64_t k;
    int64_t n;
    bool operator==(const Shape&) const = default;
};

// Llama-2-7B attention and MLP, and the 70B MLP.
constexpr Shape kShapes[] = {{4096, 4096}, {4096, 11008}, {11008, 4096}, {8192, 28672}, {28672, 8192}};
constexpr int64_t kBatches[] = {1, 4, 16, 64};
constexpr int kBitWidths[] = {4, 3, 2, 8};  // also the order of the summary table
constexpr int kGroupSizes[] = {128, 32};
constexpr int kAllThreads = 0;  // qjit's convention: one thread per core
constexpr int kThreadSettings[] = {1, kAllThreads};

// The default run: 4-bit g128 at these batches, 2- and 3-bit g128 at batch 1, baselines on two shapes.
constexpr int kTargetBits = 4;
constexpr int kTargetGroup = 128;
constexpr int64_t kTargetBatches[] = {1, 16};
constexpr Shape kDefaultBaselineShapes[] = {{4096, 4096}, {4096, 11008}};

// The tiling spread: one shape, all threads, each activation path, these tilings. Format:
// tu = column vectors per register block, mb = activation rows per kernel call, prefetch =
// software prefetch distance in 32-row blocks.
constexpr Shape kSpreadShape = {4096, 11008};
constexpr int64_t kSpreadBatches[] = {1, 16};
const char* const kTilings[] = {"tu=1,mb=1,prefetch=0", "tu=2,mb=4,prefetch=0", "tu=2,mb=8,prefetch=8",
                                "tu=3,mb=8,prefetch=4", "tu=4,mb=6,prefetch=16"};

constexpr size_t kDefaultRotationMiB = 256;  // 8x the 32 MiB L3 the issue names
constexpr int kProbeSweeps = 3;              // per row: best of 3 rounds of peak()'s two windows (~0.1 s)
constexpr double kProbeMaxAgeSeconds = 1.0;  // a younger probe value of the same thread count is reused

// Google Benchmark flags set unless the command line sets them (a later flag wins).
const char* const kDefaultBenchmarkFlags[] = {
    "--benchmark_repetitions=3",
    "--benchmark_display_aggregates_only=true",
    "--benchmark_min_time=0.2",
};

enum class Path { kExactF32, kInt8, kPortable, kDenseF32 };

const char* path_name(Path path) {
    switch (path) {
        case Path::kExactF32: return "f32";
        case Path::kInt8: return "int8";
        case Path::kPortable: return "portable";
        case Path::kDenseF32: return "dense";
    }
    return "?";
}

enum class Section { kQjit, kBaseline, kSpread };

struct Case {
    Section section;
    Path path;
    int shape_index;  // into kShapes
    int64_t batch;
    int threads;  // 1 or kAllThreads
    int bits;     // 32 for dense fp32
    int group;    // 0 for dense fp32
    std::string tiling{};
    std::string name{};

    // Filled while running and reporting.
    std::string kernel{};
    int resolved_threads = 0;
    bool reported = false;
    bool has_median = false;
    std::string error{};
    double micros = 0, gbps = 0, probe_gbps = 0, ratio = 0;

    Shape shape() const { return kShapes[shape_index]; }
};

int shape_index(Shape shape) {
    for (int i = 0; i < int(std::size(kShapes)); ++i)
        if (kShapes[i] == shape) return i;
    std::abort();  // every shape used is in kShapes
}

std::string shape_label(Shape shape) { return std::to_string(shape.k) + "x" + std::to_string(shape.n); }
std::string threads_label(int threads) { return threads == kAllThreads ? "all" : std::to_string(threads); }
std::string format_label(int bits, int group) { return "q" + std::to_string(bits) + "g" + std::to_string(group); }

std::string case_name(const Case& c) {
    const std::string common = shape_label(c.shape()) + "/m" + std::to_string(c.batch) + "/t" + threads_label(c.threads);
    switch (c.section) {
        case Section::kQjit: return "linear/" + format_label(c.bits, c.group) + "/" + common + "/" + path_name(c.path);
        case Section::kBaseline:
            if (c.path == Path::kDenseF32) return "dense/" + common;
            return "linear/" + format_label(c.bits, c.group) + "/" + common + "/" + path_name(c.path);
        case Section::kSpread:
            return "tiling/" + format_label(c.bits, c.group) + "/" + common + "/" + path_name(c.path) + "/" + c.tiling;
    }
    return "?";
}

// Rows in an order that lets consecutive rows share a context: path, threads and tiling
// outermost, batch innermost. Each batch has its own context (layers tuned for that batch), so
// its layers are made afresh.
std::vector<Case> make_cases(bool full) {
    std::vector<Case> cases;
    auto add = [&](Section section, Path path, Shape shape, int64_t batch, int threads, int bits, int group,
                   std::string tiling = {}) {
        Case c{.section = section, .path = path, .shape_index = shape_index(shape), .batch = batch,
               .threads = threads, .bits = bits, .group = group, .tiling = std::move(tiling)};
        c.name = case_name(c);
        cases.push_back(std::move(c));
    };
    auto in = [](const auto& list, auto value) { return std::find(std::begin(list), std::end(list), value) != std::end(list); };

    for (Path path : {Path::kExactF32, Path::kInt8})
        for (int threads : kThreadSettings)
            for (Shape shape : kShapes)
                for (int bits : kBitWidths)
                    for (int group : kGroupSizes)
                        for (int64_t batch : kBatches) {
                            const bool target_format = bits == kTargetBits && group == kTargetGroup;
                            const bool low_bits = (bits == 2 || bits == 3) && group == kTargetGroup;
                            const bool wanted = full || (target_format && in(kTargetBatches, batch)) ||
                                                (low_bits && batch == 1);
                            if (wanted) add(Section::kQjit, path, shape, batch, threads, bits, group);
                        }

    for (int threads : kThreadSettings)
        for (Shape shape : kShapes)
            for (int64_t batch : kBatches)
                if (full || (in(kDefaultBaselineShapes, shape) && in(kTargetBatches, batch)))
                    add(Section::kBaseline, Path::kPortable, shape, batch, threads, kTargetBits, kTargetGroup);
    // Dense weights do not depend on the thread count, so threads sit inside shape here.
    for (Shape shape : kShapes)
        for (int threads : kThreadSettings)
            for (int64_t batch : kBatches)
                if (full || (in(kDefaultBaselineShapes, shape) && in(kTargetBatches, batch)))
                    add(Section::kBaseline, Path::kDenseF32, shape, batch, threads, 32, 0);

    for (Path path : {Path::kExactF32, Path::kInt8})
        for (const char* tiling : kTilings)
            for (int64_t batch : kSpreadBatches)
                add(Section::kSpread, path, kSpreadShape, batch, kAllThreads, kTargetBits, kTargetGroup, tiling);
    return cases;
}

// ---------------------------------------------------------------------------------------------
// Weights: rotations of distinct qjit layers, and of dense fp32 matrices
// ---------------------------------------------------------------------------------------------

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A context is fixed by the thread count, the path, the tiling and the batch its layers are tuned
// for (each row's own); layers belong to their context.
struct ContextKey {
    Path path;
    int threads;
    std::string tiling;
    int64_t batch;
    bool operator==(const ContextKey&) const = default;
};

struct LayerSetKey {
    ContextKey context;
    Shape shape;
    int bits;
    int group;
    bool operator==(const LayerSetKey&) const = default;
};

// The current context and the layers one row rotates over. Holds one set at a time: preparing
// another frees the previous one first, so memory stays bounded by one rotation.
class QjitLayerSet {
public:
    ~QjitLayerSet() { release(); }

    // Makes the layers for `key` unless they are already current. False, with the library's
    // message in *error, when the library refuses (remembered, so a refused key is not retried).
    bool prepare(const LayerSetKey& key, size_t rotation_bytes, std::string* error) {
        if (key_ && *key_ == key) {
            *error = failure_;
            return failure_.empty();
        }
        release_layers();
        failure_ = build(key, rotation_bytes);
        key_ = key;  // set after build(), which may release (and so forget) the previous context's key
        *error = failure_;
        return failure_.empty();
    }

    qjit_linear* next() { return layers_[cursor_++ % layers_.size()]; }
    size_t count() const { return layers_.size(); }
    int64_t bytes_per_layer() const { return bytes_per_layer_; }
    const std::string& kernel() const { return kernel_; }
    int threads() const { return threads_; }

    void release() {
        release_layers();
        qjit_context_destroy(context_);
        context_ = nullptr;
        context_key_.reset();
    }

private:
    static std::string failure(const char* call, qjit_status status) {
        return std::string(call) + ": " + qjit_status_string(status) + ": " + qjit_last_error();
    }

    std::string build(const LayerSetKey& key, size_t rotation_bytes) {
        if (!(context_key_ && *context_key_ == key.context)) {
            release();
            qjit_context_options options;
            qjit_context_options_init(&options);
            options.num_threads = key.context.threads;
            options.max_isa = key.context.path == Path::kPortable ? QJIT_ISA_PORTABLE : QJIT_ISA_AUTO;
            options.activations = key.context.path == Path::kExactF32 ? QJIT_ACTIVATIONS_F32
                                  : key.context.path == Path::kInt8   ? QJIT_ACTIVATIONS_INT8
                                                                      : QJIT_ACTIVATIONS_AUTO;
            options.tiling = key.context.tiling.empty() ? nullptr : key.context.tiling.c_str();
            options.tuning_batch = key.context.batch;
            if (qjit_status s = qjit_context_create(&options, &context_); s != QJIT_OK)
                return failure("qjit_context_create", s);
            context_key_ = key.context;
            if (qjit_status s = qjit_context_num_threads(context_, &threads_); s != QJIT_OK)
                return failure("qjit_context_num_threads", s);
        }

        const auto start = Clock::now();
        GptqTensors tensors;
        random_gptq(key.shape.k, key.shape.n, key.bits, key.group, /*seed=*/uint64_t(key.bits * 1000 + key.group),
                    &tensors);
        // Every layer is made from the same tensors: what matters is that each has its own copy
        // of the packed weights, so the rotation streams distinct memory.
        auto create = [&]() -> std::string {
            qjit_linear* layer = nullptr;
            if (qjit_status s = qjit_linear_create_from_gptq(context_, key.shape.k, key.shape.n, &tensors.view, &layer);
                s != QJIT_OK)
                return failure("qjit_linear_create_from_gptq", s);
            layers_.push_back(layer);
            return {};
        };
        if (std::string e = create(); !e.empty()) return e;
        qjit_linear_info info;
        if (qjit_status s = qjit_linear_get_info(layers_[0], &info); s != QJIT_OK) return failure("qjit_linear_get_info", s);
        const char* description = nullptr;
        if (qjit_status s = qjit_linear_describe(layers_[0], &description); s != QJIT_OK)
            return failure("qjit_linear_describe", s);
        bytes_per_layer_ = info.weight_bytes;
        kernel_ = std::string(description, std::strcspn(description, " "));
        const size_t wanted = std::max<size_t>(1, (rotation_bytes + size_t(info.weight_bytes) - 1) / size_t(info.weight_bytes));
        while (layers_.size() < wanted)
            if (std::string e = create(); !e.empty()) return e;
        std::fprintf(stderr, "[bench_linear] %s %s %s threads=%d: %zu layers x %.1f MB, built in %.1f s\n",
                     path_name(key.context.path), shape_label(key.shape).c_str(), format_label(key.bits, key.group).c_str(),
                     threads_, layers_.size(), double(bytes_per_layer_) / 1e6, seconds_since(start));
        return {};
    }

    void release_layers() {
        for (qjit_linear* layer : layers_) qjit_linear_destroy(layer);
        layers_.clear();
        key_.reset();
        failure_.clear();
        cursor_ = 0;
    }

    qjit_context* context_ = nullptr;
    std::optional<ContextKey> context_key_;
    int threads_ = 0;
    std::optional<LayerSetKey> key_;
    std::string failure_;
    std::vector<qjit_linear*> layers_;
    size_t cursor_ = 0;
    int64_t bytes_per_layer_ = 0;
    std::string kernel_;
};

// The dense fp32 baseline stores W in panels of kDensePanel columns, each panel K x kDensePanel
// contiguous (the shape of qjit's packed layout), so each thread streams whole panels.
constexpr int kDensePanel = 64;
constexpr int64_t kDenseKBlock = 512;  // rows per pass: the block (128 KiB) stays in L2 while row blocks reuse it
constexpr int kDenseRowBlock = 4;      // activation rows whose accumulators are kept in registers together
constexpr int64_t kDenseMaxBatch = 64;
static_assert(*std::max_element(std::begin(kBatches), std::end(kBatches)) <= kDenseMaxBatch);
const char* const kDenseKernelName = "dense_f32_panel64";

class DenseWeightSet {
public:
    void prepare(Shape shape, size_t rotation_bytes) {
        if (shape_ && *shape_ == shape) return;
        release();
        const auto start = Clock::now();
        const size_t floats = size_t(shape.k * shape.n);
        const size_t count = std::max<size_t>(1, (rotation_bytes + floats * sizeof(float) - 1) / (floats * sizeof(float)));
        Rng rng(shape.k * 31 + shape.n);
        for (size_t i = 0; i < count; ++i) {
            matrices_.emplace_back(floats);
            for (float& w : matrices_.back()) w = rng.uniform(-0.05f, 0.05f);
        }
        shape_ = shape;
        std::fprintf(stderr, "[bench_linear] dense %s: %zu matrices x %.1f MB, built in %.1f s\n",
                     shape_label(shape).c_str(), count, double(floats * sizeof(float)) / 1e6, seconds_since(start));
    }
    const float* next() { return matrices_[cursor_++ % matrices_.size()].data(); }
    size_t count() const { return matrices_.size(); }
    int64_t bytes_per_matrix() const { return shape_ ? shape_->k * shape_->n * int64_t(sizeof(float)) : 0; }
    void release() {
        matrices_.clear();
        shape_.reset();
        cursor_ = 0;
    }

private:
    std::optional<Shape> shape_;
    std::vector<std::vector<float>> matrices_;
    size_t cursor_ = 0;
};

// acc[i][j] += sum over `rows` weight rows r of x[i][r] * w[r][j], for Rows activation rows.
template <int Rows>
void dense_accumulate(const float* w, const float* x, int64_t x_stride, int64_t rows, float (*acc)[kDensePanel]) {
    float sum[Rows][kDensePanel];
    std::memcpy(sum, acc, sizeof sum);
    for (int64_t r = 0; r < rows; ++r)
        for (int i = 0; i < Rows; ++i) {
            const float xv = x[i * x_stride + r];
            for (int j = 0; j < kDensePanel; ++j) sum[i][j] += xv * w[r * kDensePanel + j];
        }
    std::memcpy(acc, sum, sizeof sum);
}

// y[:, panel] for one panel: K blocks outermost so a block is read from memory once for all rows.
void dense_panel(const float* w, const float* x, int64_t m, int64_t k, int64_t n, float* y) {
    float acc[kDenseMaxBatch][kDensePanel];
    std::memset(acc, 0, size_t(m) * sizeof acc[0]);  // only the rows in use
    for (int64_t k0 = 0; k0 < k; k0 += kDenseKBlock) {
        const int64_t rows = std::min(kDenseKBlock, k - k0);
        for (int64_t i0 = 0; i0 < m; i0 += kDenseRowBlock) {
            const float* xb = x + i0 * k + k0;
            const float* wb = w + k0 * kDensePanel;
            switch (std::min<int64_t>(kDenseRowBlock, m - i0)) {
                case 1: dense_accumulate<1>(wb, xb, k, rows, acc + i0); break;
                case 2: dense_accumulate<2>(wb, xb, k, rows, acc + i0); break;
                case 3: dense_accumulate<3>(wb, xb, k, rows, acc + i0); break;
                default: dense_accumulate<4>(wb, xb, k, rows, acc + i0); break;
            }
        }
    }
    for (int64_t i = 0; i < m; ++i) std::memcpy(y + i * n, acc[i], sizeof acc[i]);
}

// y (m x n) = x (m x k) * W, W panel-major; the panels are split evenly over `threads` threads.
void dense_forward(ThreadTeam& team, int threads, const float* w, const float* x, int64_t m, int64_t k, int64_t n,
                   float* y) {
    const int64_t panels = n / kDensePanel;
    team.run(threads, [&](int t) {
        for (int64_t p = panels * t / threads; p < panels * (t + 1) / threads; ++p)
            dense_panel(w + p * k * kDensePanel, x, m, k, n, y + p * kDensePanel);
    });
}

// ---------------------------------------------------------------------------------------------
// Running the rows
// ---------------------------------------------------------------------------------------------

class Bench {
public:
    Bench(std::vector<Case> cases, size_t rotation_bytes)
        : cases_(std::move(cases)), rotation_bytes_(rotation_bytes), team_(hardware_threads()) {
        int64_t most_x = 0, most_y = 0;
        for (const Case& c : cases_) {
            most_x = std::max(most_x, c.batch * c.shape().k);
            most_y = std::max(most_y, c.batch * c.shape().n);
        }
        // The same activations for every row; they stay in cache, as in a real forward (they are small next to W).
        Rng rng(42);
        x_.resize(size_t(most_x));
        for (float& v : x_) v = rng.uniform(-1.0f, 1.0f);
        y_.assign(size_t(most_y), 0.0f);  // written once here so no timed forward faults in fresh pages
    }

    std::vector<Case>& cases() { return cases_; }
    BandwidthProbe& probe() { return probe_; }

    void run(benchmark::State& state, Case& c) {
        if (c.path == Path::kDenseF32) run_dense(state, c);
        else run_qjit(state, c);
    }

private:
    // The probe, run right before the kernel is timed (reused if younger than kProbeMaxAgeSeconds).
    double probe_gbps(int threads) {
        const bool fresh = last_probe_threads_ == threads && seconds_since(last_probe_time_) < kProbeMaxAgeSeconds;
        if (!fresh) {
            last_probe_gbps_ = probe_.peak(threads, kProbeSweeps);
            last_probe_threads_ = threads;
            last_probe_time_ = Clock::now();
        }
        return last_probe_gbps_;
    }

    // Times forward() once per iteration; the total is kept for the counters. False if a forward failed.
    template <typename Forward>
    static bool timed_loop(benchmark::State& state, Forward&& forward, double* total_seconds) {
        for (auto _ : state) {
            const auto start = Clock::now();
            const bool ok = forward();
            const double seconds = seconds_since(start);
            if (!ok) return false;
            state.SetIterationTime(seconds);
            *total_seconds += seconds;
        }
        return true;
    }

    static void report(benchmark::State& state, Case& c, int64_t bytes, size_t rotation, double probe, double seconds) {
        const double gbps = double(bytes) * double(state.iterations()) / seconds / 1e9;
        state.counters["GB/s"] = gbps;
        state.counters["probe_GB/s"] = probe;
        state.counters["ratio"] = gbps / probe;
        state.counters["rotation"] = double(rotation);
        state.SetLabel(c.kernel);
    }

    void run_qjit(benchmark::State& state, Case& c) {
        dense_.release();
        const LayerSetKey key{{c.path, c.threads, c.tiling, c.batch}, c.shape(), c.bits, c.group};
        std::string error;
        if (!layers_.prepare(key, rotation_bytes_, &error)) {
            state.SkipWithError(error.c_str());
            return;
        }
        c.kernel = layers_.kernel();
        c.resolved_threads = layers_.threads();
        const double probe = probe_gbps(c.resolved_threads);
        double seconds = 0;
        const bool ok = timed_loop(
            state, [&] { return qjit_linear_forward(layers_.next(), x_.data(), c.batch, y_.data()) == QJIT_OK; }, &seconds);
        if (!ok) {
            state.SkipWithError((std::string("qjit_linear_forward: ") + qjit_last_error()).c_str());
            return;
        }
        report(state, c, layers_.bytes_per_layer(), layers_.count(), probe, seconds);
    }

    void run_dense(benchmark::State& state, Case& c) {
        layers_.release();
        const Shape shape = c.shape();
        dense_.prepare(shape, rotation_bytes_);
        c.kernel = kDenseKernelName;
        c.resolved_threads = c.threads == kAllThreads ? team_.size() : c.threads;
        const double probe = probe_gbps(c.resolved_threads);
        double seconds = 0;
        timed_loop(
            state,
            [&] {
                dense_forward(team_, c.resolved_threads, dense_.next(), x_.data(), c.batch, shape.k, shape.n, y_.data());
                return true;
            },
            &seconds);
        report(state, c, dense_.bytes_per_matrix(), dense_.count(), probe, seconds);
    }

    std::vector<Case> cases_;
    size_t rotation_bytes_;
    BandwidthProbe probe_;  // one buffer, allocated and touched once, for the whole run
    ThreadTeam team_;
    QjitLayerSet layers_;
    DenseWeightSet dense_;
    std::vector<float> x_;
    std::vector<float> y_;
    double last_probe_gbps_ = 0;
    int last_probe_threads_ = -1;
    Clock::time_point last_probe_time_{};
};

// ---------------------------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------------------------

// The console output as usual, plus each row's median (or its only run) kept for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
public:
    SummaryReporter(std::vector<Case>& cases, BandwidthProbe& probe, size_t rotation_bytes, bool color)
        : ConsoleReporter(color ? OO_ColorTabular : OO_Tabular),
          cases_(cases),
          probe_(probe),
          rotation_bytes_(rotation_bytes) {
        for (size_t i = 0; i < cases.size(); ++i) index_[cases[i].name] = i;
    }

    // Google Benchmark's header, then the machine's peaks (read bandwidth, int8 dot products) for orientation.
    bool ReportContext(const Context& context) override {
        if (!ConsoleReporter::ReportContext(context)) return false;
        std::printf("qjit %s, %d hardware threads; probe buffer %zu MiB; rotation >= %zu MiB per row\n", qjit_version(),
                    hardware_threads(), probe_.buffer_bytes() / kMiB, rotation_bytes_ / kMiB);
        for (int threads : {1, hardware_threads()})
            std::printf("read probe (%s loads, best of %d sweeps), %d thread(s): %.1f GB/s\n", probe_.load_width(),
                        BandwidthProbe::kPeakSweeps, threads, probe_.peak(threads));
        if (PeakProbe::available()) {
            PeakProbe int8_peak;
            for (int threads : {1, hardware_threads()})
                std::printf("int8 dot-product peak (%s, best of %d runs), %d thread(s): %.3f T MAC/s\n",
                            int8_peak.instruction(), PeakProbe::kPeakRuns, threads, int8_peak.peak(threads) * 1e-12);
        }
        std::fflush(stdout);
        return true;
    }

    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const Run& run : runs) {
            const auto found = index_.find(run.run_name.function_name);
            if (found == index_.end()) continue;
            Case& c = cases_[found->second];
            c.reported = true;
            if (run.error_occurred) {
                c.error = run.error_message;
                continue;
            }
            const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
            if (!median && (run.run_type != Run::RT_Iteration || c.has_median)) continue;
            c.has_median = c.has_median || median;
            c.micros = run.GetAdjustedRealTime();  // rows are registered in microseconds
            c.gbps = counter(run, "GB/s");
            c.probe_gbps = counter(run, "probe_GB/s");
            c.ratio = counter(run, "ratio");
        }
    }

private:
    static double counter(const Run& run, const char* name) {
        const auto found = run.counters.find(name);
        return found == run.counters.end() ? 0.0 : found->second.value;
    }

    std::vector<Case>& cases_;
    BandwidthProbe& probe_;
    size_t rotation_bytes_;
    std::map<std::string, size_t> index_;
};

int bits_rank(int bits) {
    const auto* found = std::find(std::begin(kBitWidths), std::end(kBitWidths), bits);
    return int(found - std::begin(kBitWidths));  // dense (32 bits) sorts last
}

void print_row(const Case& c) {
    const Shape shape = c.shape();
    const std::string threads = c.resolved_threads > 0 ? std::to_string(c.resolved_threads) : threads_label(c.threads);
    const std::string bits = c.path == Path::kDenseF32 ? "fp32" : std::to_string(c.bits);
    const std::string group = c.path == Path::kDenseF32 ? "-" : std::to_string(c.group);
    std::string path = path_name(c.path);
    if (!c.tiling.empty()) path += " " + c.tiling;
    if (!c.error.empty()) {
        std::printf("| %s | %lld | %s | %s | %s | %s | skipped: %s | | | | |\n", shape_label(shape).c_str(),
                    (long long)c.batch, threads.c_str(), bits.c_str(), group.c_str(), path.c_str(), c.error.c_str());
        return;
    }
    std::printf("| %s | %lld | %s | %s | %s | %s | %s | %.1f | %.1f | %.1f | %.2f |\n", shape_label(shape).c_str(),
                (long long)c.batch, threads.c_str(), bits.c_str(), group.c_str(), path.c_str(), c.kernel.c_str(),
                c.micros, c.gbps, c.probe_gbps, c.ratio);
}

void print_table(const char* title, std::vector<const Case*> rows) {
    if (rows.empty()) return;
    std::printf("\n### %s\n\n", title);
    std::printf("| shape | batch | threads | bits | group | path | kernel | median µs | GB/s | probe GB/s | ratio |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Case* c : rows) print_row(*c);
}

// Best and worst tiling per (batch, path): how much the tiling knobs matter. Ranked by ratio to the
// probe, which cancels the bandwidth drift between rows, and by plain time.
void print_spread(const std::vector<Case>& cases) {
    std::map<std::pair<int64_t, Path>, std::vector<const Case*>> groups;
    for (const Case& c : cases)
        if (c.section == Section::kSpread && c.reported && c.error.empty()) groups[{c.batch, c.path}].push_back(&c);
    if (groups.empty()) return;
    std::printf("\n### Tiling spread (%s q%dg%d, all threads)\n\n", shape_label(kSpreadShape).c_str(), kTargetBits,
                kTargetGroup);
    auto by_ratio = [](const Case* a, const Case* b) { return a->ratio < b->ratio; };
    auto by_time = [](const Case* a, const Case* b) { return a->micros < b->micros; };
    for (const auto& [key, rows] : groups) {
        const auto [low, high] = std::minmax_element(rows.begin(), rows.end(), by_ratio);
        const auto [fast, slow] = std::minmax_element(rows.begin(), rows.end(), by_time);
        std::printf("- batch %lld, %s, %zu tilings: ratio best %.2f (%s), worst %.2f (%s): %.2fx; "
                    "time fastest %.1f µs (%s), slowest %.1f µs (%s): %.2fx\n",
                    (long long)key.first, path_name(key.second), rows.size(), (*high)->ratio, (*high)->tiling.c_str(),
                    (*low)->ratio, (*low)->tiling.c_str(), (*high)->ratio / (*low)->ratio, (*fast)->micros,
                    (*fast)->tiling.c_str(), (*slow)->micros, (*slow)->tiling.c_str(), (*slow)->micros / (*fast)->micros);
    }
}

// The batch-16 time over the batch-1 time of the same layer, all threads, 4-bit g128.
void print_batch_scaling(const std::vector<Case>& cases) {
    std::vector<std::string> lines;
    for (const Case& b16 : cases) {
        if (b16.section == Section::kSpread || b16.batch != 16 || b16.threads != kAllThreads || b16.bits != kTargetBits ||
            (b16.path != Path::kDenseF32 && b16.group != kTargetGroup) || !b16.reported || !b16.error.empty())
            continue;
        for (const Case& b1 : cases)
            if (b1.section == b16.section && b1.path == b16.path && b1.shape_index == b16.shape_index &&
                b1.threads == b16.threads && b1.bits == b16.bits && b1.group == b16.group && b1.batch == 1 &&
                b1.reported && b1.error.empty()) {
                char line[160];
                std::snprintf(line, sizeof line, "- %s %s: %.2fx (%.1f µs / %.1f µs)", shape_label(b16.shape()).c_str(),
                              path_name(b16.path), b16.micros / b1.micros, b16.micros, b1.micros);
                lines.push_back(line);
            }
    }
    if (lines.empty()) return;
    std::printf("\n### Batch 16 time / batch 1 time (q%dg%d, all threads)\n\n", kTargetBits, kTargetGroup);
    for (const std::string& line : lines) std::printf("%s\n", line.c_str());
}

void print_summary(const std::vector<Case>& cases, size_t rotation_bytes) {
    auto order = [](const Case* a, const Case* b) {
        auto key = [](const Case* c) {
            return std::make_tuple(bits_rank(c->bits), -c->group, c->shape_index, c->batch,
                                   c->threads == kAllThreads ? 1 : 0, int(c->path), c->tiling);
        };
        return key(a) < key(b);
    };
    std::vector<const Case*> sections[3];
    for (const Case& c : cases)
        if (c.reported) sections[int(c.section)].push_back(&c);
    for (auto& rows : sections) std::stable_sort(rows.begin(), rows.end(), order);

    std::printf("\n## bench_linear summary\n\nCold cache: each row rotates over >= %zu MiB of distinct weights. "
                "Medians over the repetitions; GB/s = bytes one forward streams / time; ratio = GB/s / probe GB/s "
                "(same thread count, measured just before the row).\n",
                rotation_bytes / kMiB);
    print_table("qjit", sections[int(Section::kQjit)]);
    print_table("Baselines (qjit portable path, dense fp32)", sections[int(Section::kBaseline)]);
    print_table("Tiling spread rows", sections[int(Section::kSpread)]);
    print_spread(cases);
    print_batch_scaling(cases);
}

// Google Benchmark applies --benchmark_color only to the reporter it makes itself; this one
// follows the same rule: the flag's value, else color when stdout is a terminal.
bool use_color(int argc, char** argv) {
    constexpr std::string_view kFlag = "--benchmark_color=";
    std::string_view value = "auto";
    for (int i = 1; i < argc; ++i)
        if (std::string_view(argv[i]).starts_with(kFlag)) value = std::string_view(argv[i]).substr(kFlag.size());
    if (value == "false" || value == "no" || value == "0") return false;
    if (value == "true" || value == "yes" || value == "1") return true;
    return isatty(fileno(stdout)) != 0;
}

struct Options {
    bool full = false;
    size_t rotation_bytes = kDefaultRotationMiB * kMiB;
};

// Takes this program's own flags out of argv (Google Benchmark gets the rest).
Options take_own_flags(int* argc, char** argv) {
    Options options;
    int kept = 1;
    for (int i = 1; i < *argc; ++i) {
        const std::string_view arg(argv[i]);
        constexpr std::string_view kRotation = "--rotation-mib=";
        if (arg == "--full") {
            options.full = true;
        } else if (arg.starts_with(kRotation)) {
            options.rotation_bytes = size_t(std::max(1L, std::atol(argv[i] + kRotation.size()))) * kMiB;
        } else {
            if (arg == "--help")
                std::printf("bench_linear [--full] [--rotation-mib=N] [Google Benchmark flags]\n"
                            "  --full            the whole matrix (default: the rows behind the targets)\n"
                            "  --rotation-mib=N  distinct weight bytes each row rotates over (default %zu)\n\n",
                            kDefaultRotationMiB);
            argv[kept++] = argv[i];
        }
    }
    *argc = kept;
    return options;
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = take_own_flags(&argc, argv);
    std::vector<char*> args{argv[0]};
    for (const char* flag : kDefaultBenchmarkFlags) args.push_back(const_cast<char*>(flag));
    args.insert(args.end(), argv + 1, argv + argc);
    int benchmark_argc = int(args.size());
    benchmark::Initialize(&benchmark_argc, args.data());
    if (benchmark::ReportUnrecognizedArguments(benchmark_argc, args.data())) return 1;

    Bench bench(make_cases(options.full), options.rotation_bytes);
    for (Case& c : bench.cases())
        benchmark::RegisterBenchmark(c.name.c_str(), [&bench, &c](benchmark::State& state) { bench.run(state, c); })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);

    SummaryReporter reporter(bench.cases(), bench.probe(), options.rotation_bytes, use_color(benchmark_argc, args.data()));
    benchmark::RunSpecifiedBenchmarks(&reporter);
    print_summary(bench.cases(), options.rotation_bytes);
    benchmark::Shutdown();
    return 0;
}
