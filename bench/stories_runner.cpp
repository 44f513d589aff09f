// Runs the stories260K llama2.c model end to end through qjit:
//   (a) greedy decoding with 8-bit per-column symmetric weights, checked against the reference tokens;
//   (b) mean NLL over the reference TinyStories sequences for bits 2/3/4/8 x group 32/64/per column x
//       symmetric/asymmetric, next to the dense fp32 figure and the reference mean.
// With --method, one quantization method instead: its NLL next to fp32's, and with --json one JSON
// object on stdout (method, bits, group_size, nll, fp32_nll, delta_nll, tokens, bits_per_weight, the
// method's parameters, ...).
//
// The calibrated methods (gptq, mixed) quantize layer by layer on the quantized model's own
// activations (qjit_models::llama::quantize_with_calibration): the calibration text is paragraphs 400 and later of
// text/tinystories_val.txt, tokenized here as the reference tokens were (the evaluation set is
// paragraphs 0..199), --calibration-paragraphs of them (default 256: about 25,000 tokens, each a row
// of every matrix's calibration; a gptq run takes 3-5 s on 2 shared cores, most of it running each
// layer over the calibration text once per group of its matrices). --calibration-start P takes
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
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/binary_files.hpp"
#include "models/json_line.hpp"
#include "models/llama2_checkpoint.hpp"
#include "models/llama2_tokenizer.hpp"
#include "models/llama_eval.hpp"
#include "models/llama_model.hpp"
#include "models/method_model.hpp"
#include "models/runner_options.hpp"

