// bench_tp_mlp: a tensor-parallel MLP forward, naive (all-gather, permute, re-chunk, all-reduce)
// against TP-aware (the all-reduce only), as in Hoque et al., "TP-aware dequantization" (2024), on
// this machine's cores: each rank is a thread with its own single-threaded qjit_context, pinned to
// its own core, and the ranks talk through an in-process communicator that moves the data through
// shared memory (bench/in_process_communicator.hpp).
//
// The MLPs are the paper's: Llama-2-70B (8192 -> 28672 -> 8192, SwiGLU) and Granite-20B
// (6144 -> 24576 -> 6144, GELU), random GPTQ tensors at 4-bit g128 with act-order (a shuffled
// g_idx in every layer). For each MLP, tensor-parallel size and batch, both algorithms run the same
// forward `repeats` times in alternation, each call started on every rank at once (a barrier): the
// table shows the median of the slowest rank's wall time, the medians of where it went
// (qjit_tp_timing, averaged over the ranks) and the bytes a rank sends (qjit_tp_mlp_traffic). The
// forwards run back to back; a rank's weights (80-370 MB) are larger than a server's L3, so each
// call streams them from memory: warm runs that are in effect cold. The collectives are also timed
// alone, every rank arriving at once: a forward's communicate time is that plus the wait for the
// slowest rank.
//
// A memory read probe (one thread, every core) runs before each timed size and at the end: the
// forward is bandwidth-bound at small batches, and a VM's bandwidth on several cores drifts, so a
// TP=2 over TP=1 speedup means something only next to it.
//
// Before any timing, every configuration's y at every batch is checked against the TP=1 y of the
// same x, and the collectives the communicator saw against what qjit_tp_mlp_traffic says. The
// --check-tp size (4 by default, more ranks than this machine's cores) is checked and not timed:
// oversubscribed ranks take turns on a core.
//
//   bench_tp_mlp                                  both MLPs, TP 1 and 2, batch 1, 2, 4, 8, 16, 30 repeats
//   bench_tp_mlp --quick                          batch 1 and 16, 7 repeats
//   bench_tp_mlp --shapes=granite-20b --batches=1,4 --repeats=50 --tp=1,2 --check-tp=0
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_common.hpp"
#include "in_process_communicator.hpp"
#include "qjit/qjit.h"
#include "qjit/qjit_tp.h"
#include "tools/bandwidth_probe.hpp"
#include "tools/random_gptq.hpp"

namespace {

using qjit_bench::median;
using qjit_bench::parse_list;

struct MlpShape {
    const char* name;
    qjit_mlp_kind kind;
    int64_t k1, n1, n2;
};
// The MLP of the shipped model config `config` (configs/models): SwiGLU when it has a gate_proj
// (gate and up K1 x N1, down_proj N1 x N2), else GELU over mlp_up and mlp_down.
MlpShape mlp_shape(const char* name, const char* config) {
    const qjit_models::ModelConfig model = qjit_models::shipped_model_config(config);
    const auto layer = [&](const char* wanted) {
        for (const qjit_models::LinearShape& l : model.linear)
            if (l.name == wanted) return l;
        std::fprintf(stderr, "bench_tp_mlp: %s has no layer %s\n", config, wanted);
        std::exit(2);
    };
    const bool gated = std::any_of(model.linear.begin(), model.linear.end(),
                                   [](const qjit_models::LinearShape& l) { return l.name == "gate_proj"; });
    const qjit_models::LinearShape up = layer(gated ? "up_proj" : "mlp_up");
    return {name, gated ? QJIT_MLP_SWIGLU : QJIT_MLP_GELU, up.k, up.n, layer(gated ? "down_proj" : "mlp_down").n};
}

// The paper's MLPs: Llama-2-70B's and Granite-20B's.
const std::vector<MlpShape>& mlp_shapes() {
    static const std::vector<MlpShape> shapes = {mlp_shape("llama-70b", "llama-2-70b"),
                                                 mlp_shape("granite-20b", "granite-20b")};
    return shapes;
}
constexpr int kBits = 4;
constexpr int kGroup = 128;
constexpr int kWarmupCalls = 2;
// y of any split against TP=1's, relative to max |y|: the sums run in another order, and an
// activation may land on the other side of an int8 rounding step.
constexpr double kTolerance = 1e-3;
constexpr qjit_tp_algorithm kAlgorithms[] = {QJIT_TP_NAIVE, QJIT_TP_AWARE};

struct Options {
    std::vector<std::string> shapes = {"llama-70b", "granite-20b"};
    std::vector<int64_t> batches = {1, 2, 4, 8, 16};
    int repeats = 30;
    std::vector<int> timed_tp = {1, 2};
    int check_tp = 4;  // 0: none
};

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "bench_tp_mlp: %s failed: %s\n", what, qjit_last_error());
    std::exit(1);
}

