// Runs the stories260K llama2.c model end to end through qjit:
//   (a) greedy decoding with 8-bit per-column symmetric weights, checked against the reference tokens;
//   (b) mean NLL over the reference TinyStories sequences for bits 2/3/4/8 x group 32/64/per column x
//       symmetric/asymmetric, next to the dense fp32 figure and the reference mean.
// With --method, one quantization method instead: its NLL next to fp32's, and with --json one JSON
// object on stdout (method, bits, group_size, nll, fp32_nll, delta_nll, tokens, bits_per_weight, the
// method's parameters, ...).
//
// The calibrated methods (gptq, mixed) quantize layer by layer on the quantized model's own
// activations (llama2::quantize_with_calibration): the calibration text is paragraphs 400 and later of
// text/tinystories_val.txt, tokenized here as the reference tokens were (the evaluation set is
// paragraphs 0..199), --calibration-paragraphs of them (default 256: about 25,000 tokens, each a row
// of every matrix's calibration; a gptq run takes 15-60 s on 2 shared cores, most of it running the
// calibration text through the model once per group of matrices). --calibration-start P takes
// another sample of the text (paragraphs P.., P >= 200), to see how much the result owes to it.
//
// Usage: stories_runner [--models-dir DIR] [--steps N] [--threads N] [--fp32-classifier] [--f32-scales]
//        stories_runner --method fp32|rtn|hqq|milo|gptq|mixed [--bits B] [--group G] [--json]
//                       milo:  [--rank R | --rank-policy P --avg-rank R] [--low-rank-bits 8|3|16]
//                       gptq:  [--act-order] [--damp D] [--calibration-paragraphs N] [--calibration-start P]
//                       mixed: [--alpha A] [--outliers F] [--no-second-order] [--act-order] [--damp D]
//                              [--calibration-paragraphs N] [--calibration-start P] | --no-calibration]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "llama2_model.hpp"

namespace {

// The evaluation set is the first 200 paragraphs; calibration starts well after it by default.
constexpr int kEvaluationParagraphs = 200;

struct Options {
    std::string models_dir = QJIT_SHARED_MODELS_DIR;
    int steps = 256;
    int threads = 0;               // 0: qjit's default (one per core)
    bool fp32_classifier = false;  // keep the classifier dense instead of quantizing it too
    qjit_dtype scale_dtype = QJIT_DTYPE_F16;
    qjit_activations activations = QJIT_ACTIVATIONS_AUTO;
    // One method instead of the sweep (empty: the sweep).
    std::string method;
    int bits = 3;
    int group_size = 64;
    int rank = 0;                  // MiLo: every matrix's rank, unless a policy shares avg_rank
    std::string rank_policy;       // "uniform", "dense-r", "sparse-r", "kurtosis-r", "frequency-r"
    double avg_rank = 0;
    int low_rank_bits = 8;
    // gptq and mixed
    bool act_order = false;
    double damp = 0.01;
    int calibration_paragraphs = 256;
    int calibration_start = 400;   // first paragraph of the calibration text
    bool no_calibration = false;   // mixed: rank groups by their range, round to nearest
    double alpha = 0.25;           // mixed: fraction of K-groups in 4 bits
    double outlier_fraction = 0.002;
    bool second_order_scales = true;
    qjit_isa max_isa = QJIT_ISA_AUTO;
    bool json = false;

