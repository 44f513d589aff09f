// bench_low_rank: what a low-rank compensator (y = x Wq + (x U) V) costs on the CPU, next to the
// plain INT3 layer it corrects and to plain INT4, all measured in the same run.
//
// For each shape (Mixtral experts, Llama-2-7B) and batch (1 and 16), five layers over the same
// random GPTQ tensors: INT3 g64 (asymmetric, f16 scales); INT3 g64 + rank 16 INT8 compensator;
// + rank 32 INT8; + rank 32 INT3; and INT4 g128. U and V are random in [-0.05, 0.05]. Each layer is
// created in a context tuned for its batch (the library's budget, no database), then timed cold
// (weights flushed from every cache before each call, qjit_linear_benchmark). The five are timed
// round-robin, each round starting at the next variant, so this VM's drift hits them alike; a
// row is the median over rounds of each round's median. The read probe runs before every round
// and after the last; batch 1 rows are held against the best of those sweeps, as bench_cpu_speed's.
//
//   bench_low_rank                              every shape, batch 1 and 16, all cores
//   bench_low_rank --quick                      one shape, few rounds: a smoke run
//   bench_low_rank --shapes=mixtral|7b|4096x4096,...  --threads=N  --rounds=N  --repeats=N
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench_common.hpp"
#include "layer_race.hpp"
#include "qjit/qjit.h"
#include "tools/bandwidth_probe.hpp"
#include "tools/random_gptq.hpp"