void check(qjit_status status, const char* what) {
    if (status != QJIT_OK) die(what);
}

Options parse(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg(argv[i]);
        auto value = [&](std::string_view flag) { return arg.starts_with(flag) ? argv[i] + flag.size() : nullptr; };
        if (arg == "--quick") {
            options.batches = {1, 16};
            options.repeats = 7;
        } else if (const char* v = value("--shapes=")) options.shapes = parse_list<std::string>("bench_tp_mlp", v);
        else if (const char* v = value("--batches=")) options.batches = parse_list<int64_t>("bench_tp_mlp", v);
        else if (const char* v = value("--repeats=")) options.repeats = std::max(1, std::atoi(v));
        else if (const char* v = value("--tp=")) options.timed_tp = parse_list<int>("bench_tp_mlp", v);
        else if (const char* v = value("--check-tp=")) options.check_tp = std::atoi(v);
        else {
            std::fprintf(stderr, "usage: bench_tp_mlp [--quick] [--shapes=llama-70b,granite-20b] [--batches=1,2,4,8,16] "
                                 "[--repeats=30] [--tp=1,2] [--check-tp=4 (0: none)]\n");
            std::exit(2);
        }
    }
    for (const std::string& name : options.shapes)
        if (std::none_of(mlp_shapes().begin(), mlp_shapes().end(), [&](const MlpShape& s) { return name == s.name; })) {
            std::fprintf(stderr, "bench_tp_mlp: unknown shape '%s' (llama-70b, granite-20b)\n", name.c_str());
            std::exit(2);
        }
    if (std::find(options.timed_tp.begin(), options.timed_tp.end(), 1) == options.timed_tp.end())
        options.timed_tp.insert(options.timed_tp.begin(), 1);  // the reference y and the speedup's base
    std::sort(options.timed_tp.begin(), options.timed_tp.end());
    return options;
}

// A whole MLP's random GPTQ tensors, act-order in every layer.
struct RandomMlp {
    qjit_tools::GptqTensors up, gate, down;
    qjit_mlp_gptq view{};

    explicit RandomMlp(const MlpShape& shape) {
        const auto layer = [](int64_t k, int64_t n, uint64_t seed, qjit_tools::GptqTensors* tensors) {
            qjit_tools::random_gptq(k, n, kBits, kGroup, seed, tensors);
            qjit_tools::shuffle_groups(k, kGroup, seed + 1, tensors);
        };
        layer(shape.k1, shape.n1, 11, &up);
        if (shape.kind == QJIT_MLP_SWIGLU) layer(shape.k1, shape.n1, 23, &gate);
        layer(shape.n1, shape.n2, 37, &down);
        view.kind = shape.kind;
        view.k1 = shape.k1;
        view.n1 = shape.n1;
        view.n2 = shape.n2;
        view.up = up.view;
        view.gate = gate.view;
        view.down = down.view;
    }
};

// One timed forward on one rank.
using Sample = qjit_tp_timing;

// What one rank of one tensor-parallel size measured, per algorithm and batch.
struct RankResult {
    std::vector<std::vector<Sample>> samples[2];  // [algorithm][batch][repeat]
    std::vector<qjit_tp_traffic> traffic[2];       // [algorithm][batch]
    int64_t weight_bytes[2] = {0, 0};
    double max_error[2] = {0, 0};  // |y - reference| over max |reference|, all batches
    // The collectives the communicator saw in each algorithm's checked forwards, summed over the
    // batches: what qjit_tp_mlp_traffic claims, counted where the data moves.
    qjit_bench::CollectiveCounts counted[2];
    std::vector<std::vector<float>> y;  // TP=1 only: the aware y of each batch, the reference
    // The collectives alone, every rank arriving at once (median us per batch): what a forward's
    // communicate time holds besides waiting for the slowest rank.
    std::vector<double> all_gather_alone_us, all_reduce_alone_us;
};

