// Runs the stories260K llama2.c model end to end through qjit:
//   (a) greedy decoding with 8-bit per-column symmetric weights, checked against the reference tokens;
//   (b) mean NLL over the reference TinyStories sequences for bits 2/3/4/8 x group 32/64/per column x
//       symmetric/asymmetric, next to the dense fp32 figure and the reference mean.
// With --method, one quantization method instead: its NLL next to fp32's, and with --json one JSON
// object on stdout (method, bits, group_size, nll, fp32_nll, delta_nll, tokens, bits_per_weight, ...).
//
// Usage: stories_runner [--models-dir DIR] [--steps N] [--threads N] [--fp32-classifier] [--f32-scales]
//        stories_runner --method rtn|hqq|milo [--bits B] [--group G] [--rank R | --rank-policy P --avg-rank R]
//                       [--low-rank-bits 8|3|16] [--json]

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
    bool json = false;
};

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
        "  --method M         rtn, hqq or milo: evaluate this one method (no decoding, no sweep)\n"
        "  --bits B, --group G  its width (default 3) and group size (default 64; -1 per column)\n"
        "  --rank R           milo: the compensator rank of every matrix\n"
        "  --rank-policy P --avg-rank R  milo: ranks shared under an average rank (uniform, dense-r, sparse-r,\n"
        "                     kurtosis-r, frequency-r)\n"
        "  --low-rank-bits B  milo: how U and V are stored: 8 (default), 3 or 16 (fp16)\n"
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
        } else if (arg == "--avg-rank") {
            const char* text = value();
            if (!text) return std::nullopt;
            char* end = nullptr;
            options.avg_rank = std::strtod(text, &end);
            if (*text == '\0' || *end != '\0' || !(options.avg_rank >= 0 && options.avg_rank <= 1024)) {
                std::fprintf(stderr, "--avg-rank: '%s' is not a number in [0, 1024]\n", text);
                return std::nullopt;
            }
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
    if (!options.method.empty() && options.method != "rtn" && options.method != "hqq" && options.method != "milo") {
        std::fprintf(stderr, "--method: '%s' is not rtn, hqq or milo\n", options.method.c_str());
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

// --method: one method's NLL next to fp32's, as text or as one JSON object on stdout.
int run_method(const Options& options, const std::shared_ptr<const llama2::Checkpoint>& checkpoint,
               llama2::LinearBackend* classifier_backend, const std::vector<uint16_t>& tokens,
               const qjit_context_options& context_options) {
    llama2::DenseBackend dense;
    const Run fp32 = run_nll(checkpoint, dense, nullptr, tokens);

    qjit_quant_config config = llama2::make_quant_config(options.bits, options.group_size, false);
    config.scale_dtype = options.scale_dtype;
    config.method = options.method == "milo" ? QJIT_QUANT_MILO : options.method == "hqq" ? QJIT_QUANT_HQQ
                                                                                          : QJIT_QUANT_RTN;
    config.rank = options.rank;
    config.low_rank_bits = options.low_rank_bits;
    llama2::QjitBackend backend(config, &context_options);
    std::vector<int> ranks;
    if (!options.rank_policy.empty()) {
        ranks = policy_ranks(options, *checkpoint);
        backend.set_ranks(ranks);
    }
    const auto start = std::chrono::steady_clock::now();
    llama2::Model model(checkpoint, backend, classifier_backend);
    const double build_s = seconds_since(start);
    const llama2::NllResult nll = llama2::evaluate_nll(model, tokens);

    const double weights = double(model.linear_weight_count());
    const double stored = double(model.linear_stored_bytes()), low_rank = double(model.linear_low_rank_bytes());
    const double bits_per_weight = stored * 8.0 / weights;
    const double extra_memory = low_rank / (stored - low_rank);
    double mean_rank = 0;
    for (int r : ranks) mean_rank += r;
    if (!ranks.empty()) mean_rank /= double(ranks.size());
    if (options.json) {
        std::printf(
            "{\"method\": \"%s\", \"bits\": %d, \"group_size\": %d, \"scales\": \"%s\", \"nll\": %.6f, "
            "\"fp32_nll\": %.6f, \"delta_nll\": %.6f, \"tokens\": %lld, \"bits_per_weight\": %.4f, "
            "\"stored_bytes\": %.0f, \"low_rank_bytes\": %.0f, \"extra_memory\": %.4f, \"rank\": %d, "
            "\"rank_policy\": \"%s\", \"avg_rank\": %g, \"mean_rank\": %.3f, \"low_rank_bits\": %d, "
            "\"classifier\": \"%s\", \"build_s\": %.3f}\n",
            options.method.c_str(), options.bits, options.group_size,
            options.scale_dtype == QJIT_DTYPE_F16 ? "f16" : "f32", nll.mean_nll, fp32.nll.mean_nll,
            nll.mean_nll - fp32.nll.mean_nll, static_cast<long long>(nll.tokens), bits_per_weight, stored, low_rank,
            extra_memory, options.rank, options.rank_policy.c_str(), options.avg_rank, mean_rank,
            config.method == QJIT_QUANT_MILO ? options.low_rank_bits : 0,
            classifier_backend ? "fp32" : "quantized", build_s);
        return 0;
    }
    std::printf("%s: %s, NLL %.5f (fp32 %.5f, %+.5f) over %lld tokens, %.3f bits per weight (%.1f %% in the "
                "compensator), built in %.2f s\n",
                options.method.c_str(), backend.name().c_str(), nll.mean_nll, fp32.nll.mean_nll,
                nll.mean_nll - fp32.nll.mean_nll, static_cast<long long>(nll.tokens), bits_per_weight,
                100.0 * extra_memory, build_s);
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
