// Small helpers shared by the benchmarks: byte units, the median, the tools' random generator, and
// a persistent team of threads for the benchmarks' own baseline kernels.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "models/model_config.hpp"
#include "tools/bandwidth_probe.hpp"
#include "tools/peak_probe.hpp"
#include "tools/random_gptq.hpp"

namespace qjit_bench {

inline constexpr size_t kMiB = size_t(1) << 20;
inline constexpr size_t kGiB = size_t(1) << 30;

inline int hardware_threads() { return std::max(1, int(std::thread::hardware_concurrency())); }

// A layer shape of a model, as the benchmarks list them: ("7b", "gate_proj,up_proj", 4096, 11008).
struct ModelLayerShape {
    std::string model;  // the name the benchmarks' --shapes take
    std::string layer;
    int64_t k, n;
};

// The distinct layer shapes of the shipped model config `config` (models/model_config.hpp), named
// `model`; only the layers whose names contain `only`, when given.
inline std::vector<ModelLayerShape> model_layers(const std::string& model, const std::string& config,
                                                 const std::string& only = "") {
    std::vector<qjit_models::LinearShape> linear = qjit_models::shipped_model_config(config).linear;
    std::erase_if(linear, [&](const qjit_models::LinearShape& l) { return l.name.find(only) == std::string::npos; });
    std::vector<ModelLayerShape> shapes;
    for (const qjit_models::LinearShape& l : qjit_models::distinct_shapes(linear)) shapes.push_back({model, l.name, l.k, l.n});
    return shapes;
}

// The layers of several models, in order.
inline std::vector<ModelLayerShape> joined(std::initializer_list<std::vector<ModelLayerShape>> parts) {
    std::vector<ModelLayerShape> all;
    for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
    return all;
}

// The median of a non-empty sample (the mean of the middle two for an even count).
inline double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const size_t mid = values.size() / 2;
    return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

using qjit_tools::Rng;

// A command-line list, "1,2,4" or "llama-70b,granite-20b", as integers or strings; a bad integer
// ends the program with a message naming `program` and the list.
template <typename T>
std::vector<T> parse_list(const char* program, const char* text) {
    std::vector<T> values;
    for (const char* p = text; *p;) {
        const char* end = std::strchr(p, ',');
        if (end == nullptr) end = p + std::strlen(p);
        if constexpr (std::is_same_v<T, std::string>) {
            values.emplace_back(p, end);
        } else {
            char* parsed = nullptr;
            values.push_back(T(std::strtoll(p, &parsed, 10)));
            if (parsed != end || parsed == p) {
                std::fprintf(stderr, "%s: bad list '%s'\n", program, text);
                std::exit(2);
            }
        }
        p = *end == ',' ? end + 1 : end;
    }
    return values;
}

// A persistent team of threads: run(count, task) calls task(i) for i in [0, count) on `count`
// members (the caller is member 0) and returns when all are done. Workers sleep on an atomic
// wait between jobs, so a dispatch costs a wake-up, not a thread creation. Every worker
// acknowledges every job, even one it has no part in, so none can lag into the next job.
class ThreadTeam {
public:
    explicit ThreadTeam(int size) {
        for (int i = 1; i < size; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
    }
    ~ThreadTeam() {
        stopping_.store(true);
        generation_.fetch_add(1, std::memory_order_release);
        generation_.notify_all();
        for (std::thread& worker : workers_) worker.join();
    }
    ThreadTeam(const ThreadTeam&) = delete;
    ThreadTeam& operator=(const ThreadTeam&) = delete;

    int size() const { return int(workers_.size()) + 1; }

    void run(int count, const std::function<void(int)>& task) {
        count = std::clamp(count, 1, size());
        if (count > 1) {
            task_ = &task;
            count_ = count;
            pending_.store(size() - 1);
            generation_.fetch_add(1, std::memory_order_release);
            generation_.notify_all();
        }
        task(0);
        for (int left = pending_.load(std::memory_order_acquire); left != 0;
             left = pending_.load(std::memory_order_acquire))
            pending_.wait(left);
    }

private:
    void worker_loop(int index) {
        uint64_t seen = 0;
        for (;;) {
            generation_.wait(seen, std::memory_order_acquire);
            seen = generation_.load(std::memory_order_acquire);
            if (stopping_.load()) return;
            if (index < count_) (*task_)(index);
            if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
        }
    }

    std::vector<std::thread> workers_;
    std::atomic<uint64_t> generation_{0};  // bumped once per job; workers wait for a new value
    std::atomic<int> pending_{0};          // workers that have not yet finished the current job
    std::atomic<bool> stopping_{false};
    const std::function<void(int)>* task_ = nullptr;
    int count_ = 0;
};

// The run's floors, printed as a header line: the read probe's loads and, per thread count, the
// int8 dot-product peak (MAC/s), measured here; no entries without AVX2.
inline std::map<int, double> print_floors(const qjit_tools::BandwidthProbe& probe, const std::vector<int>& threads) {
    std::map<int, double> peak_macs;
    std::printf("qjit %s; read probe: %s loads, best of %d sweeps; int8 peak: ", qjit_version(), probe.load_width(),
                qjit_tools::BandwidthProbe::kPeakSweeps);
    if (!qjit_tools::PeakProbe::available()) {
        std::printf("none (no AVX2)\n");
        return peak_macs;
    }
    qjit_tools::PeakProbe int8_peak;
    std::printf("%s, best of %d runs\n", int8_peak.instruction(), qjit_tools::PeakProbe::kPeakRuns);
    for (int t : threads) {
        peak_macs[t] = int8_peak.peak(t);
        std::printf("int8 peak, %d thread(s): %.3f T MAC/s\n", t, peak_macs[t] * 1e-12);
    }
    return peak_macs;
}

// A context tuned for `batch` on `threads` threads, int8 activations, without a tuning database
// (every layer tuned with the library's budget, or given `tiling` when not null); null with
// qjit_last_error() on failure.
inline qjit_context* batch_tuned_context(int threads, int64_t batch, const char* tiling = nullptr) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = threads;
    options.tuning_db_path = "";
    options.tuning_batch = batch;
    options.activations = QJIT_ACTIVATIONS_INT8;
    options.tiling = tiling;
    qjit_context* context = nullptr;
    return qjit_context_create(&options, &context) == QJIT_OK ? context : nullptr;
}

// A layer timed cold, as the tuner times it: the median over `rounds` rounds of `calls` calls at
// `batch` rows, and the best read-probe sweep of `sweeps` on the same threads before every round and
// after the last (this VM's bandwidth drifts, so only a probe interleaved with the rounds says what
// the layer could reach). micros < 0: qjit_linear_benchmark failed (qjit_last_error says why).
struct ColdTiming {
    double micros = -1, probe_gbps = 0;
};
inline ColdTiming time_cold(qjit_linear* layer, int64_t batch, int threads, qjit_tools::BandwidthProbe& probe,
                            int rounds, int calls, int sweeps) {
    ColdTiming timing;
    auto run_probe = [&] {
        for (int i = 0; i < sweeps; ++i)
            timing.probe_gbps =
                std::max(timing.probe_gbps, probe.measure(threads, qjit_tools::BandwidthProbe::kPeakWindowBytes));
    };
    std::vector<double> times;
    for (int r = 0; r < rounds; ++r) {
        run_probe();
        double us = 0;
        if (qjit_linear_benchmark(layer, batch, calls, 1, &us) != QJIT_OK) return timing;
        times.push_back(us);
    }
    run_probe();
    timing.micros = median(times);
    return timing;
}

// Layers timed naturally cold, as a model's forward finds them: `layers` (as many as it takes to
// overflow the caches) run one after another at `batch` rows, `rounds` times; the median of one
// call's time within a round, the median over rounds. Where flushing a layer's lines (time_cold)
// leaves the memory system in another state than streaming many layers does, the two differ.
// Negative when a forward fails.
inline double time_in_chain(const std::vector<qjit_linear*>& layers, int64_t batch, int64_t k, int64_t n,
                            int rounds) {
    std::vector<float> x(size_t(batch * k)), y(size_t(batch * n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 61) - 30) / 16.0f;
    std::vector<double> round_medians;
    for (int r = 0; r < rounds; ++r) {
        std::vector<double> calls;
        for (qjit_linear* layer : layers) {
            const auto start = std::chrono::steady_clock::now();
            if (qjit_linear_forward(layer, x.data(), batch, y.data()) != QJIT_OK) return -1;
            calls.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
        }
        round_medians.push_back(median(calls));
    }
    return median(round_medians);
}

}  // namespace qjit_bench