// The median time of `calls` calls of `collective`, each started on every rank at once.
template <typename Collective>
double time_collective(qjit_bench::InProcessGroup* group, int calls, Collective collective) {
    std::vector<double> us;
    for (int call = -kWarmupCalls; call < calls; ++call) {
        group->barrier();
        const auto start = std::chrono::steady_clock::now();
        collective();
        const double elapsed = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
        if (call >= 0) us.push_back(elapsed);
    }
    return median(us);
}

// The system's load averages, as /proc/loadavg gives them: other processes make the ranks wait.
std::string load_average() {
    char text[128] = "unknown";
    if (std::FILE* file = std::fopen("/proc/loadavg", "r")) {
        if (std::fgets(text, sizeof(text), file) == nullptr) std::strcpy(text, "unknown");
        std::fclose(file);
    }
    std::string line(text);
    while (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
}

// The memory read bandwidth one thread and every core reach (the probe's buffer is freed on return).
void print_read_probe(const char* when) {
    qjit_tools::BandwidthProbe probe;
    const int cores = qjit_bench::hardware_threads();
    const double one = probe.peak(1);
    const double all = probe.peak(cores);
    std::printf("memory read probe %s (%s loads, best of %d sweeps): %.1f GB/s on 1 thread, %.1f GB/s on %d\n", when,
                probe.load_width(), qjit_tools::BandwidthProbe::kPeakSweeps, one, all, cores);
}

void pin_to_core(int core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

double relative_error(const std::vector<float>& y, const std::vector<float>& reference) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        worst = std::max(worst, std::fabs(double(y[i]) - double(reference[i])));
        scale = std::max(scale, std::fabs(double(reference[i])));
    }
    return std::isfinite(worst) ? worst / scale : INFINITY;
}