    bool calibrated() const { return method == "gptq" || (method == "mixed" && !no_calibration); }
};

struct IsaName {
    const char* name;
    qjit_isa isa;
};
constexpr IsaName kIsaNames[] = {{"auto", QJIT_ISA_AUTO},         {"portable", QJIT_ISA_PORTABLE},
                                 {"avx2", QJIT_ISA_AVX2},         {"avx2-vnni", QJIT_ISA_AVX2_VNNI},
                                 {"avx512", QJIT_ISA_AVX512},     {"avx512-vnni", QJIT_ISA_AVX512_VNNI}};

const char* isa_name(qjit_isa isa) {
    for (const IsaName& entry : kIsaNames)
        if (entry.isa == isa) return entry.name;
    return "?";
}

void print_usage(const char* program) {
    std::printf(
        "usage: %s [--models-dir DIR] [--steps N] [--threads N] [--fp32-classifier] [--f32-scales]\n"
        "          [--activations auto|f32|int8]\n"
        "  --models-dir DIR   folder with stories260K/ and reference/ (default %s)\n"
        "  --steps N          greedy decoding steps (default 256)\n"
        "  --threads N        qjit context threads (default 0: one per core)\n"
        "  --fp32-classifier  quantize only wq..w3 and keep the classifier in fp32\n"
        "  --f32-scales       keep quantization scales in fp32 (default: f16, qjit's default)\n"
        "  --activations P    activation path of the CPU kernels (default auto: qjit's default)\n"
        "  --isa I            cap on the CPU instruction set: auto (default), portable, avx2, avx2-vnni, avx512,\n"
        "                     avx512-vnni\n"
        "  --method M         fp32, rtn, hqq, milo, gptq or mixed: evaluate this one method (no decoding, no sweep)\n"
        "  --bits B, --group G  its width (default 3; mixed: 2 or 4 per group) and group size (default 64; -1 per\n"
        "                     column)\n"
        "  --rank R           milo: the compensator rank of every matrix\n"
        "  --rank-policy P --avg-rank R  milo: ranks shared under an average rank (uniform, dense-r, sparse-r,\n"
        "                     kurtosis-r, frequency-r)\n"
        "  --low-rank-bits B  milo: how U and V are stored: 8 (default), 3 or 16 (fp16)\n"
        "  --act-order        gptq, mixed: quantize rows in decreasing diag(H)\n"
        "  --damp D           gptq, mixed: D * mean(diag(H)) added to H's diagonal (default 0.01)\n"
        "  --calibration-paragraphs N  gptq, mixed: calibrate on N paragraphs of the text (default 256)\n"
        "  --calibration-start P  gptq, mixed: the first of them (default 400; the evaluation set is 0..199)\n"
        "  --alpha A          mixed: fraction of K-groups in 4 bits (default 0.25)\n"
        "  --outliers F       mixed: fraction of weights kept as fp16 outliers, 0 .. 0.005 (default 0.002)\n"
        "  --no-second-order  mixed: keep the group scales in fp16 instead of 4-bit second-order codes\n"
        "  --no-calibration   mixed: rank groups by their range and round to nearest (no calibration)\n"
        "  --json             print one JSON object on stdout (progress goes to stderr)\n",
        program, QJIT_SHARED_MODELS_DIR);
}

// Returns nullopt after printing a message when the arguments are bad.
std::optional<Options> parse_args(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", arg.c_str());
                return nullptr;
            }
            return argv[++i];
        };
        auto int_value = [&](int min, int max) -> std::optional<int> {
            const char* text = value();
            if (!text) return std::nullopt;
            char* end = nullptr;
            const long v = std::strtol(text, &end, 10);
            if (*text == '\0' || *end != '\0' || v < min || v > max) {
                std::fprintf(stderr, "%s: '%s' is not an integer in [%d, %d]\n", arg.c_str(), text, min, max);
                return std::nullopt;
            }
            return int(v);
        };
        if (arg == "--models-dir") {
            const char* text = value();
            if (!text) return std::nullopt;
            options.models_dir = text;
        } else if (arg == "--steps") {
            const auto v = int_value(0, 1 << 20);
            if (!v) return std::nullopt;
            options.steps = *v;
        } else if (arg == "--threads") {
            const auto v = int_value(0, 1024);
            if (!v) return std::nullopt;
            options.threads = *v;
        } else if (arg == "--fp32-classifier") {
            options.fp32_classifier = true;
        } else if (arg == "--activations") {
            const char* text = value();
            if (!text) return std::nullopt;
            const std::string path = text;
            if (path == "auto") options.activations = QJIT_ACTIVATIONS_AUTO;
            else if (path == "f32") options.activations = QJIT_ACTIVATIONS_F32;
            else if (path == "int8") options.activations = QJIT_ACTIVATIONS_INT8;
            else {
                std::fprintf(stderr, "--activations: '%s' is not auto, f32 or int8\n", text);
                return std::nullopt;
            }
        } else if (arg == "--f32-scales") {
            options.scale_dtype = QJIT_DTYPE_F32;
        } else if (arg == "--method" || arg == "--rank-policy") {
            const char* text = value();
            if (!text) return std::nullopt;
            (arg == "--method" ? options.method : options.rank_policy) = text;
        } else if (arg == "--bits" || arg == "--group" || arg == "--rank" || arg == "--low-rank-bits") {
            const auto v = int_value(-1, 1024);
            if (!v) return std::nullopt;
            if (arg == "--bits") options.bits = *v;
            else if (arg == "--group") options.group_size = *v;
            else if (arg == "--rank") options.rank = *v;
            else options.low_rank_bits = *v;
        } else if (arg == "--avg-rank" || arg == "--damp" || arg == "--alpha" || arg == "--outliers") {
            const char* text = value();
            if (!text) return std::nullopt;
            char* end = nullptr;
            const double v = std::strtod(text, &end);
            const double max = arg == "--avg-rank" ? 1024.0 : arg == "--outliers" ? 0.005 : 1.0;
            if (*text == '\0' || *end != '\0' || !(v >= 0 && v <= max)) {
                std::fprintf(stderr, "%s: '%s' is not a number in [0, %g]\n", arg.c_str(), text, max);
                return std::nullopt;
            }
            (arg == "--avg-rank" ? options.avg_rank
             : arg == "--damp"   ? options.damp
             : arg == "--alpha"  ? options.alpha
                                 : options.outlier_fraction) = v;
        } else if (arg == "--calibration-paragraphs" || arg == "--calibration-start") {
            const auto v = arg == "--calibration-start" ? int_value(kEvaluationParagraphs, 4000) : int_value(1, 4000);
            if (!v) return std::nullopt;
            (arg == "--calibration-start" ? options.calibration_start : options.calibration_paragraphs) = *v;
        } else if (arg == "--act-order") {
            options.act_order = true;
        } else if (arg == "--no-calibration") {
            options.no_calibration = true;
        } else if (arg == "--no-second-order") {
            options.second_order_scales = false;
        } else if (arg == "--isa") {
            const char* text = value();
            if (!text) return std::nullopt;
            const IsaName* found = nullptr;
            for (const IsaName& entry : kIsaNames)
                if (std::strcmp(entry.name, text) == 0) found = &entry;
            if (!found) {
                std::fprintf(stderr, "--isa: '%s' is not auto, portable, avx2, avx2-vnni, avx512 or avx512-vnni\n",
                             text);
                return std::nullopt;
            }
            options.max_isa = found->isa;
        } else if (arg == "--json") {
            options.json = true;
        } else if (arg == "--help" || arg == "-h") {
            print_usage(argv[0]);
            std::exit(0);
        } else {
            std::fprintf(stderr, "unknown argument '%s'\n", arg.c_str());
            print_usage(argv[0]);
            return std::nullopt;
        }
    }
    const std::string& method = options.method;
    if (!method.empty() && method != "fp32" && method != "rtn" && method != "hqq" && method != "milo" &&
        method != "gptq" && method != "mixed") {
        std::fprintf(stderr, "--method: '%s' is not fp32, rtn, hqq, milo, gptq or mixed\n", method.c_str());
        return std::nullopt;
    }
    if (method.empty() && options.json) {
        std::fprintf(stderr, "--json goes with --method (the sweep prints a table)\n");
        return std::nullopt;
    }
    if (options.no_calibration && method != "mixed") {
        std::fprintf(stderr, "--no-calibration goes with --method mixed (gptq needs a calibration)\n");
        return std::nullopt;
    }
    if (options.act_order && !options.calibrated()) {
        std::fprintf(stderr, "--act-order goes with --method gptq or a calibrated --method mixed\n");
        return std::nullopt;
    }
    const bool milo = options.method == "milo";
    if (milo && (options.rank > 0) == !options.rank_policy.empty()) {
        std::fprintf(stderr, "--method milo takes either --rank R or --rank-policy P with --avg-rank R\n");
        return std::nullopt;
    }
    if (!milo && (options.rank > 0 || !options.rank_policy.empty())) {
        std::fprintf(stderr, "--rank and --rank-policy go with --method milo\n");
        return std::nullopt;
    }
    return options;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open '" + path + "'");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every number that follows "key": in a JSON text (a plain string search; the file is ours to trust).
