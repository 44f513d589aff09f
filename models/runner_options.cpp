#include "models/runner_options.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace qjit_models {

bool ArgumentReader::next() {
    if (at_ + 1 >= argc_) return false;
    option_ = argv_[++at_];
    return true;
}

const char* ArgumentReader::value() {
    if (at_ + 1 >= argc_) {
        std::fprintf(stderr, "%s needs a value\n", option_.c_str());
        return nullptr;
    }
    return argv_[++at_];
}

std::optional<int> ArgumentReader::int_value(int min, int max) {
    const char* text = value();
    if (!text) return std::nullopt;
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < min || v > max) {
        std::fprintf(stderr, "%s: '%s' is not an integer in [%d, %d]\n", option_.c_str(), text, min, max);
        return std::nullopt;
    }
    return int(v);
}

std::optional<double> ArgumentReader::real_value() {
    const char* text = value();
    if (!text) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(text, &end);
    if (*text == '\0' || *end != '\0') {
        std::fprintf(stderr, "%s: '%s' is not a number\n", option_.c_str(), text);
        return std::nullopt;
    }
    return v;
}

std::optional<double> ArgumentReader::number_value(double max) {
    const std::optional<double> v = real_value();
    if (v && !(*v >= 0 && *v <= max)) {
        std::fprintf(stderr, "%s: %g is not a number in [0, %g]\n", option_.c_str(), *v, max);
        return std::nullopt;
    }
    return v;
}

std::string list_of(std::span<const char* const> names) {
    std::string text;
    for (size_t i = 0; i < names.size(); ++i) {
        if (i > 0) text += i + 1 == names.size() ? " or " : ", ";
        text += names[i];
    }
    return text;
}

// ---- the qjit context ----

namespace {

struct IsaName {
    const char* name;
    qjit_isa isa;
};
constexpr IsaName kIsaNames[] = {{"auto", QJIT_ISA_AUTO},         {"portable", QJIT_ISA_PORTABLE},
                                 {"avx2", QJIT_ISA_AVX2},         {"avx2-vnni", QJIT_ISA_AVX2_VNNI},
                                 {"avx512", QJIT_ISA_AVX512},     {"avx512-vnni", QJIT_ISA_AVX512_VNNI}};

}  // namespace

const char* isa_name(qjit_isa isa) {
    for (const IsaName& entry : kIsaNames)
        if (entry.isa == isa) return entry.name;
    return "?";
}

qjit_isa parse_isa(const std::string& name) {
    for (const IsaName& entry : kIsaNames)
        if (name == entry.name) return entry.isa;
    throw std::invalid_argument("'" + name + "' is not auto, portable, avx2, avx2-vnni, avx512 or avx512-vnni");
}

qjit_context_options ContextOptions::context_options() const {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = threads;
    options.activations = activations;
    options.max_isa = max_isa;
    return options;
}

const char* const kContextOptionsUsage =
    "  --threads N        qjit context threads (default 0: one per core)\n"
    "  --activations P    activation path of the CPU kernels: auto (default: qjit's default, which\n"
    "                     $QJIT_ACTIVATIONS may set), f32 or int8\n"
    "  --isa I            cap on the CPU instruction set: auto (default), portable, avx2, avx2-vnni, avx512,\n"
    "                     avx512-vnni\n";

OptionParse parse_context_option(ArgumentReader& args, ContextOptions& options) {
    const std::string& arg = args.option();
    if (arg == "--threads") {
        const auto v = args.int_value(0, 1024);
        if (!v) return OptionParse::failed;
        options.threads = *v;
    } else if (arg == "--activations") {
        const char* text = args.value();
        if (!text) return OptionParse::failed;
        const std::string path = text;
        if (path == "auto") options.activations = QJIT_ACTIVATIONS_AUTO;
        else if (path == "f32") options.activations = QJIT_ACTIVATIONS_F32;
        else if (path == "int8") options.activations = QJIT_ACTIVATIONS_INT8;
        else {
            std::fprintf(stderr, "--activations: '%s' is not auto, f32 or int8\n", text);
            return OptionParse::failed;
        }
    } else if (arg == "--isa") {
        const char* text = args.value();
        if (!text) return OptionParse::failed;
        try {
            options.max_isa = parse_isa(text);
        } catch (const std::invalid_argument& e) {
            std::fprintf(stderr, "--isa: %s\n", e.what());
            return OptionParse::failed;
        }
    } else {
        return OptionParse::not_mine;
    }
    return OptionParse::taken;
}

