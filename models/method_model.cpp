#include "models/method_model.hpp"

#include <chrono>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "models/gguf_import_maker.hpp"
#include "models/mixed_budget.hpp"
#include "models/packed_gguf_maker.hpp"

namespace qjit_models::llama {

MethodModel build_packed_model(std::shared_ptr<const Weights> weights, const std::string& pack_path,
                               const std::string& gguf_path, const qjit_context_options& context_options,
                               bool fp32_classifier) {
    PackedGgufMaker maker(pack_path, gguf_path, &context_options);
    DenseMaker dense;
    MethodModel built;
    built.model = std::make_unique<Model>(std::move(weights), maker, fp32_classifier ? &dense : nullptr);
    built.maker_name = maker.name();
    maker.finish();
    built.pack = maker.mapped() ? "mapped" : "written (" + maker.rebuild_reason() + ")";
    return built;
}

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
    if (options.rank_budget > 0) maker.set_rank_budget(options.rank_budget);
    if (!options.rank_policy.empty()) {
        built.ranks = policy_ranks(options, *weights, !fp32_classifier);
        const std::vector<ModelMatrix> matrices = model_matrices(*weights, !fp32_classifier);
        std::unordered_map<const LoadedMatrix*, int> rank_of;
        for (size_t i = 0; i < matrices.size(); ++i) rank_of[matrices[i].source] = built.ranks[i];
        maker.set_ranks(std::move(rank_of));
    }
    const auto start = std::chrono::steady_clock::now();
    if (options.calibrated()) {
        if (!calibration || calibration->empty())
            throw std::runtime_error("--method " + options.method + " needs calibration sequences");
        if (!ffn_linears)
            throw std::runtime_error("--method " + options.method + " quantizes every layer on the model's own "
                                     "activations, which need its FFNs");
        // hqq chooses per layer against round to nearest: the model starts from it. The others start
        // from fp32 and quantize layer by layer.
        qjit_quant_config rtn_config = options.quant_config();
        rtn_config.method = QJIT_QUANT_RTN;
        rtn_config.float_offsets = 0;
        QuantizingMaker rtn(rtn_config, &context_options);
        const bool choose = options.method == "hqq";
        built.model = choose ? std::make_unique<Model>(std::move(weights), rtn, classifier_maker)
                             : std::make_unique<Model>(std::move(weights), dense);
        // A 2/4/16 budget shared among the matrices by their gains first, when asked.
        if (options.method == "mixed" && options.share_budget)
            maker.set_bits_per_weight(share_mixed_budget(*built.model, *calibration, options.quant_config(),
                                                         options.bits_per_weight, !fp32_classifier));
        if (options.method == "mixed" && options.share_budget_by_loss)
            maker.set_bits_per_weight(share_mixed_budget_by_loss(*built.model, *calibration, options.quant_config(),
                                                                 options.bits_per_weight, !fp32_classifier));
        const LayerChoice choice;
        const CalibratedQuantization q =
            quantize_with_calibration(*built.model, maker, *calibration, !fp32_classifier, choose ? &choice : nullptr);
        built.calibration_rows = q.rows;
        built.calibration_seconds = q.calibration_seconds;
        built.quantization_seconds = q.quantization_seconds;
        if (choose) built.choice = q;
        built.model->share_threads(maker.context());
    } else {
        built.model = std::make_unique<Model>(std::move(weights), maker, classifier_maker, ffn_linears);
        built.quantization_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    return built;
}

}  // namespace qjit_models::llama