std::vector<double> json_numbers(const std::string& json, const std::string& key) {
    std::vector<double> values;
    const std::string quoted = "\"" + key + "\"";
    for (size_t at = json.find(quoted); at != std::string::npos; at = json.find(quoted, at + 1)) {
        const size_t colon = json.find(':', at + quoted.size());
        if (colon == std::string::npos) break;
        values.push_back(std::strtod(json.c_str() + colon + 1, nullptr));
    }
    return values;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// How many generated tokens (after the leading BOS) agree with the reference before the first difference.
size_t generated_matches(const std::vector<int>& tokens, const std::vector<int32_t>& reference) {
    size_t n = 1;
    while (n < tokens.size() && n < reference.size() && tokens[n] == reference[n]) ++n;
    return n - 1;
}

struct Run {
    llama2::NllResult nll;
    int64_t weight_bytes = 0;
    double build_s = 0.0;
    double eval_s = 0.0;
};

Run run_nll(const std::shared_ptr<const llama2::Checkpoint>& checkpoint, llama2::LinearBackend& backend,
            llama2::LinearBackend* classifier_backend, const std::vector<uint16_t>& tokens) {
    Run run;
    auto start = std::chrono::steady_clock::now();
    llama2::Model model(checkpoint, backend, classifier_backend);
    run.build_s = seconds_since(start);
    run.weight_bytes = model.linear_weight_bytes();
    start = std::chrono::steady_clock::now();
    run.nll = llama2::evaluate_nll(model, tokens);
    run.eval_s = seconds_since(start);
    return run;
}

qjit_rank_policy parse_rank_policy(const std::string& name) {
    if (name == "uniform") return QJIT_RANK_UNIFORM;
    if (name == "dense-r") return QJIT_RANK_DENSE;
    if (name == "sparse-r") return QJIT_RANK_SPARSE;
    if (name == "kurtosis-r") return QJIT_RANK_KURTOSIS;
    if (name == "frequency-r") return QJIT_RANK_FREQUENCY;
    throw std::runtime_error("--rank-policy '" + name + "' is not uniform, dense-r, sparse-r, kurtosis-r or frequency-r");
}

// The ranks a policy gives the model's quantized matrices, in the order the model makes them.
// Kurtosis reads every value of a matrix, so its [n][k] storage serves as well as [k][n].
std::vector<int> policy_ranks(const Options& options, const llama2::Checkpoint& checkpoint) {
    std::vector<qjit_rank_matrix> matrices;
    for (const llama2::MatrixView& m : llama2::model_matrices(checkpoint, !options.fp32_classifier))
        matrices.push_back({m.k, m.n, m.role, m.weights_n_by_k, 0.0});
    std::vector<int> ranks(matrices.size());
    if (qjit_assign_ranks(parse_rank_policy(options.rank_policy), options.avg_rank, matrices.data(),
                          int64_t(matrices.size()), ranks.data()) != QJIT_OK)
        throw std::runtime_error(std::string("qjit_assign_ranks: ") + qjit_last_error());
    return ranks;
}

// One JSON object on one line, its keys in the order added.
class JsonLine {
public:
    JsonLine& number(const char* key, double value, int decimals = 6) {
        char text[64];
        std::snprintf(text, sizeof text, "%.*f", decimals, value);
        return raw(key, text);
    }
    JsonLine& integer(const char* key, long long value) { return raw(key, std::to_string(value)); }
    JsonLine& boolean(const char* key, bool value) { return raw(key, value ? "true" : "false"); }
    JsonLine& text(const char* key, const std::string& value) { return raw(key, "\"" + value + "\""); }  // plain ASCII names
    JsonLine& null(const char* key) { return raw(key, "null"); }
    std::string str() const { return "{" + body_ + "}"; }

private:
    JsonLine& raw(const char* key, const std::string& value) {
        body_ += (body_.empty() ? "\"" : ", \"") + std::string(key) + "\": " + value;
        return *this;
    }
    std::string body_;
};

// What the model's quantized matrices store, summed (the fp32 ones, a kept classifier, left out).
struct Storage {
    int64_t weights = 0;       // sum of K N
    int64_t stored_bytes = 0;  // qjit_linear_info.stored_bytes
    int64_t low_rank_bytes = 0;
    int64_t groups = 0, wide_groups = 0, outliers = 0;
    bool second_order_scales = false;

    double bits_per_weight() const { return weights > 0 ? double(stored_bytes) * 8.0 / double(weights) : 32.0; }
};

Storage quantized_storage(const llama2::Model& model) {
    Storage total;
    for (const llama2::Linear* linear : model.linears()) {
        qjit_linear_info info{};
        if (!linear->qjit_info(&info)) continue;
        total.weights += info.k * info.n;
        total.stored_bytes += info.stored_bytes;
        total.low_rank_bytes += info.low_rank_bytes;
        total.groups += (info.k + info.group_size - 1) / info.group_size;
        total.wide_groups += info.wide_groups;
        total.outliers += info.outliers;
        total.second_order_scales = total.second_order_scales || info.second_order_scales;
    }
    return total;
}

// [BOS] + the tokens of paragraphs first .. first + count - 1 of the text, each cut to the model's
// seq_len. The encoder is checked first against the reference tokens of the evaluation set's first
// paragraphs, so both sets are tokenized alike.
std::vector<std::vector<int>> calibration_sequences(const std::string& models_dir, const llama2::Config& config,
                                                    const std::vector<uint16_t>& reference_tokens, int first,
                                                    int count) {
    const llama2::Tokenizer tokenizer(models_dir + "/stories260K/tok512.bin", config.vocab_size);
    const std::vector<std::string> paragraphs =
        llama2::split_paragraphs(read_text(models_dir + "/text/tinystories_val.txt"));
    if (paragraphs.size() < size_t(first + count))
        throw std::runtime_error("the text has " + std::to_string(paragraphs.size()) + " paragraphs; calibration needs " +
                                 std::to_string(first + count));
    constexpr size_t kChecked = 20;
    std::vector<int> expected;
    for (size_t p = 0; p < kChecked; ++p) {
        expected.push_back(llama2::kBosToken);
        const std::vector<int> tokens = tokenizer.encode(paragraphs[p]);
        expected.insert(expected.end(), tokens.begin(), tokens.end());
    }
    if (reference_tokens.size() < expected.size() ||
        !std::equal(expected.begin(), expected.end(), reference_tokens.begin()))
        throw std::runtime_error("the encoder does not reproduce the reference tokens of the first paragraphs");
    std::vector<std::vector<int>> sequences;
    for (int p = first; p < first + count; ++p) {
        std::vector<int> sequence{llama2::kBosToken};
        const std::vector<int> tokens = tokenizer.encode(paragraphs[size_t(p)]);
        sequence.insert(sequence.end(), tokens.begin(), tokens.end());
        if (sequence.size() > size_t(config.seq_len)) sequence.resize(size_t(config.seq_len));
        sequences.push_back(std::move(sequence));
    }
    return sequences;
}

qjit_quant_config method_config(const Options& options) {
    qjit_quant_config config = llama2::make_quant_config(options.bits, options.group_size, false);
    config.scale_dtype = options.scale_dtype;
    const std::string& m = options.method;
    config.method = m == "milo"   ? QJIT_QUANT_MILO
                    : m == "hqq"  ? QJIT_QUANT_HQQ
                    : m == "gptq" ? QJIT_QUANT_GPTQ
                    : m == "mixed" ? QJIT_QUANT_MIXED
                                   : QJIT_QUANT_RTN;
    config.rank = options.rank;
    config.low_rank_bits = options.low_rank_bits;
    config.act_order = options.act_order ? 1 : 0;
    config.damp = options.damp;
    config.mixed_alpha = options.alpha;
    config.outlier_fraction = options.outlier_fraction;
    config.second_order_scales = options.second_order_scales ? 1 : 0;
    return config;
}

// --method: one method's NLL next to fp32's, as text or as one JSON object on stdout.
int run_method(const Options& options, const std::shared_ptr<const llama2::Checkpoint>& checkpoint,
               llama2::LinearBackend* classifier_backend, const std::vector<uint16_t>& tokens,
               const qjit_context_options& context_options) {
    llama2::DenseBackend dense;
    const Run fp32 = run_nll(checkpoint, dense, nullptr, tokens);
    const bool is_fp32 = options.method == "fp32";
    const bool mixed = options.method == "mixed", milo = options.method == "milo";

    const qjit_quant_config config = method_config(options);
    std::unique_ptr<llama2::QjitBackend> backend;
    std::vector<int> ranks;
    std::unique_ptr<llama2::Model> model;
    int64_t calibration_rows = 0;
    auto start = std::chrono::steady_clock::now();
    if (is_fp32) {
        model = std::make_unique<llama2::Model>(checkpoint, dense);
    } else {
        backend = std::make_unique<llama2::QjitBackend>(config, &context_options);
        if (!options.rank_policy.empty()) {
            ranks = policy_ranks(options, *checkpoint);
            backend->set_ranks(ranks);
        }
        if (options.calibrated()) {
            const std::vector<std::vector<int>> sequences =
                calibration_sequences(options.models_dir, checkpoint->config, tokens, options.calibration_start,
                                      options.calibration_paragraphs);
            model = std::make_unique<llama2::Model>(checkpoint, dense);  // fp32, quantized layer by layer
            calibration_rows = llama2::quantize_with_calibration(*model, *backend, sequences, !classifier_backend);
        } else {
            model = std::make_unique<llama2::Model>(checkpoint, *backend, classifier_backend);
        }
    }
    const double build_s = seconds_since(start);
    start = std::chrono::steady_clock::now();
    const llama2::NllResult nll = is_fp32 ? fp32.nll : llama2::evaluate_nll(*model, tokens);
    const double eval_s = is_fp32 ? fp32.eval_s : seconds_since(start);

    Storage storage = quantized_storage(*model);
    if (is_fp32) {  // every matrix dense: 32 bits per weight
        storage.weights = model->linear_weight_count();
        storage.stored_bytes = model->linear_stored_bytes();
    }
    const double extra_memory = storage.stored_bytes > storage.low_rank_bytes
                                    ? double(storage.low_rank_bytes) / double(storage.stored_bytes - storage.low_rank_bytes)
                                    : 0.0;
    double mean_rank = 0;
    for (int r : ranks) mean_rank += r;
    if (!ranks.empty()) mean_rank /= double(ranks.size());

    if (options.json) {
        JsonLine json;
        json.text("method", options.method);
        if (is_fp32) json.integer("bits", 32).null("group_size");
        else if (mixed) json.null("bits").integer("group_size", options.group_size);
        else json.integer("bits", options.bits).integer("group_size", options.group_size);
        json.text("scales", is_fp32 ? "-" : mixed && options.second_order_scales ? "sq4"
                                        : options.scale_dtype == QJIT_DTYPE_F16 ? "f16" : "f32")
            .number("nll", nll.mean_nll)
            .number("fp32_nll", fp32.nll.mean_nll)
            .number("delta_nll", nll.mean_nll - fp32.nll.mean_nll)
            .integer("tokens", nll.tokens)
            .number("bits_per_weight", storage.bits_per_weight(), 4)
            .integer("stored_bytes", storage.stored_bytes)
            .integer("weights", storage.weights)
            .text("classifier", classifier_backend || is_fp32 ? "fp32" : "quantized")
            .text("isa", isa_name(options.max_isa));
        if (milo || !ranks.empty())
            json.integer("rank", options.rank)
                .text("rank_policy", options.rank_policy)
                .number("avg_rank", options.avg_rank, 3)
                .number("mean_rank", mean_rank, 3)
                .integer("low_rank_bits", options.low_rank_bits)
                .integer("low_rank_bytes", storage.low_rank_bytes)
                .number("extra_memory", extra_memory, 4);
        if (mixed)
            json.number("alpha", options.alpha, 4)
                .number("outlier_fraction", options.outlier_fraction, 4)
                .boolean("second_order_scales", storage.second_order_scales)
                .integer("groups", storage.groups)
                .integer("wide_groups", storage.wide_groups)
                .integer("outliers", storage.outliers);
        if (options.method == "gptq" || mixed)
            json.boolean("act_order", options.act_order)
                .number("damp", options.damp, 4)
                .integer("calibration_paragraphs", options.calibrated() ? options.calibration_paragraphs : 0)
                .integer("calibration_start", options.calibrated() ? options.calibration_start : 0)
                .integer("calibration_tokens", calibration_rows);
        json.number("build_s", build_s, 3).number("eval_s", eval_s, 3);
        std::printf("%s\n", json.str().c_str());
        return 0;
    }
    std::printf("%s: %s, NLL %.5f (fp32 %.5f, %+.5f) over %lld tokens, %.3f bits per weight", options.method.c_str(),
                is_fp32 ? "fp32 dense" : backend->name().c_str(), nll.mean_nll, fp32.nll.mean_nll,
                nll.mean_nll - fp32.nll.mean_nll, static_cast<long long>(nll.tokens), storage.bits_per_weight());
    if (milo) std::printf(" (%.1f %% in the compensator)", 100.0 * extra_memory);
    if (mixed)
        std::printf(", %lld of %lld groups in 4 bits, %lld outliers", static_cast<long long>(storage.wide_groups),
                    static_cast<long long>(storage.groups), static_cast<long long>(storage.outliers));
    if (options.calibrated())
        std::printf(", calibrated on paragraphs %d..%d (%lld tokens)", options.calibration_start,
                    options.calibration_start + options.calibration_paragraphs - 1,
                    static_cast<long long>(calibration_rows));
    std::printf(", built in %.2f s\n", build_s);
    return 0;
}

int run_main(const Options& options) {
    const auto total_start = std::chrono::steady_clock::now();
    const std::string dir = options.models_dir;
    const std::string ref = dir + "/reference/";

    auto checkpoint =
        std::make_shared<const llama2::Checkpoint>(llama2::load_checkpoint(dir + "/stories260K/stories260K.bin"));
    const llama2::Config& c = checkpoint->config;
    const llama2::Tokenizer tokenizer(dir + "/stories260K/tok512.bin", c.vocab_size);
    const std::vector<int32_t> reference_tokens = llama2::read_i32_file(ref + "stories260K_greedy_tokens.i32");
    const std::string reference_text = read_text(ref + "stories260K_greedy_text.txt");
    const std::vector<uint16_t> nll_tokens = llama2::read_u16_file(ref + "tinystories_val_first200para.tok512.u16");
    const std::string nll_json = read_text(ref + "stories260K_tinystories_val_first200para_nll.json");
    const std::vector<double> reference_mean = json_numbers(nll_json, "mean_nll_nats");
    const std::vector<double> reference_sums = json_numbers(nll_json, "nll_sum");
    if (reference_mean.size() != 1) throw std::runtime_error("no \"mean_nll_nats\" in the reference JSON");

    qjit_context_options context_options;
    qjit_context_options_init(&context_options);
    context_options.num_threads = options.threads;
    context_options.activations = options.activations;
    context_options.max_isa = options.max_isa;
    llama2::DenseBackend dense;
    if (!options.method.empty())
        return run_method(options, checkpoint, options.fp32_classifier ? &dense : nullptr, nll_tokens, context_options);

    std::printf("stories_runner: qjit %s, models from %s\n", qjit_version(), dir.c_str());
    std::printf("model: dim %d, hidden %d, layers %d, heads %d (kv %d), vocab %d, seq_len %d\n", c.dim, c.hidden_dim,
                c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len);
    const char* scales = options.scale_dtype == QJIT_DTYPE_F16 ? "f16 (qjit default)" : "f32";
    std::printf("quantized: wq wk wv wo w1 w2 w3%s; scales %s\n\n",
                options.fp32_classifier ? " (classifier kept fp32)" : " and the classifier", scales);
    auto quant_config = [&](int bits, int group_size, bool symmetric) {
        qjit_quant_config config = llama2::make_quant_config(bits, group_size, symmetric);
        config.scale_dtype = options.scale_dtype;
        return config;
    };

    // (a) greedy decoding, one token at a time through the KV cache.
    {
        llama2::QjitBackend backend(quant_config(8, QJIT_GROUP_PER_COLUMN, true), &context_options);
        llama2::Model model(checkpoint, backend, options.fp32_classifier ? &dense : nullptr);
        const int steps = std::min(options.steps, c.seq_len);
        const auto start = std::chrono::steady_clock::now();
        const std::vector<int> tokens = llama2::greedy_decode(model, steps);
        const double seconds = seconds_since(start);

        const size_t matching = generated_matches(tokens, reference_tokens);
        const size_t reference_steps = reference_tokens.empty() ? 0 : reference_tokens.size() - 1;
        const std::string text = tokenizer.decode(tokens) + "\n";

        std::printf("(a) greedy decode, %d steps from BOS, %s, m = 1 with KV cache (%.3f s, %.0f tokens/s)\n", steps,
                    backend.name().c_str(), seconds, seconds > 0 ? steps / seconds : 0.0);
        std::printf("kernel (layer 0 wq): %s\n", model.layer_linear(0, 0).describe().c_str());
        std::printf("----\n%s----\n", text.c_str());
        std::printf("leading generated tokens matching the reference: %zu of %d (reference has %zu)\n", matching, steps,
                    reference_steps);
        if (size_t(steps) == reference_steps) {
            std::printf("text identical to reference/stories260K_greedy_text.txt: %s\n",
                        text == reference_text ? "yes" : "NO");
        }
        llama2::Model dense_model(checkpoint, dense);
        const std::vector<int> dense_tokens = llama2::greedy_decode(dense_model, steps);
        std::printf("for comparison, fp32 dense: %zu of %d leading generated tokens match, text identical: %s\n",
                    generated_matches(dense_tokens, reference_tokens), steps,
                    tokenizer.decode(dense_tokens) + "\n" == reference_text ? "yes" : "no");
        std::printf("\n");
    }

    // (b) mean NLL over the reference sequences, one batched forward per sequence.
    const Run fp32 = run_nll(checkpoint, dense, nullptr, nll_tokens);
    const double fp32_nll = fp32.nll.mean_nll;
    double max_sequence_diff = 0.0;
    if (reference_sums.size() == fp32.nll.sequence_nll.size()) {
        for (size_t i = 0; i < reference_sums.size(); ++i) {
            max_sequence_diff = std::max(max_sequence_diff, std::abs(reference_sums[i] - fp32.nll.sequence_nll[i]));
        }
    }
    std::printf("(b) mean NLL over %zu sequences, %lld predicted tokens (one m = T forward per sequence)\n",
                fp32.nll.sequence_nll.size(), static_cast<long long>(fp32.nll.tokens));
    std::printf("reference (float64 numpy): %.5f nats/token\n", reference_mean[0]);
    std::printf(
        "fp32 dense (this runner):  %.5f nats/token (%+.5f vs reference; max per-sequence |diff| %.2g "
        "nats; %.2f s)\n\n",
        fp32_nll, fp32_nll - reference_mean[0], max_sequence_diff, fp32.eval_s);

    std::printf("qjit, scales %s, %s; ΔNLL = NLL - fp32 dense NLL\n", scales,
                options.fp32_classifier ? "classifier fp32" : "classifier quantized too");
    std::printf("bits  group       zero    mean NLL       ΔNLL  weight KiB  build s   eval s\n");
    const int group_sizes[] = {32, 64, QJIT_GROUP_PER_COLUMN};
    for (int bits : {2, 3, 4, 8}) {
        for (int group : group_sizes) {
            for (bool symmetric : {true, false}) {
                const std::string group_name = group == QJIT_GROUP_PER_COLUMN ? "per-column" : std::to_string(group);
                std::printf("%-4d  %-10s  %-5s  ", bits, group_name.c_str(), symmetric ? "sym" : "asym");
                std::fflush(stdout);
                try {
                    llama2::QjitBackend backend(quant_config(bits, group, symmetric), &context_options);
                    const Run run =
                        run_nll(checkpoint, backend, options.fp32_classifier ? &dense : nullptr, nll_tokens);
                    std::printf("%9.5f  %+9.5f  %10.1f  %7.3f  %7.3f\n", run.nll.mean_nll, run.nll.mean_nll - fp32_nll,
                                double(run.weight_bytes) / 1024.0, run.build_s, run.eval_s);
                } catch (const std::exception& e) {
                    std::printf("failed: %s\n", e.what());
                }
            }
        }
    }
    std::printf("%-4s  %-10s  %-5s  %9.5f  %+9.5f  %10.1f  %7.3f  %7.3f\n", "fp32", "-", "-", fp32_nll, 0.0,
                double(fp32.weight_bytes) / 1024.0, fp32.build_s, fp32.eval_s);
    std::printf("\ntotal wall time %.2f s\n", seconds_since(total_start));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::optional<Options> options = parse_args(argc, argv);
    if (!options) return 2;
    try {
        return run_main(*options);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "stories_runner: %s\n", e.what());
        return 1;
    }
}