// Rank `rank` of `tp`: makes both algorithms' shards, checks y against `reference` (or records it,
// at TP=1), and with `timed` runs the alternating forwards. Every rank runs the same sequence of
// collectives.
void run_rank(const RandomMlp& mlp, const Options& o, int tp, int rank, bool timed, qjit_bench::InProcessGroup* group,
              const std::vector<float>& x, const std::vector<std::vector<float>>* reference, RankResult* result) {
    if (tp <= qjit_bench::hardware_threads()) pin_to_core(rank);
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = 1;
    options.tuning_db_path = "";              // tune in memory; both algorithms' same-shaped shards share a choice
    options.tuning_budget_ms = timed ? -1 : 0;  // the check-only size takes the model's pick
    qjit_context* context = nullptr;
    check(qjit_context_create(&options, &context), "qjit_context_create");
    qjit_tp_mlp* shards[2] = {nullptr, nullptr};
    for (int a = 0; a < 2; ++a) {
        check(qjit_tp_mlp_create_from_gptq(context, &mlp.view, rank, tp, kAlgorithms[a], &shards[a]),
              "qjit_tp_mlp_create_from_gptq");
        qjit_tp_mlp_info info;
        check(qjit_tp_mlp_get_info(shards[a], &info), "qjit_tp_mlp_get_info");
        result->weight_bytes[a] = info.weight_bytes;
    }
    const qjit_communicator comm = group->communicator(rank);
    const size_t batches = o.batches.size();
    std::vector<float> y;
    for (int a : {1, 0})  // TP-aware first: at TP=1 its y is the reference
        for (size_t b = 0; b < batches; ++b) {
            const int64_t m = o.batches[b];
            y.assign(size_t(m * mlp.view.n2), 0.0f);
            const qjit_bench::CollectiveCounts before = group->counts(rank);
            check(qjit_tp_mlp_forward(shards[a], &comm, x.data(), m, y.data(), nullptr), "qjit_tp_mlp_forward");
            const qjit_bench::CollectiveCounts& after = group->counts(rank);
            qjit_bench::CollectiveCounts& counted = result->counted[a];
            counted.all_reduces += after.all_reduces - before.all_reduces;
            counted.all_reduce_elements += after.all_reduce_elements - before.all_reduce_elements;
            counted.all_gathers += after.all_gathers - before.all_gathers;
            counted.all_gather_elements += after.all_gather_elements - before.all_gather_elements;
            result->traffic[a].emplace_back();
            check(qjit_tp_mlp_traffic(shards[a], m, &result->traffic[a].back()), "qjit_tp_mlp_traffic");
            if (reference == nullptr && kAlgorithms[a] == QJIT_TP_AWARE) result->y.push_back(y);
            const std::vector<float>& expected = reference != nullptr ? (*reference)[b] : result->y[b];
            result->max_error[a] = std::max(result->max_error[a], relative_error(y, expected));
        }
    if (timed)
        for (size_t b = 0; b < batches; ++b) {
            const int64_t m = o.batches[b];
            y.assign(size_t(m * mlp.view.n2), 0.0f);
            for (int a = 0; a < 2; ++a) result->samples[a].emplace_back();
            for (int call = -kWarmupCalls; call < o.repeats; ++call)
                for (int a = 0; a < 2; ++a) {
                    Sample sample;
                    group->barrier();  // every rank starts the call at once
                    check(qjit_tp_mlp_forward(shards[a], &comm, x.data(), m, y.data(), &sample), "qjit_tp_mlp_forward");
                    if (call >= 0) result->samples[a][b].push_back(sample);
                }
            if (tp == 1) continue;
            const int64_t c = mlp.view.n1 / tp;
            std::vector<float> gathered(size_t(m * mlp.view.n1)), hidden(size_t(m * c), 1.0f);
            result->all_gather_alone_us.push_back(time_collective(group, o.repeats, [&] {
                comm.all_gather_f32(comm.user, hidden.data(), gathered.data(), m * c);
            }));
            result->all_reduce_alone_us.push_back(time_collective(group, o.repeats, [&] {
                comm.all_reduce_sum_f32(comm.user, y.data(), m * mlp.view.n2);
            }));
        }
    for (qjit_tp_mlp* shard : shards) qjit_tp_mlp_destroy(shard);
    qjit_context_destroy(context);
}

// Runs `tp` ranks as threads and returns each rank's result.
std::vector<RankResult> run_ranks(const RandomMlp& mlp, const Options& o, int tp, bool timed, const std::vector<float>& x,
                                  const std::vector<std::vector<float>>* reference) {
    qjit_bench::InProcessGroup group(tp);
    std::vector<RankResult> results(static_cast<size_t>(tp));
    std::vector<std::thread> ranks;
    for (int r = 0; r < tp; ++r)
        ranks.emplace_back(run_rank, std::cref(mlp), std::cref(o), tp, r, timed, &group, std::cref(x), reference,
                           &results[size_t(r)]);
    for (std::thread& rank : ranks) rank.join();
    return results;
}

// The medians of one algorithm at one batch: the slowest rank's total per call, the parts averaged
// over the ranks.
struct Medians {
    double total_us = 0, compute_us = 0, permute_us = 0, communicate_us = 0;
};

Medians medians(const std::vector<RankResult>& ranks, int a, size_t b) {
    const size_t calls = ranks[0].samples[a][b].size();
    std::vector<double> total(calls), compute(calls), permute(calls), communicate(calls);
    for (size_t c = 0; c < calls; ++c)
        for (const RankResult& rank : ranks) {
            const Sample& s = rank.samples[a][b][c];
            total[c] = std::max(total[c], s.total_us);
            compute[c] += s.compute_us / double(ranks.size());
            permute[c] += s.permute_us / double(ranks.size());
            communicate[c] += s.communicate_us / double(ranks.size());
        }
    return {median(total), median(compute), median(permute), median(communicate)};
}

struct TableRow {
    const MlpShape* shape;
    int tp;
    int64_t batch;
    Medians algorithm[2];
    qjit_tp_traffic traffic[2];
    double all_gather_alone_us = 0, all_reduce_alone_us = 0;  // the slowest rank's median
    int64_t weight_bytes = 0;                                  // a rank's, TP-aware
};

