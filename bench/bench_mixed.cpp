// bench_mixed: the 2/4/16 format on the CPU next to uniform INT3 and INT4, measured in one run.
//
// For each Llama-2-7B shape and batch (1 and 16), four layers: INT4 g128 and INT3 g128 (random
// GPTQ tensors, asymmetric, fp16 scales), and the mixed format quantized from random Student-t
// weights (heavy tails, like trained weights) without calibration: groups of 32, the 25 % of
// groups with the widest range in 4 bits and the rest in 2, second-order scales, with no outliers
// and with 0.2 % of the weights as fp16 outliers. Each layer is tuned for its batch (the library's
// budget, no database) and timed cold, round-robin (bench/layer_race.hpp); batch-1 rows are held
// against the read probe taken in the same race.
//
//   bench_mixed                  every shape, batch 1 and 16, all cores
//   bench_mixed --quick          one shape, few rounds
//   bench_mixed --shapes=7b|4096x4096,...  --threads=N  --rounds=N  --repeats=N
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "layer_race.hpp"
#include "qjit/qjit.h"
#include "tools/bandwidth_probe.hpp"
#include "tools/random_gptq.hpp"

namespace {

constexpr const char* kProgram = "bench_mixed";

[[noreturn]] void die(const char* what) { qjit_bench::race_die(kProgram, what); }

using Shape = qjit_bench::ModelLayerShape;
// Llama-2-7B's layers (configs/models).
std::vector<Shape> model_shapes() { return qjit_bench::model_layers("7b", "llama-2-7b"); }
constexpr int64_t kBatches[] = {1, 16};
constexpr double kOutlierFraction = 0.002;
constexpr double kOutlierTarget = 1.10;  // the bound on the outlier term's cost
constexpr double kProbeTarget = 0.90;    // batch 1: the fraction of the probe every format must reach

struct Variant {
    const char* name;
    int bits;                // 3 or 4: GPTQ tensors; 0: the mixed format
    double outlier_fraction; // mixed only
};
constexpr Variant kVariants[] = {
    {"INT4 g128", 4, 0},
    {"INT3 g128", 3, 0},
    {"2/4 g32 sq4", 0, 0},
    {"2/4 g32 sq4 + 0.2% outliers", 0, kOutlierFraction},
};
constexpr size_t kNumVariants = std::size(kVariants);
constexpr size_t kInt4 = 0, kInt3 = 1, kMixed = 2, kMixedOutliers = 3;

// Student-t weights with 4 degrees of freedom, scaled to a typical weight's spread.
std::vector<float> heavy_tailed_weights(int64_t k, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::student_t_distribution<float> t(4.0f);
    std::vector<float> w(size_t(k * n));
    for (float& x : w) x = 0.02f * t(rng);
    return w;
}

using Row = qjit_bench::RaceRow<Variant>;

qjit_linear* make_layer(qjit_context* context, const Shape& shape, const Variant& variant,
                        const qjit_tools::GptqTensors& int3, const qjit_tools::GptqTensors& int4,
                        const std::vector<float>& weights) {
    qjit_linear* layer = nullptr;
    if (variant.bits != 0) {
        const qjit_gptq_tensors& tensors = variant.bits == 3 ? int3.view : int4.view;
        if (qjit_linear_create_from_gptq(context, shape.k, shape.n, &tensors, &layer) != QJIT_OK)
            die("qjit_linear_create_from_gptq");
        return layer;
    }
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.method = QJIT_QUANT_MIXED;
    config.group_size = 32;
    config.outlier_fraction = variant.outlier_fraction;
    if (qjit_linear_create_calibrated(context, &config, nullptr, shape.k, shape.n, weights.data(),
                                      QJIT_LAYOUT_K_BY_N, &layer) != QJIT_OK)
        die("qjit_linear_create_calibrated");
    return layer;
}

std::vector<Row> measure_group(const Shape& shape, int64_t batch, const qjit_bench::RaceOptions& options, int threads,
                               const qjit_tools::GptqTensors& int3, const qjit_tools::GptqTensors& int4,
                               const std::vector<float>& weights, qjit_tools::BandwidthProbe& probe) {
    qjit_context* context = qjit_bench::race_context(options.threads, batch, kProgram);
    std::vector<qjit_linear*> layers(kNumVariants, nullptr);
    for (size_t i = 0; i < kNumVariants; ++i) layers[i] = make_layer(context, shape, kVariants[i], int3, int4, weights);
    return qjit_bench::race_rows(shape, batch, kVariants, layers, context, options, threads, probe, kProgram);
}

// The targets: the outlier term's cost, and every format's share of the probe at batch 1.
void print_targets(const std::vector<Row>& rows) {
    int outlier_met = 0, outlier_checked = 0, probe_met = 0, probe_checked = 0;
    double worst_outlier = 0, worst_probe = 10;
    for (size_t group = 0; group + kNumVariants <= rows.size(); group += kNumVariants) {
        const double outlier_cost = rows[group + kMixedOutliers].micros / rows[group + kMixed].micros;
        ++outlier_checked;
        outlier_met += outlier_cost <= kOutlierTarget;
        worst_outlier = std::max(worst_outlier, outlier_cost);
        if (rows[group].batch != 1) continue;
        for (size_t i = group; i < group + kNumVariants; ++i) {
            const double of_probe = rows[i].gbps() / rows[i].probe_gbps;
            ++probe_checked;
            probe_met += of_probe >= kProbeTarget;
            worst_probe = std::min(worst_probe, of_probe);
        }
    }
    std::printf("\nTarget: the outlier term (%.1f %%) costs <= %.0f %%: %d of %d rows meet it; worst %.3fx\n",
                kOutlierFraction * 100, (kOutlierTarget - 1) * 100, outlier_met, outlier_checked, worst_outlier);
    std::printf("Target: batch 1 at >= %.0f %% of the probe: %d of %d rows meet it; lowest %.2f\n", kProbeTarget * 100,
                probe_met, probe_checked, worst_probe);
}

}  // namespace