// ---- the method ----

const char* const kMethodOptionsUsage =
    "  --bits B, --group G  its width (default 3; mixed: 2 or 4 per group) and group size (default 64; -1 per\n"
    "                     column)\n"
    "  --f32-scales       keep quantization scales in fp32 (default: f16, qjit's default)\n"
    "  --rank R           milo: the compensator rank of every matrix\n"
    "  --rank-policy P --avg-rank R  milo: ranks shared under an average rank (uniform, dense-r, sparse-r,\n"
    "                     kurtosis-r, frequency-r)\n"
    "  --low-rank-bits B  milo: how U and V are stored: 8 (default), 3 or 16 (fp16)\n"
    "  --rank-budget F    milo: each matrix's rank the largest whose compensator adds at most F of its base's bytes\n"
    "  --milo-base Q      milo: the quantizer under the compensator: hqq (default), rtn or gptq (calibrated)\n"
    "  --float-offsets    rtn, hqq, milo: a real-valued offset per group instead of an integer zero point\n"
    "                     (the default of hqq)\n"
    "  --integer-zeros    rtn, hqq, milo: integer zero points (the default of rtn and milo)\n"
    "  --act-order        gptq, mixed: quantize rows in decreasing diag(H)\n"
    "  --damp D           gptq, mixed: D * mean(diag(H)) added to H's diagonal (default 0.01)\n"
    "  --alpha A          mixed: fraction of K-groups in 4 bits (default 0.25)\n"
    "  --bits-per-weight B  mixed: in place of --alpha, as many 4-bit groups as keep each matrix within B bits\n"
    "                     per weight\n"
    "  --share-budget     mixed: share --bits-per-weight among all matrices by their estimated gains (measured\n"
    "                     worse than each matrix alone on SmolLM2)\n"
    "  --share-budget-by-loss  mixed: share it by each matrix's measured effect on the calibration loss:\n"
    "                     4 bits where 2 bits would raise the NLL most per stored bit\n"
    "  --outliers F       mixed: fraction of weights kept as fp16 outliers, 0 .. 0.005 (default 0.002)\n"
    "  --no-second-order  mixed: keep the group scales in fp16 instead of 4-bit second-order codes\n"
    "  --no-calibration   mixed: rank groups by their range and round to nearest (no calibration)\n";

OptionParse parse_method_option(ArgumentReader& args, MethodOptions& options) {
    const std::string& arg = args.option();
    if (arg == "--method" || arg == "--rank-policy" || arg == "--milo-base") {
        const char* text = args.value();
        if (!text) return OptionParse::failed;
        (arg == "--method" ? options.method : arg == "--milo-base" ? options.milo_base : options.rank_policy) = text;
    } else if (arg == "--bits" || arg == "--group" || arg == "--rank" || arg == "--low-rank-bits") {
        const auto v = args.int_value(-1, 1024);
        if (!v) return OptionParse::failed;
        (arg == "--bits"    ? options.bits
         : arg == "--group" ? options.group_size
         : arg == "--rank"  ? options.rank
                            : options.low_rank_bits) = *v;
    } else if (arg == "--avg-rank" || arg == "--damp" || arg == "--alpha" || arg == "--outliers" ||
               arg == "--rank-budget" || arg == "--bits-per-weight") {
        const auto v = args.number_value(arg == "--avg-rank"          ? 1024.0
                                         : arg == "--outliers"        ? 0.005
                                         : arg == "--bits-per-weight" ? 16.0
                                                                      : 1.0);
        if (!v) return OptionParse::failed;
        (arg == "--avg-rank"          ? options.avg_rank
         : arg == "--damp"            ? options.damp
         : arg == "--alpha"           ? options.alpha
         : arg == "--rank-budget"     ? options.rank_budget
         : arg == "--bits-per-weight" ? options.bits_per_weight
                                      : options.outlier_fraction) = *v;
    } else if (arg == "--float-offsets" || arg == "--integer-zeros") {
        options.float_offsets = arg == "--float-offsets";
    } else if (arg == "--share-budget") {
        options.share_budget = true;
    } else if (arg == "--share-budget-by-loss") {
        options.share_budget_by_loss = true;
    } else if (arg == "--f32-scales") {
        options.scale_dtype = QJIT_DTYPE_F32;
    } else if (arg == "--act-order") {
        options.act_order = true;
    } else if (arg == "--no-calibration") {
        options.no_calibration = true;
    } else if (arg == "--no-second-order") {
        options.second_order_scales = false;
    } else {
        return OptionParse::not_mine;
    }
    return OptionParse::taken;
}

