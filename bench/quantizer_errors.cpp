// Why a quantizer's error on the weights misleads: for every matrix of a GGUF model, the error of
// each quantizer measured three ways on the model's own inputs (its fp32 forward on calibration
// paragraphs): the weights' L2, the inputs-weighted squared error sum_k h_k e_k^2 (h = diag(H), H =
// X^T X), and the layer's output error tr(E^T H E) = ||X E||^2, which also counts the inputs'
// correlations. With it, how unequal the inputs are: max and median of diag(H). One JSON line per
// matrix, then a summary line per quantizer: the geometric mean of each error over RTN's, and the
// matrices whose output error rose most.
//
// Usage: quantizer_errors --model F.gguf --calibration-text T [--sequences 32] [--bits 3] [--group 128]
#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "format/reference.hpp"
#include "io/gguf_file.hpp"
#include "models/gguf_llama.hpp"
#include "models/gguf_vocabulary.hpp"
#include "models/llama_model.hpp"
#include "models/text_runner.hpp"
#include "quant/hessian.hpp"
#include "quant/quantize_hqq.hpp"
#include "quant/quantize_rtn.hpp"

namespace {

using namespace qjit_models;

struct Quantizer {
    const char* name;
    bool hqq, float_offsets, weighted;
};
// RTN (integer zeros; offsets over min..max), HQQ on the weights' plain L2, HQQ's default weighting.
constexpr Quantizer kQuantizers[] = {
    {"rtn", false, false, false},          {"rtn_offsets", false, true, false}, {"hqq_l2", true, false, false},
    {"hqq_l2_offsets", true, true, false}, {"hqq", true, false, true},          {"hqq_offsets", true, true, true},
};
constexpr int kCount = int(std::size(kQuantizers));

struct Errors {
    double weights = 0, diagonal = 0, output = 0;
};

qjit::QuantizedMatrix quantize(const Quantizer& q, const qjit::WeightFormat& base, int64_t k, int64_t n,
                               const float* w) {
    qjit::WeightFormat format = base;
    format.float_offsets = q.float_offsets;
    if (!q.hqq) return qjit::quantize_rtn(format, k, n, w);
    qjit::HqqConfig config;
    config.format = format;
    config.options.balance_rows = q.weighted;
    config.options.weigh_by_magnitude = q.weighted;
    return qjit::quantize_hqq(config, k, n, w);
}

// w: K x N row-major; h: K x K.
Errors errors_of(const std::vector<float>& w, const std::vector<float>& deq, const Eigen::MatrixXf& h, int64_t k,
                 int64_t n) {
    Eigen::MatrixXf e(k, n);
    Errors out;
    for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < n; ++c) {
            const float d = w[size_t(r * n + c)] - deq[size_t(r * n + c)];
            e(r, c) = d;
            out.weights += double(d) * d;
            out.diagonal += double(h(r, r)) * d * d;
        }
    const Eigen::MatrixXf gram = e * e.transpose();  // K x K
    out.output = double((gram.array() * h.array()).sum());
    return out;
}

