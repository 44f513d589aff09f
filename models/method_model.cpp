#include "models/method_model.hpp"

#include <stdexcept>
#include <utility>

#include "models/gguf_import_maker.hpp"

namespace qjit_models::llama {

std::vector<int> policy_ranks(const MethodOptions& options, const Weights& weights, bool with_classifier) {
    const std::vector<ModelMatrix> matrices = model_matrices(weights, with_classifier);
    // Kurtosis reads every value of a matrix, so its [n][k] storage serves as well as [k][n].
    std::vector<std::vector<float>> scratch(matrices.size());
    std::vector<qjit_rank_matrix> rank_matrices;
    for (size_t i = 0; i < matrices.size(); ++i) {
        const LoadedMatrix& m = *matrices[i].source;
        rank_matrices.push_back({m.k(), m.n(), matrices[i].role, m.dense_values(scratch[i]).data(), 0.0});
    }
    std::vector<int> ranks(rank_matrices.size());
    check_qjit(qjit_assign_ranks(parse_rank_policy(options.rank_policy), options.avg_rank, rank_matrices.data(),
                                 int64_t(rank_matrices.size()), ranks.data()),
               "qjit_assign_ranks");
    return ranks;
}

MethodModel build_method_model(std::shared_ptr<const Weights> weights, const MethodOptions& options,
                               const qjit_context_options& context_options,
                               const std::vector<std::vector<int>>* calibration, bool fp32_classifier,
                               bool ffn_linears) {
    DenseMaker dense;
    LayerMaker* classifier_maker = fp32_classifier ? &dense : nullptr;
    MethodModel built;
    if (options.method == "fp32") {
        built.model = std::make_unique<Model>(std::move(weights), dense, nullptr, ffn_linears);
        built.maker_name = dense.name();
        return built;
    }
    if (options.method == "exact") {
        GgufImportMaker exact(&context_options);
        built.model = std::make_unique<Model>(std::move(weights), exact, classifier_maker, ffn_linears);
        built.maker_name = exact.name();
        return built;
    }
    QuantizingMaker maker(options.quant_config(), &context_options);
    built.maker_name = maker.name();
    if (!options.rank_policy.empty()) {
        built.ranks = policy_ranks(options, *weights, !fp32_classifier);
        maker.set_ranks(built.ranks);
    }
    if (options.calibrated()) {
        if (!calibration || calibration->empty())
            throw std::runtime_error("--method " + options.method + " needs calibration sequences");
        if (!ffn_linears)
            throw std::runtime_error("--method " + options.method + " quantizes every layer on the model's own "
                                     "activations, which need its FFNs");
        built.model = std::make_unique<Model>(std::move(weights), dense);  // fp32, quantized layer by layer
        built.calibration_rows = quantize_with_calibration(*built.model, maker, *calibration, !fp32_classifier);
        built.model->share_threads(maker.context());
    } else {
        built.model = std::make_unique<Model>(std::move(weights), maker, classifier_maker, ffn_linears);
    }
    return built;
}

}  // namespace qjit_models::llama