namespace {

using qjit_bench::median;

using Shape = qjit_bench::ModelLayerShape;
// Mixtral-8x7B's expert layers and Llama-2-7B's layers (configs/models).
std::vector<Shape> model_shapes() {
    return qjit_bench::joined(
        {qjit_bench::model_layers("mixtral", "mixtral-8x7b", "expert_"), qjit_bench::model_layers("7b", "llama-2-7b")});
}
constexpr int64_t kBatches[] = {1, 16};
constexpr float kFactorRange = 0.05f;
constexpr double kTarget = 1.10;  // the bound on a compensated layer against plain INT3 at batch 1

// What one row's layer is. The first is the plain INT3 baseline, the last the INT4 reference.
struct Variant {
    const char* name;
    int bits, group, rank, factor_bits;
};
constexpr Variant kVariants[] = {
    {"INT3 g64", 3, 64, 0, 0},
    {"INT3 g64 + r16 INT8", 3, 64, 16, 8},
    {"INT3 g64 + r32 INT8", 3, 64, 32, 8},
    {"INT3 g64 + r32 INT3", 3, 64, 32, 3},
    {"INT4 g128", 4, 128, 0, 0},
};
constexpr size_t kNumVariants = std::size(kVariants);
constexpr size_t kInt3 = 0, kInt4 = kNumVariants - 1;

using Options = qjit_bench::RaceOptions;
constexpr const char* kProgram = "bench_low_rank";

[[noreturn]] void die(const char* what) { qjit_bench::race_die(kProgram, what); }

// U (K x rank) and V (rank x N), row-major as qjit_low_rank takes them.
struct Factors {
    std::vector<float> u, v;
};

Factors random_factors(int64_t k, int64_t n, int rank, uint64_t seed) {
    qjit_tools::Rng rng(seed);
    Factors factors{std::vector<float>(size_t(k * rank)), std::vector<float>(size_t(int64_t(rank) * n))};
    for (float& x : factors.u) x = rng.uniform(-kFactorRange, kFactorRange);
    for (float& x : factors.v) x = rng.uniform(-kFactorRange, kFactorRange);
    return factors;
}

using Row = qjit_bench::RaceRow<Variant>;

// The layers of one shape for one batch: tuned in their own context, then timed round-robin.
std::vector<Row> measure_group(const Shape& shape, int64_t batch, const Options& options, int threads,
                               const qjit_tools::GptqTensors& int3, const qjit_tools::GptqTensors& int4,
                               const std::vector<Factors>& factors, qjit_tools::BandwidthProbe& probe) {
    qjit_context* context = qjit_bench::race_context(options.threads, batch, kProgram);

    std::vector<qjit_linear*> layers(kNumVariants, nullptr);
    for (size_t i = 0; i < kNumVariants; ++i) {
        const Variant& variant = kVariants[i];
        const qjit_gptq_tensors& tensors = variant.bits == 3 ? int3.view : int4.view;
        if (variant.rank == 0) {
            if (qjit_linear_create_from_gptq(context, shape.k, shape.n, &tensors, &layers[i]) != QJIT_OK)
                die("qjit_linear_create_from_gptq");
        } else {
            const Factors& f = factors[i];
            const qjit_low_rank low_rank{variant.rank, variant.factor_bits, f.u.data(), f.v.data()};
            if (qjit_linear_create_with_low_rank(context, shape.k, shape.n, &tensors, &low_rank, &layers[i]) != QJIT_OK)
                die("qjit_linear_create_with_low_rank");
        }
    }
    return qjit_bench::race_rows(shape, batch, kVariants, layers, context, options, threads, probe, kProgram);
}

// The target on every compensated batch-1 row: how many meet it, and the worst one.
void print_target(const std::vector<Row>& rows) {
    const Row* worst = nullptr;
    double worst_ratio = 0;
    int checked = 0, met = 0;
    for (size_t group = 0; group + kNumVariants <= rows.size(); group += kNumVariants) {
        const Row& int3 = rows[group + kInt3];
        if (int3.batch != 1) continue;
        for (size_t i = group; i < group + kNumVariants; ++i) {
            if (rows[i].variant->rank == 0) continue;
            const double ratio = rows[i].micros / int3.micros;
            ++checked;
            met += ratio <= kTarget;
            if (!worst || ratio > worst_ratio) worst = &rows[i], worst_ratio = ratio;
        }
    }
    if (!worst) return;
    std::printf("\nTarget: a compensated layer at batch 1 <= %.2fx plain INT3: %d of %d rows meet it; worst %.3fx "
                "(%s %lldx%lld, %s)\n",
                kTarget, met, checked, worst_ratio, worst->shape->model.c_str(), (long long)worst->shape->k,
                (long long)worst->shape->n, worst->variant->name);
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = qjit_bench::parse_race_options(argc, argv, kProgram);
    const int threads = qjit_bench::race_threads(options.threads, kProgram);

    qjit_tools::BandwidthProbe probe;
    const double peak_gbps = probe.peak(threads);
    std::printf("# bench_low_rank: the cost of a low-rank compensator (y = x Wq + (x U) V)\n\n"
                "qjit %s on %s, %d thread(s). Each layer tuned for its batch (default budget, no database), "
                "timed cold (weights flushed before every call): median of %d round-robin rounds over the five "
                "variants of a shape, each round the median of %d calls. Read probe (%s loads): peak %.1f GB/s "
                "at the start (best of %d sweeps); each shape and batch is held against the best of %d sweeps "
                "before every round and after the last (\"probe GB/s\"). \"of probe\" = bytes streamed "
                "(weight_bytes) / time / probe GB/s, batch 1 only. Random GPTQ tensors, U and V in [-%.2f, %.2f).\n\n",
                qjit_version(), qjit_bench::cpu_name().c_str(), threads, options.rounds, options.repeats, probe.load_width(),
                peak_gbps, qjit_tools::BandwidthProbe::kPeakSweeps, qjit_bench::kRaceProbeSweeps, kFactorRange, kFactorRange);
    std::printf("%s", qjit_bench::kRaceTableHeader);
    std::fflush(stdout);

    std::vector<Row> rows;
    const std::vector<Shape> shapes = model_shapes();
    for (const Shape& shape : shapes) {
        if (!qjit_bench::shape_selected(shape, options.shapes)) continue;
        const uint64_t seed = uint64_t(shape.k * 31 + shape.n);
        qjit_tools::GptqTensors int3, int4;
        qjit_tools::random_gptq(shape.k, shape.n, 3, 64, seed + 3, &int3);
        qjit_tools::random_gptq(shape.k, shape.n, 4, 128, seed + 4, &int4);
        std::vector<Factors> factors(kNumVariants);
        for (size_t i = 0; i < kNumVariants; ++i)
            if (kVariants[i].rank > 0) factors[i] = random_factors(shape.k, shape.n, kVariants[i].rank, seed + 100 + i);
        for (int64_t batch : kBatches) {
            std::vector<Row> group = measure_group(shape, batch, options, threads, int3, int4, factors, probe);
            qjit_bench::print_race_rows(group, kInt3, kInt4);
            rows.insert(rows.end(), group.begin(), group.end());
        }
    }
    if (rows.empty()) {
        std::fprintf(stderr, "bench_low_rank: --shapes=%s matches no shape\n", options.shapes.c_str());
        return 2;
    }
    print_target(rows);
    return 0;
}