void print_tables(const std::vector<TableRow>& rows) {
    std::printf("\n| MLP | TP | m | naive us | aware us | naive / aware | naive: communicate + permute us | "
                "aware: communicate us | removed us | gain us (naive - aware) | compute us (naive, aware) | "
                "per rank sent, naive | per rank sent, aware | collectives naive / aware |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const TableRow& r : rows) {
        const Medians& naive = r.algorithm[0];
        const Medians& aware = r.algorithm[1];
        const double removed = naive.communicate_us + naive.permute_us - aware.communicate_us;
        std::printf("| %s | %d | %lld | %.0f | %.0f | %.3fx | %.1f + %.1f | %.1f | %.1f | %.1f | %.0f, %.0f | %lld B | "
                    "%lld B | %dAG+%dAR / %dAG+%dAR |\n",
                    r.shape->name, r.tp, (long long)r.batch, naive.total_us, aware.total_us,
                    naive.total_us / aware.total_us, naive.communicate_us, naive.permute_us, aware.communicate_us,
                    removed, naive.total_us - aware.total_us, naive.compute_us, aware.compute_us,
                    (long long)r.traffic[0].bytes_sent, (long long)r.traffic[1].bytes_sent, r.traffic[0].all_gathers,
                    r.traffic[0].all_reduces, r.traffic[1].all_gathers, r.traffic[1].all_reduces);
    }
    std::printf("\nThe collectives alone, every rank arriving at once (median us; a forward's communicate time\n"
                "is this plus the wait for the slowest rank):\n\n"
                "| MLP | TP | m | all-gather of m x N1 | all-reduce of m x N2 |\n|---|---|---|---|---|\n");
    for (const TableRow& r : rows)
        if (r.tp > 1)
            std::printf("| %s | %d | %lld | %.1f | %.1f |\n", r.shape->name, r.tp, (long long)r.batch,
                        r.all_gather_alone_us, r.all_reduce_alone_us);
    std::printf("\nTP=N against TP=1 (N ranks on N cores against one rank on one core; median times):\n\n"
                "| MLP | TP | m | TP=1 us | naive us | naive speedup | aware us | aware speedup | weights read, TP=1 | "
                "weights read, TP=N aware (all ranks) |\n"
                "|---|---|---|---|---|---|---|---|---|---|\n");
    for (const TableRow& r : rows) {
        if (r.tp == 1) continue;
        const auto base = std::find_if(rows.begin(), rows.end(), [&](const TableRow& b) {
            return b.shape == r.shape && b.tp == 1 && b.batch == r.batch;
        });
        const double one = base->algorithm[1].total_us;
        std::printf("| %s | %d | %lld | %.0f | %.0f | %.2fx | %.0f | %.2fx | %.1f GB/s | %.1f GB/s |\n", r.shape->name,
                    r.tp, (long long)r.batch, one, r.algorithm[0].total_us, one / r.algorithm[0].total_us,
                    r.algorithm[1].total_us, one / r.algorithm[1].total_us, double(base->weight_bytes) / one * 1e-3,
                    double(r.tp * r.weight_bytes) / r.algorithm[1].total_us * 1e-3);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    {
        qjit_context_options options;
        qjit_context_options_init(&options);
        options.num_threads = 1;
        options.tuning_db_path = "";
        qjit_context* context = nullptr;
        const char* machine = nullptr;
        check(qjit_context_create(&options, &context), "qjit_context_create");
        check(qjit_context_describe(context, &machine), "qjit_context_describe");
        std::printf("qjit %s: %s\n", qjit_version(), machine);
        qjit_context_destroy(context);
    }
    std::printf("load average at start (/proc/loadavg): %s\n", load_average().c_str());
    std::printf("%d-bit g%d act-order; one rank per thread, one core each; median of %d forwards per algorithm, "
                "alternating, after %d warm-up calls; weights stream from memory on every call\n",
                kBits, kGroup, o.repeats, kWarmupCalls);

    std::vector<TableRow> rows;
    bool all_correct = true;
    for (const MlpShape& shape : mlp_shapes()) {
        if (std::find(o.shapes.begin(), o.shapes.end(), shape.name) == o.shapes.end()) continue;
        const RandomMlp mlp(shape);
        const int64_t max_batch = *std::max_element(o.batches.begin(), o.batches.end());
        std::vector<float> x(size_t(max_batch * shape.k1));
        qjit_tools::Rng rng(5);
        for (float& value : x) value = rng.uniform(-1.0f, 1.0f);

        std::vector<std::vector<float>> reference;
        std::vector<int> sizes = o.timed_tp;
        if (o.check_tp > 0 && std::find(sizes.begin(), sizes.end(), o.check_tp) == sizes.end()) sizes.push_back(o.check_tp);
        for (int tp : sizes) {
            const bool timed = std::find(o.timed_tp.begin(), o.timed_tp.end(), tp) != o.timed_tp.end();
            if (timed) print_read_probe(("before " + std::string(shape.name) + " TP=" + std::to_string(tp)).c_str());
            const std::vector<RankResult> ranks = run_ranks(mlp, o, tp, timed, x, tp == 1 ? nullptr : &reference);
            if (tp == 1) reference = ranks[0].y;
            for (int a = 0; a < 2; ++a) {
                double error = 0;
                for (const RankResult& rank : ranks) error = std::max(error, rank.max_error[a]);
                const bool correct = error <= kTolerance;
                all_correct = all_correct && correct;
                // qjit_tp_mlp_traffic's claim over the checked forwards, against what rank 0's communicator saw.
                int64_t claimed_reduces = 0, claimed_gathers = 0, claimed_reduce_elements = 0, claimed_gather_elements = 0;
                for (const qjit_tp_traffic& t : ranks[0].traffic[a]) {
                    claimed_reduces += t.all_reduces;
                    claimed_gathers += t.all_gathers;
                    claimed_reduce_elements += t.all_reduce_bytes / int64_t(sizeof(float));
                    claimed_gather_elements += t.all_gather_bytes / int64_t(sizeof(float)) / tp;  // each rank's part
                }
                const qjit_bench::CollectiveCounts& counted = ranks[0].counted[a];
                const bool as_claimed = counted.all_reduces == claimed_reduces && counted.all_gathers == claimed_gathers &&
                                        counted.all_reduce_elements == claimed_reduce_elements &&
                                        counted.all_gather_elements == claimed_gather_elements;
                all_correct = all_correct && as_claimed;
                std::printf("check %s TP=%d%s %s: max |y - y(TP=1)| / max |y(TP=1)| = %.2e over batches, every rank: "
                            "%s; %.1f MB of weights per rank; the communicator saw %lld all-reduces of %lld floats and "
                            "%lld all-gathers of %lld floats sent in %zu forwards: %s\n",
                            shape.name, tp, timed ? "" : " (oversubscribed, not timed)",
                            a == 0 ? "naive" : "aware", error, correct ? "ok" : "WRONG",
                            double(ranks[0].weight_bytes[a]) * 1e-6, (long long)counted.all_reduces,
                            (long long)counted.all_reduce_elements, (long long)counted.all_gathers,
                            (long long)counted.all_gather_elements, ranks[0].traffic[a].size(),
                            as_claimed ? "as qjit_tp_mlp_traffic says" : "NOT as qjit_tp_mlp_traffic says");
            }
            if (!timed) continue;
            for (size_t b = 0; b < o.batches.size(); ++b) {
                TableRow row{&shape, tp, o.batches[b], {medians(ranks, 0, b), medians(ranks, 1, b)},
                             {ranks[0].traffic[0][b], ranks[0].traffic[1][b]}};
                row.weight_bytes = ranks[0].weight_bytes[1];
                for (const RankResult& rank : ranks)
                    if (tp > 1) {
                        row.all_gather_alone_us = std::max(row.all_gather_alone_us, rank.all_gather_alone_us[b]);
                        row.all_reduce_alone_us = std::max(row.all_reduce_alone_us, rank.all_reduce_alone_us[b]);
                    }
                rows.push_back(row);
            }
        }
    }
    std::printf("load average at end (/proc/loadavg): %s\n", load_average().c_str());
    print_read_probe("at the end");
    print_tables(rows);
    if (!all_correct) {
        std::fprintf(stderr, "bench_tp_mlp: a split's y differs from TP=1's beyond %.0e, or its collectives from "
                             "qjit_tp_mlp_traffic's\n", kTolerance);
        return 1;
    }
    return 0;
}