namespace {

namespace llama = qjit_models::llama;
namespace llama2 = qjit_models::llama2;
using Sequences = std::vector<std::vector<int>>;

// The evaluation set is the first 200 paragraphs; calibration starts well after it by default.
constexpr int kEvaluationParagraphs = 200;
constexpr const char* kMethods[] = {"fp32", "rtn", "hqq", "milo", "gptq", "mixed"};

struct Options {
    std::string models_dir = QJIT_SHARED_MODELS_DIR;
    int steps = 256;
    bool fp32_classifier = false;  // keep the classifier dense instead of quantizing it too
    qjit_models::ContextOptions context;
    qjit_models::MethodOptions method;  // method.method empty: the sweep
    int calibration_paragraphs = 256;
    int calibration_start = 400;  // first paragraph of the calibration text
    bool json = false;
};

void print_usage(const char* program) {
    std::printf(
        "usage: %s [--models-dir DIR] [--steps N] [--threads N] [--fp32-classifier] [--f32-scales]\n"
        "          [--activations auto|f32|int8]\n"
        "  --models-dir DIR   folder with stories260K/ and reference/ (default %s)\n"
        "  --steps N          greedy decoding steps (default 256)\n"
        "  --fp32-classifier  quantize only wq..w3 and keep the classifier in fp32\n"
        "%s"
        "  --method M         %s: evaluate this one method (no decoding, no sweep)\n"
        "%s"
        "  --calibration-paragraphs N  gptq, mixed: calibrate on N paragraphs of the text (default 256)\n"
        "  --calibration-start P  gptq, mixed: the first of them (default 400; the evaluation set is 0..199)\n"
        "  --json             print one JSON object on stdout (progress goes to stderr)\n",
        program, QJIT_SHARED_MODELS_DIR, qjit_models::kContextOptionsUsage, qjit_models::list_of(kMethods).c_str(),
        qjit_models::kMethodOptionsUsage);
}

// Returns nullopt after printing a message when the arguments are bad.
std::optional<Options> parse_args(int argc, char** argv) {
    Options options;
    qjit_models::ArgumentReader args(argc, argv);
    while (args.next()) {
        using qjit_models::OptionParse;
        const std::string& arg = args.option();
        OptionParse parsed = qjit_models::parse_context_option(args, options.context);
        if (parsed == OptionParse::not_mine) parsed = qjit_models::parse_method_option(args, options.method);
        if (parsed == OptionParse::failed) return std::nullopt;
        if (parsed == OptionParse::taken) continue;
        if (arg == "--models-dir") {
            const char* text = args.value();
            if (!text) return std::nullopt;
            options.models_dir = text;
        } else if (arg == "--steps") {
            const auto v = args.int_value(0, 1 << 20);
            if (!v) return std::nullopt;
            options.steps = *v;
        } else if (arg == "--fp32-classifier") {
            options.fp32_classifier = true;
        } else if (arg == "--calibration-paragraphs" || arg == "--calibration-start") {
            const auto v =
                arg == "--calibration-start" ? args.int_value(kEvaluationParagraphs, 4000) : args.int_value(1, 4000);
            if (!v) return std::nullopt;
            (arg == "--calibration-start" ? options.calibration_start : options.calibration_paragraphs) = *v;
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
    if (!qjit_models::check_method_options(options.method, kMethods)) return std::nullopt;
    if (options.method.method.empty() && options.json) {
        std::fprintf(stderr, "--json goes with --method (the sweep prints a table)\n");
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

std::vector<int> greedy_from_bos(llama::Model& model, int steps) {
    const int bos = llama2::kBosToken;
    return llama::greedy_decode(model, std::span<const int>(&bos, 1), steps).tokens;
}

struct Run {
    llama::NllResult nll;
    int64_t weight_bytes = 0;
    double build_s = 0.0;
    double eval_s = 0.0;
};

Run run_nll(const std::shared_ptr<const llama::Weights>& weights, llama::LayerMaker& maker,
            llama::LayerMaker* classifier_maker, const Sequences& sequences) {
    Run run;
    auto start = std::chrono::steady_clock::now();
    llama::Model model(weights, maker, classifier_maker);
    run.build_s = seconds_since(start);
    run.weight_bytes = model.linear_weight_bytes();
    start = std::chrono::steady_clock::now();
    run.nll = llama::evaluate_nll(model, sequences);
    run.eval_s = seconds_since(start);
    return run;
}

// [BOS] + the tokens of paragraphs first .. first + count - 1 of the text, each cut to the model's
// seq_len. The encoder is checked first against the reference tokens of the evaluation set's first
// paragraphs, so both sets are tokenized alike.
Sequences calibration_sequences(const std::string& models_dir, const llama::Config& config,
                                const std::vector<uint16_t>& reference_tokens, int first, int count) {
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
    Sequences sequences;
    for (int p = first; p < first + count; ++p) {
        std::vector<int> sequence{llama2::kBosToken};
        const std::vector<int> tokens = tokenizer.encode(paragraphs[size_t(p)]);
        sequence.insert(sequence.end(), tokens.begin(), tokens.end());
        if (sequence.size() > size_t(config.seq_len)) sequence.resize(size_t(config.seq_len));
        sequences.push_back(std::move(sequence));
    }
    return sequences;
}

// --method: one method's NLL next to fp32's, as text or as one JSON object on stdout.
int run_method(const Options& options, const std::shared_ptr<const llama::Weights>& weights,
               const std::vector<uint16_t>& nll_tokens, const qjit_context_options& context_options) {
    const qjit_models::MethodOptions& method = options.method;
    const Sequences sequences = llama2::split_at_bos(nll_tokens);
    llama::DenseMaker dense;
    const Run fp32 = run_nll(weights, dense, nullptr, sequences);
    const bool is_fp32 = method.method == "fp32";
    const bool mixed = method.method == "mixed", milo = method.method == "milo";

    Sequences calibration;
    if (method.calibrated())
        calibration = calibration_sequences(options.models_dir, weights->config, nll_tokens, options.calibration_start,
                                            options.calibration_paragraphs);
    auto start = std::chrono::steady_clock::now();
    const llama::MethodModel built =
        llama::build_method_model(weights, method, context_options, &calibration, options.fp32_classifier);
    const llama::Model& model = *built.model;
    const double build_s = seconds_since(start);
    start = std::chrono::steady_clock::now();
    const llama::NllResult nll = is_fp32 ? fp32.nll : llama::evaluate_nll(*built.model, sequences);
    const double eval_s = is_fp32 ? fp32.eval_s : seconds_since(start);

    llama::QjitStorage storage = llama::qjit_storage(model);
    if (is_fp32) {  // every matrix dense: 32 bits per weight
        storage.weights = model.linear_weight_count();
        storage.stored_bytes = model.linear_stored_bytes();
    }
    const double extra_memory = storage.stored_bytes > storage.low_rank_bytes
                                    ? double(storage.low_rank_bytes) / double(storage.stored_bytes - storage.low_rank_bytes)
                                    : 0.0;
    double mean_rank = 0;
    for (int r : built.ranks) mean_rank += r;
    if (!built.ranks.empty()) mean_rank /= double(built.ranks.size());

    if (options.json) {
        qjit_models::JsonLine json;
        json.text("method", method.method);
        if (is_fp32) json.integer("bits", 32).null("group_size");
        else if (mixed) json.null("bits").integer("group_size", method.group_size);
        else json.integer("bits", method.bits).integer("group_size", method.group_size);
        json.text("scales", is_fp32 ? "-" : mixed && method.second_order_scales ? "sq4"
                                        : method.scale_dtype == QJIT_DTYPE_F16 ? "f16" : "f32")
            .number("nll", nll.mean_nll)
            .number("fp32_nll", fp32.nll.mean_nll)
            .number("delta_nll", nll.mean_nll - fp32.nll.mean_nll)
            .integer("tokens", nll.tokens)
            .number("bits_per_weight", storage.bits_per_weight(), 4)
            .integer("stored_bytes", storage.stored_bytes)
            .integer("weights", storage.weights)
            .text("classifier", options.fp32_classifier || is_fp32 ? "fp32" : "quantized")
            .text("isa", qjit_models::isa_name(options.context.max_isa));
        if (milo || !built.ranks.empty())
            json.integer("rank", method.rank)
                .text("rank_policy", method.rank_policy)
                .number("avg_rank", method.avg_rank, 3)
                .number("mean_rank", mean_rank, 3)
                .integer("low_rank_bits", method.low_rank_bits)
                .integer("low_rank_bytes", storage.low_rank_bytes)
                .number("extra_memory", extra_memory, 4);
        if (mixed)
            json.number("alpha", method.alpha, 4)
                .number("outlier_fraction", method.outlier_fraction, 4)
                .boolean("second_order_scales", storage.second_order_scales)
                .integer("groups", storage.groups)
                .integer("wide_groups", storage.wide_groups)
                .integer("outliers", storage.outliers);
        if (method.method == "gptq" || mixed)
            json.boolean("act_order", method.act_order)
                .number("damp", method.damp, 4)
                .integer("calibration_paragraphs", method.calibrated() ? options.calibration_paragraphs : 0)
                .integer("calibration_start", method.calibrated() ? options.calibration_start : 0)
                .integer("calibration_tokens", built.calibration_rows);
        json.number("build_s", build_s, 3).number("eval_s", eval_s, 3);
        std::printf("%s\n", json.str().c_str());
        return 0;
    }
    std::printf("%s: %s, NLL %.5f (fp32 %.5f, %+.5f) over %lld tokens, %.3f bits per weight", method.method.c_str(),
                built.maker_name.c_str(), nll.mean_nll, fp32.nll.mean_nll, nll.mean_nll - fp32.nll.mean_nll,
                static_cast<long long>(nll.tokens), storage.bits_per_weight());
    if (milo) std::printf(" (%.1f %% in the compensator)", 100.0 * extra_memory);
    if (mixed)
        std::printf(", %lld of %lld groups in 4 bits, %lld outliers", static_cast<long long>(storage.wide_groups),
                    static_cast<long long>(storage.groups), static_cast<long long>(storage.outliers));
    if (method.calibrated())
        std::printf(", calibrated on paragraphs %d..%d (%lld tokens)", options.calibration_start,
                    options.calibration_start + options.calibration_paragraphs - 1,
                    static_cast<long long>(built.calibration_rows));
    std::printf(", built in %.2f s\n", build_s);
    return 0;
}

int run_main(const Options& options) {
    const auto total_start = std::chrono::steady_clock::now();
    const std::string dir = options.models_dir;
    const std::string ref = dir + "/reference/";

    const std::shared_ptr<const llama::Weights> weights = llama2::load_checkpoint(dir + "/stories260K/stories260K.bin");
    const llama::Config& c = weights->config;
    const llama2::Tokenizer tokenizer(dir + "/stories260K/tok512.bin", c.vocab_size);
    const std::vector<int32_t> reference_tokens = qjit_models::read_array_file<int32_t>(ref + "stories260K_greedy_tokens.i32");
    const std::string reference_text = read_text(ref + "stories260K_greedy_text.txt");
    const std::vector<uint16_t> nll_tokens = qjit_models::read_array_file<uint16_t>(ref + "tinystories_val_first200para.tok512.u16");
    const std::string nll_json = read_text(ref + "stories260K_tinystories_val_first200para_nll.json");
    const std::vector<double> reference_mean = json_numbers(nll_json, "mean_nll_nats");
    const std::vector<double> reference_sums = json_numbers(nll_json, "nll_sum");
    if (reference_mean.size() != 1) throw std::runtime_error("no \"mean_nll_nats\" in the reference JSON");

    const qjit_context_options context_options = options.context.context_options();
    if (!options.method.method.empty()) return run_method(options, weights, nll_tokens, context_options);
    const Sequences nll_sequences = llama2::split_at_bos(nll_tokens);
    llama::DenseMaker dense;

    std::printf("stories_runner: qjit %s, models from %s\n", qjit_version(), dir.c_str());
    std::printf("model: dim %d, hidden %d, layers %d, heads %d (kv %d), vocab %d, seq_len %d\n", c.dim, c.hidden_dim,
                c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len);
    const char* scales = options.method.scale_dtype == QJIT_DTYPE_F16 ? "f16 (qjit default)" : "f32";
    std::printf("quantized: wq wk wv wo w1 w2 w3%s; scales %s\n\n",
                options.fp32_classifier ? " (classifier kept fp32)" : " and the classifier", scales);
    auto quant_config = [&](int bits, int group_size, bool symmetric) {
        qjit_quant_config config = llama::make_quant_config(bits, group_size, symmetric);
        config.scale_dtype = options.method.scale_dtype;
        return config;
    };

    // (a) greedy decoding, one token at a time through the KV cache.
    {
        llama::QuantizingMaker maker(quant_config(8, QJIT_GROUP_PER_COLUMN, true), &context_options);
        llama::Model model(weights, maker, options.fp32_classifier ? &dense : nullptr);
        const int steps = std::min(options.steps, c.seq_len);
        const auto start = std::chrono::steady_clock::now();
        const std::vector<int> tokens = greedy_from_bos(model, steps);
        const double seconds = seconds_since(start);

        const size_t matching = generated_matches(tokens, reference_tokens);
        const size_t reference_steps = reference_tokens.empty() ? 0 : reference_tokens.size() - 1;
        const std::string text = tokenizer.decode(tokens) + "\n";

        std::printf("(a) greedy decode, %d steps from BOS, %s, m = 1 with KV cache (%.3f s, %.0f tokens/s)\n", steps,
                    maker.name().c_str(), seconds, seconds > 0 ? steps / seconds : 0.0);
        std::printf("kernel (layer 0 wq): %s\n", model.layer_linear(0, 0).describe().c_str());
        std::printf("----\n%s----\n", text.c_str());
        std::printf("leading generated tokens matching the reference: %zu of %d (reference has %zu)\n", matching, steps,
                    reference_steps);
        if (size_t(steps) == reference_steps) {
            std::printf("text identical to reference/stories260K_greedy_text.txt: %s\n",
                        text == reference_text ? "yes" : "NO");
        }
        llama::Model dense_model(weights, dense);
        const std::vector<int> dense_tokens = greedy_from_bos(dense_model, steps);
        std::printf("for comparison, fp32 dense: %zu of %d leading generated tokens match, text identical: %s\n",
                    generated_matches(dense_tokens, reference_tokens), steps,
                    tokenizer.decode(dense_tokens) + "\n" == reference_text ? "yes" : "no");
        std::printf("\n");
    }

    // (b) mean NLL over the reference sequences, one batched forward per sequence.
    const Run fp32 = run_nll(weights, dense, nullptr, nll_sequences);
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
                    llama::QuantizingMaker maker(quant_config(bits, group, symmetric), &context_options);
                    const Run run =
                        run_nll(weights, maker, options.fp32_classifier ? &dense : nullptr, nll_sequences);
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