int main(int argc, char** argv) {
    const qjit_bench::RaceOptions options = qjit_bench::parse_race_options(argc, argv, kProgram);
    const int threads = qjit_bench::race_threads(options.threads, kProgram);
    qjit_tools::BandwidthProbe probe;
    const double peak_gbps = probe.peak(threads);
    std::printf("# bench_mixed: 2/4/16 (mixed 2/4-bit groups, second-order scales, fp16 outliers) against INT3 and "
                "INT4\n\nqjit %s on %s, %d thread(s). Each layer tuned for its batch (default budget, no database), "
                "timed cold: median of %d round-robin rounds, each the median of %d calls. Read probe (%s loads): "
                "peak %.1f GB/s at the start; each shape and batch is held against the best of %d sweeps before "
                "every round and after the last. \"of probe\" = bytes streamed (weight_bytes) / time / probe GB/s, "
                "batch 1 only. Mixed layers: 25 %% of groups in 4 bits (range-based sensitivity, no calibration).\n\n",
                qjit_version(), qjit_bench::cpu_name().c_str(), threads, options.rounds, options.repeats,
                probe.load_width(), peak_gbps, qjit_bench::kRaceProbeSweeps);
    std::printf("%s", qjit_bench::kRaceTableHeader);
    std::fflush(stdout);

    std::vector<Row> rows;
    const std::vector<Shape> shapes = model_shapes();
    for (const Shape& shape : shapes) {
        if (!qjit_bench::shape_selected(shape, options.shapes)) continue;
        const uint64_t seed = uint64_t(shape.k * 31 + shape.n);
        qjit_tools::GptqTensors int3, int4;
        qjit_tools::random_gptq(shape.k, shape.n, 3, 128, seed + 3, &int3);
        qjit_tools::random_gptq(shape.k, shape.n, 4, 128, seed + 4, &int4);
        const std::vector<float> weights = heavy_tailed_weights(shape.k, shape.n, uint32_t(seed));
        for (int64_t batch : kBatches) {
            std::vector<Row> group = measure_group(shape, batch, options, threads, int3, int4, weights, probe);
            qjit_bench::print_race_rows(group, kInt3, kInt4);
            rows.insert(rows.end(), group.begin(), group.end());
        }
    }
    if (rows.empty()) {
        std::fprintf(stderr, "bench_mixed: --shapes=%s matches no shape\n", options.shapes.c_str());
        return 2;
    }
    print_targets(rows);
    return 0;
}