int run(int argc, char** argv) {
    std::string model_path, text;
    int sequences = 32, bits = 3, group = 128;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string arg = argv[i];
        if (arg == "--model") model_path = argv[i + 1];
        else if (arg == "--calibration-text") text = argv[i + 1];
        else if (arg == "--sequences") sequences = std::atoi(argv[i + 1]);
        else if (arg == "--bits") bits = std::atoi(argv[i + 1]);
        else if (arg == "--group") group = std::atoi(argv[i + 1]);
        else return std::fprintf(stderr, "quantizer_errors: unknown option %s\n", argv[i]), 2;
    }
    if (model_path.empty() || text.empty() || sequences < 1) {
        std::fprintf(stderr, "usage: quantizer_errors --model F.gguf --calibration-text T [--sequences 32] [--bits 3] "
                             "[--group 128]\n");
        return 2;
    }
    const auto file = qjit::GgufFile::open(model_path);
    const auto weights = llama::load_gguf_llama(file);
    const GgufVocabulary vocabulary(*file);
    const std::vector<std::vector<int>> tokens = tokenize_paragraphs(vocabulary, text, sequences);
    llama::DenseMaker dense;
    llama::Model model(weights, dense);
    const int layers = model.config().n_layers;
    const std::vector<llama::ModelMatrix> matrices = llama::model_matrices(*weights, true);
    std::vector<std::vector<float>> streams;
    for (const std::vector<int>& t : tokens) streams.push_back(model.embed_sequence(t));

    const qjit::WeightFormat format{.bits = bits, .group_size = group, .scale_type = qjit::ScaleType::F16};
    std::vector<std::array<Errors, kCount>> all;
    std::vector<std::string> names;
    auto measure = [&](int layer, const std::vector<int>& which) {
        const int64_t k = llama::site_matrix(matrices, {layer, which[0]}, layers).k();
        qjit::Hessian hessian(k);
        for (const std::vector<float>& stream : streams)
            model.capture_inputs(stream, {layer, which[0]}, [&](const float* x, int64_t m) { hessian.add(x, m); });
        const Eigen::MatrixXf h = Eigen::Map<const Eigen::MatrixXd>(hessian.full().data(), k, k).cast<float>();
        std::vector<double> diagonal = hessian.diagonal();
        std::sort(diagonal.begin(), diagonal.end());
        for (int w : which) {
            const llama::LoadedMatrix& m = llama::site_matrix(matrices, {layer, w}, layers);
            const int64_t n = m.n();
            std::vector<float> scratch, k_by_n(size_t(k * n));
            const std::span<const float> n_by_k = m.dense_values(scratch);
            for (int64_t c = 0; c < n; ++c)
                for (int64_t r = 0; r < k; ++r) k_by_n[size_t(r * n + c)] = n_by_k[size_t(c * k + r)];
            std::array<Errors, kCount> row{};
            std::printf("{\"matrix\": \"%s\", \"k\": %lld, \"n\": %lld, \"h_max_over_median\": %.1f", m.name().c_str(),
                        static_cast<long long>(k), static_cast<long long>(n),
                        diagonal.back() / std::max(diagonal[diagonal.size() / 2], 1e-30));
            for (int q = 0; q < kCount; ++q) {
                row[size_t(q)] = errors_of(k_by_n, qjit::dequantize(quantize(kQuantizers[q], format, k, n, k_by_n.data())),
                                           h, k, n);
                std::printf(", \"%s\": [%.6g, %.6g, %.6g]", kQuantizers[q].name, row[size_t(q)].weights,
                            row[size_t(q)].diagonal, row[size_t(q)].output);
            }
            std::printf("}\n");
            std::fflush(stdout);
            all.push_back(row);
            names.push_back(m.name());
        }
    };
    for (int layer = 0; layer < layers; ++layer) {
        for (const std::vector<int>& which : llama::kSequentialGroups) measure(layer, which);
        for (std::vector<float>& stream : streams) model.run_layer(layer, stream);
    }
    measure(layers, {0});

    for (int q = 0; q < kCount; ++q) {
        double log_weights = 0, log_diagonal = 0, log_output = 0;
        int better = 0;
        std::vector<std::pair<double, std::string>> rises;
        for (size_t i = 0; i < all.size(); ++i) {
            const Errors& e = all[i][size_t(q)];
            const Errors& rtn = all[i][0];
            log_weights += std::log(e.weights / rtn.weights);
            log_diagonal += std::log(e.diagonal / rtn.diagonal);
            log_output += std::log(e.output / rtn.output);
            better += e.output < rtn.output;
            rises.emplace_back(e.output / rtn.output, names[i]);
        }
        std::sort(rises.rbegin(), rises.rend());
        const double count = double(all.size());
        std::printf("{\"quantizer\": \"%s\", \"over_rtn\": {\"weights\": %.3f, \"diagonal\": %.3f, \"output\": %.3f}, "
                    "\"output_below_rtn\": %.3f, \"worst\": [",
                    kQuantizers[q].name, std::exp(log_weights / count), std::exp(log_diagonal / count),
                    std::exp(log_output / count), double(better) / count);
        for (size_t i = 0; i < std::min<size_t>(3, rises.size()); ++i)
            std::printf("%s[\"%s\", %.2f]", i ? ", " : "", rises[i].second.c_str(), rises[i].first);
        std::printf("]}\n");
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "quantizer_errors: %s\n", e.what());
        return 1;
    }
}