bool check_method_options(const MethodOptions& options, std::span<const char* const> methods) {
    const std::string& method = options.method;
    if (!method.empty() && std::none_of(methods.begin(), methods.end(), [&](const char* m) { return method == m; })) {
        std::fprintf(stderr, "--method: '%s' is not %s\n", method.c_str(), list_of(methods).c_str());
        return false;
    }
    if (options.no_calibration && method != "mixed") {
        std::fprintf(stderr, "--no-calibration goes with --method mixed (gptq needs a calibration)\n");
        return false;
    }
    if (options.act_order && !options.calibrated()) {
        std::fprintf(stderr, "--act-order goes with --method gptq or a calibrated --method mixed\n");
        return false;
    }
    const bool milo = method == "milo";
    const int rank_choices = (options.rank > 0) + !options.rank_policy.empty() + (options.rank_budget > 0);
    if (milo && rank_choices != 1) {
        std::fprintf(stderr, "--method milo takes one of --rank R, --rank-policy P with --avg-rank R, --rank-budget F\n");
        return false;
    }
    if (!milo && rank_choices > 0) {
        std::fprintf(stderr, "--rank, --rank-policy and --rank-budget go with --method milo\n");
        return false;
    }
    if (options.milo_base != "hqq" && options.milo_base != "rtn" && options.milo_base != "gptq") {
        std::fprintf(stderr, "--milo-base: '%s' is not hqq, rtn or gptq\n", options.milo_base.c_str());
        return false;
    }
    if (options.float_offsets && method != "rtn" && method != "hqq" && !(milo && options.milo_base != "gptq")) {
        std::fprintf(stderr, "--float-offsets and --integer-zeros go with --method rtn, hqq or milo over rtn or hqq\n");
        return false;
    }
    if (options.bits_per_weight > 0 && method != "mixed") {
        std::fprintf(stderr, "--bits-per-weight goes with --method mixed\n");
        return false;
    }
    if ((options.share_budget || options.share_budget_by_loss) && !(options.bits_per_weight > 0 && options.calibrated())) {
        std::fprintf(stderr, "--share-budget and --share-budget-by-loss go with a calibrated --method mixed and "
                     "--bits-per-weight\n");
        return false;
    }
    if (options.share_budget && options.share_budget_by_loss) {
        std::fprintf(stderr, "give --share-budget or --share-budget-by-loss, not both\n");
        return false;
    }
    return true;
}

qjit_quant_config MethodOptions::quant_config() const {
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.bits = bits;
    config.group_size = group_size;
    config.symmetric = 0;
    config.scale_dtype = scale_dtype;
    config.method = method == "milo"    ? QJIT_QUANT_MILO
                    : method == "hqq"   ? QJIT_QUANT_HQQ
                    : method == "gptq"  ? QJIT_QUANT_GPTQ
                    : method == "mixed" ? QJIT_QUANT_MIXED
                                        : QJIT_QUANT_RTN;
    config.rank = rank;
    config.low_rank_bits = low_rank_bits;
    config.act_order = act_order ? 1 : 0;
    config.damp = damp;
    config.mixed_alpha = alpha;
    config.mixed_bits_per_weight = bits_per_weight;
    config.float_offsets = float_offsets ? (*float_offsets ? 1 : 0) : QJIT_FLOAT_OFFSETS_BY_METHOD;
    config.milo_base = milo_base == "rtn" ? QJIT_QUANT_RTN : milo_base == "gptq" ? QJIT_QUANT_GPTQ : QJIT_QUANT_HQQ;
    config.outlier_fraction = outlier_fraction;
    config.second_order_scales = second_order_scales ? 1 : 0;
    return config;
}

qjit_rank_policy parse_rank_policy(const std::string& name) {
    if (name == "uniform") return QJIT_RANK_UNIFORM;
    if (name == "dense-r") return QJIT_RANK_DENSE;
    if (name == "sparse-r") return QJIT_RANK_SPARSE;
    if (name == "kurtosis-r") return QJIT_RANK_KURTOSIS;
    if (name == "frequency-r") return QJIT_RANK_FREQUENCY;
    throw std::runtime_error("--rank-policy '" + name + "' is not uniform, dense-r, sparse-r, kurtosis-r or frequency-r");
}

}  // namespace qjit_models
