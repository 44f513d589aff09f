#include "models/run_gguf.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "io/gguf_file.hpp"
#include "models/fail.hpp"
#include "models/flash_ffn_runner.hpp"
#include "models/gguf_llama.hpp"
#include "models/gguf_vocabulary.hpp"
#include "models/json_line.hpp"
#include "models/llama_eval.hpp"
#include "models/llama_model.hpp"
#include "models/method_model.hpp"
#include "models/runner_options.hpp"
#include "models/text_generation.hpp"
#include "models/text_runner.hpp"
#include "models/token_sequences.hpp"

namespace qjit_models {

namespace {

constexpr const char* kMethods[] = {"exact", "fp32", "rtn", "hqq", "milo", "gptq", "mixed"};

struct Options {
    std::string model;
    std::string tokens;               // sequences to score; empty: none
    std::string text_file;            // or a text's paragraphs, tokenized here
    int max_sequences = 0;            // 0: all
    std::string calibration_tokens;   // gptq, mixed
    std::string calibration_text;     // or a text's paragraphs, tokenized here
    int calibration_sequences = 64;
    int generate = 0;                 // tokens to decode greedily
    int prompt_bench = 0;             // tokens of the timed prompt (0: none)
    int bench_repeats = 5;            // forwards of it, the median reported
    std::string prompt_tokens;        // empty: the BOS token
    std::string pack;                 // exact: a pack file the layers are mapped from or written to
    bool fp32_classifier = false;
    bool json = false;
    bool help = false;                // --help: the usage, nothing run
    bool token_by_token = false;      // NLL with one m = 1 step per position
    float ffn_threshold = 0;          // zero FFN activations below this magnitude
    qjit_kv_type kv_cache = QJIT_KV_F32;
    bool profile = false;             // --generate: the decode steps' time by forward step
    llama::FlashRunOptions flash;     // path empty: the model's own FFNs
    ContextOptions context;
    MethodOptions method;
    TextOptions text;                 // --prompt, --chat and sampling
};

// The --kv-cache names of the key/value cache types.
constexpr std::pair<const char*, qjit_kv_type> kKvTypes[] = {{"f32", QJIT_KV_F32}, {"f16", QJIT_KV_F16}, {"int8", QJIT_KV_INT8}};

std::optional<qjit_kv_type> kv_type_named(const std::string& name) {
    for (const auto& [text, type] : kKvTypes)
        if (name == text) return type;
    return std::nullopt;
}

const char* kv_type_name(qjit_kv_type type) {
    for (const auto& [text, kv] : kKvTypes)
        if (kv == type) return text;
    return "?";
}

void print_usage(const char* program) {
    std::printf(
        "usage: %s --model FILE.gguf [--tokens FILE.seq.u32 [--max-sequences N]]\n"
        "          [--prompt TEXT | --chat] [--generate N [--prompt-tokens 1,2,3]] [--method M ...] [--json]\n"
        "  --model FILE       a GGUF file of a llama, qwen2 or qwen3 model\n"
        "  --tokens FILE      token sequences to score (*.seq.u32: count, lengths, tokens; little-endian uint32)\n"
        "  --text-file FILE   score the paragraphs of a UTF-8 text instead (split at blank lines, tokenized with\n"
        "                     the file's own tokenizer, BOS as the file says)\n"
        "  --max-sequences N  score only the first N of them\n"
        "%s"
        "  --generate N       with --prompt or --chat: at most N tokens (default 128); else decode N tokens\n"
        "                     greedily after --prompt-tokens, timing each (ends of text do not stop it)\n"
        "  --prompt-tokens L  the prompt as comma-separated token ids (default: the model's BOS token)\n"
        "  --pack FILE        map the layers from FILE, a pack written by an earlier run from this model\n"
        "                     file for this machine's kernels; else import them and write FILE (docs/models.md)\n"
        "  --prompt-bench N   time a batched prompt of N tokens from an empty cache, last row's logits only\n"
        "                     (as llama-bench -p N), --bench-repeats times (5); reports the median\n"
        "  --method M         %s\n"
        "                     (default exact: the file's own weights, imported exactly)\n"
        "%s"
        "  --calibration-tokens FILE  gptq, mixed, hqq, milo: calibration sequences (*.seq.u32; tools/tokenize_text.py);\n"
        "                     hqq then weighs rows by their inputs and keeps a layer only where the calibration\n"
        "                     NLL is no worse than rtn's; milo fits the layers' output error\n"
        "  --calibration-text FILE  the same from the paragraphs of a UTF-8 text (as --text-file)\n"
        "  --calibration-sequences N  how many of them (default 64)\n"
        "  --fp32-classifier  keep the classifier in dense fp32 loops whatever the method\n"
        "  --token-by-token   score --tokens one m = 1 step per position, as decoding runs\n"
        "  --profile          with --generate: the decode steps' time per token, by step of the forward\n"
        "  --kv-cache T       how the key/value cache stores keys and values: f32 (default), f16 (half\n"
        "                     the bytes decoding reads per position; each rounded to fp16) or int8 (int8\n"
        "                     codes and a step per position and head: about a quarter of the bytes)\n"
        "  --ffn-threshold T  zero every FFN activation silu(x w1)*(x w3) of magnitude below T (reports the sparsity)\n"
        "  --flash FILE       the FFNs from a neuron file (qjit-flash-convert), read neuron by neuron (docs/flash.md)\n"
        "  --flash-budget F   the DRAM budget as a share of what every neuron resident takes (0.5)\n"
        "  --flash-window K   tokens a neuron stays resident after it was active (4)\n"
        "  --flash-recall R   fit a predictor per layer on --calibration-tokens for this recall of the neurons above\n"
        "                     --ffn-threshold, and read only the neurons it names (default: every neuron)\n"
        "  --flash-read-ahead read the next layer's predicted neurons while this layer computes\n"
        "  --flash-f32        the neuron file's gate and up products take x in fp32 (exact; by default int8\n"
        "                     through generated kernels for files of 4 bits or fewer)\n"
        "  --flash-tune-reads measure the disk's read curve once (kept in the tuning database) to plan reads\n"
        "%s"
        "  --json             print one JSON object on stdout\n",
        program, kTextOptionsUsage, list_of(kMethods).c_str(), kMethodOptionsUsage,
        kContextOptionsUsage);
}

// Returns nullopt after printing a message when the arguments are bad.
std::optional<Options> parse_args(int argc, char** argv) {
    Options options;
    options.method.method = "exact";
    ArgumentReader args(argc, argv);
    while (args.next()) {
        const std::string& arg = args.option();
        OptionParse parsed = parse_context_option(args, options.context);
        if (parsed == OptionParse::not_mine) parsed = parse_method_option(args, options.method);
        if (parsed == OptionParse::not_mine) parsed = parse_text_option(args, options.text);
        if (parsed == OptionParse::failed) return std::nullopt;
        if (parsed == OptionParse::taken) continue;
        if (arg == "--model" || arg == "--tokens" || arg == "--calibration-tokens" || arg == "--prompt-tokens" ||
            arg == "--pack" || arg == "--text-file" || arg == "--calibration-text") {
            const char* text = args.value();
            if (!text) return std::nullopt;
            (arg == "--model"                ? options.model
             : arg == "--tokens"             ? options.tokens
             : arg == "--calibration-tokens" ? options.calibration_tokens
             : arg == "--pack"               ? options.pack
             : arg == "--text-file"          ? options.text_file
             : arg == "--calibration-text"   ? options.calibration_text
                                             : options.prompt_tokens) = text;
        } else if (arg == "--max-sequences" || arg == "--calibration-sequences" || arg == "--generate" ||
                   arg == "--prompt-bench" || arg == "--bench-repeats") {
            const auto v = args.int_value(arg == "--generate" || arg == "--prompt-bench" ? 0 : 1, 1 << 24);
            if (!v) return std::nullopt;
            (arg == "--max-sequences"           ? options.max_sequences
             : arg == "--calibration-sequences" ? options.calibration_sequences
             : arg == "--prompt-bench"          ? options.prompt_bench
             : arg == "--bench-repeats"         ? options.bench_repeats
                                                : options.generate) = *v;
        } else if (arg == "--kv-cache") {
            const char* text = args.value();
            if (!text) return std::nullopt;
            const std::optional<qjit_kv_type> type = kv_type_named(text);
            if (!type) {
                std::fprintf(stderr, "--kv-cache: '%s' is not f32, f16 or int8\n", text);
                return std::nullopt;
            }
            options.kv_cache = *type;
        } else if (arg == "--flash") {
            const char* text = args.value();
            if (!text) return std::nullopt;
            options.flash.path = text;
        } else if (arg == "--ffn-threshold" || arg == "--flash-budget" || arg == "--flash-recall") {
            const auto v = args.number_value(arg == "--ffn-threshold" ? 1e6 : 1.0);
            if (!v) return std::nullopt;
            if (arg == "--ffn-threshold") options.ffn_threshold = float(*v);
            else if (arg == "--flash-budget") options.flash.budget_fraction = *v;
            else options.flash.target_recall = *v;
        } else if (arg == "--flash-window") {
            const auto v = args.int_value(0, 1 << 20);
            if (!v) return std::nullopt;
            options.flash.window = *v;
        } else if (arg == "--flash-read-ahead") {
            options.flash.read_ahead = true;
        } else if (arg == "--flash-tune-reads") {
            options.flash.tune_reads = true;
        } else if (arg == "--flash-f32") {
            options.flash.activations = QJIT_ACTIVATIONS_F32;
        } else if (arg == "--token-by-token") {
            options.token_by_token = true;
        } else if (arg == "--fp32-classifier") {
            options.fp32_classifier = true;
        } else if (arg == "--profile") {
            options.profile = true;
        } else if (arg == "--json") {
            options.json = true;
        } else if (arg == "--help" || arg == "-h") {
            print_usage(argv[0]);
            options.help = true;
            return options;
        } else {
            std::fprintf(stderr, "unknown argument '%s'\n", arg.c_str());
            print_usage(argv[0]);
            return std::nullopt;
        }
    }
    if (!check_method_options(options.method, kMethods) || !check_text_options(options.text)) return std::nullopt;
    auto refuse = [](const char* message) -> std::optional<Options> {
        std::fprintf(stderr, "%s\n", message);
        return std::nullopt;
    };
    if (options.model.empty()) return refuse("--model FILE.gguf is required");
    if (!options.tokens.empty() && !options.text_file.empty()) return refuse("give --tokens or --text-file, not both");
    if (options.max_sequences > 0 && options.tokens.empty() && options.text_file.empty())
        return refuse("--max-sequences goes with --tokens or --text-file");
    if (!options.prompt_tokens.empty() && options.generate == 0) return refuse("--prompt-tokens goes with --generate");
    if (!options.prompt_tokens.empty() && (options.text.has_prompt() || options.text.chat))
        return refuse("give the prompt as text (--prompt, --chat) or as tokens (--prompt-tokens), not both");
    if ((options.text.has_prompt() || options.text.chat) && options.generate == 0) options.generate = 128;
    if (options.text.chat && options.json) return refuse("--chat is a conversation on the terminal: no --json");
    if (options.profile && (options.text.has_prompt() || options.text.chat))
        return refuse("--profile goes with --prompt-tokens (a fixed number of greedy steps)");
    const bool fits_predictor = !options.flash.path.empty() && options.flash.target_recall > 0;
    if (!options.calibration_tokens.empty() && !options.calibration_text.empty())
        return refuse("give --calibration-tokens or --calibration-text, not both");
    const bool calibration = !options.calibration_tokens.empty() || !options.calibration_text.empty();
    if ((options.method.needs_calibration() || fits_predictor) && !calibration)
        return refuse("--method gptq, a calibrated --method mixed, --milo-base gptq and --flash-recall need "
                      "--calibration-tokens FILE.seq.u32 or --calibration-text FILE");
    if (!options.method.takes_calibration() && !fits_predictor && calibration)
        return refuse("--calibration-tokens and --calibration-text go with --method gptq, hqq, milo, a calibrated "
                      "--method mixed or --flash-recall");
    options.method.with_calibration = calibration;
    if (options.flash.target_recall > 0 && options.flash.path.empty()) return refuse("--flash-recall goes with --flash");
    if (!options.pack.empty() && options.method.method != "exact")
        return refuse("--pack holds the exact import's layers: it goes with --method exact (the default)");
    options.flash.magnitude_threshold = options.ffn_threshold;
    return options;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The nearest-rank percentile p (0 < p <= 1) of `values`.
double percentile(std::vector<double> values, double p) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    const size_t rank = size_t(std::ceil(p * double(values.size())));
    return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

// The activation path the layers take: the option, or for auto $QJIT_ACTIVATIONS when it names one
// (as qjit reads it), else "auto" (qjit's default path).
std::string activations_name(qjit_activations activations) {
    if (activations == QJIT_ACTIVATIONS_F32) return "f32";
    if (activations == QJIT_ACTIVATIONS_INT8) return "int8";
    const char* env = std::getenv("QJIT_ACTIVATIONS");
    return env && (std::string(env) == "f32" || std::string(env) == "int8") ? env : "auto";
}

// Sequences longer than the model's context are refused rather than cut: their scores would differ.
void check_lengths(const TokenSequences& sequences, int seq_len, const std::string& what) {
    for (size_t s = 0; s < sequences.size(); ++s)
        if (sequences[s].size() > size_t(seq_len))
            throw std::runtime_error(what + ": sequence " + std::to_string(s) + " has " +
                                     std::to_string(sequences[s].size()) + " tokens, more than the model's context of " +
                                     std::to_string(seq_len));
}

// The token sequences a file holds (at most `limit`; 0: all), checked against the model.
TokenSequences read_sequences(const std::string& path, int limit, const llama::Config& c, const std::string& what) {
    if (path.empty()) return {};
    TokenSequences sequences = read_token_sequences(path);
    if (limit > 0 && sequences.size() > size_t(limit)) sequences.resize(size_t(limit));
    const std::string where = what + " '" + path + "'";
    check_tokens_in_vocabulary(sequences, c.vocab_size, where);
    check_lengths(sequences, c.seq_len, where);
    return sequences;
}

// The paragraphs of --text-file, tokenized, checked against the model as token files are.
TokenSequences text_sequences(const std::string& path, int limit, const GgufVocabulary& vocabulary,
                              const llama::Config& c, const std::string& what) {
    if (path.empty()) return {};
    TokenSequences sequences;
    try {
        sequences = tokenize_paragraphs(vocabulary, path, limit);
    } catch (const std::exception& e) {
        throw std::runtime_error(what + " " + e.what());
    }
    if (sequences.empty()) throw std::runtime_error(what + " '" + path + "' holds no paragraph");
    check_lengths(sequences, c.seq_len, what + " '" + path + "'");
    return sequences;
}

// --prompt-tokens, or the model's BOS token, checked to leave room for `generate` tokens.
std::vector<int> read_prompt(const Options& options, const GgufVocabulary& vocabulary,
                             const llama::Config& c) {
    std::vector<int> prompt;
    if (!options.prompt_tokens.empty()) {
        prompt = parse_token_list(options.prompt_tokens);
    } else if (vocabulary.bos()) {
        prompt = {*vocabulary.bos()};
    } else {
        throw std::runtime_error("the model names no BOS token (tokenizer.ggml.bos_token_id): give --prompt-tokens");
    }
    check_tokens_in_vocabulary({prompt}, c.vocab_size, "--prompt-tokens");
    if (prompt.size() - 1 + size_t(options.generate) > size_t(c.seq_len))
        throw std::runtime_error("--generate " + std::to_string(options.generate) + " after a prompt of " +
                                 std::to_string(prompt.size()) + " tokens exceeds the model's context of " +
                                 std::to_string(c.seq_len));
    return prompt;
}

// What --generate measured.
struct Decoding {
    std::vector<int> prompt, generated;
    std::string text;
    double prompt_seconds = 0.0, tokens_per_second = 0.0, p50_ms = 0.0, p99_ms = 0.0;
    double step_seconds = 0.0;                  // all steps, argmax included
    std::string stop_reason;                    // --prompt: what ended generation
    std::optional<llama::StepProfile> profile;  // with --profile
};

// The figures of the m = 1 steps a decoding timed: their sum, tokens per second over it (a step per
// token) and the nearest-rank p50 and p99.
void set_step_figures(Decoding& d, const std::vector<double>& step_seconds) {
    d.step_seconds = 0.0;
    for (const double step : step_seconds) d.step_seconds += step;
    d.tokens_per_second = d.step_seconds > 0 ? double(step_seconds.size()) / d.step_seconds : 0.0;
    d.p50_ms = 1e3 * percentile(step_seconds, 0.50);
    d.p99_ms = 1e3 * percentile(step_seconds, 0.99);
}

Decoding decode(llama::Model& model, const std::vector<int>& prompt, int steps, const GgufVocabulary& vocabulary,
                bool profile) {
    Decoding d;
    if (profile) d.profile.emplace();
    const llama::Generation generation =
        llama::greedy_decode(model, prompt, steps, d.profile ? &*d.profile : nullptr);
    d.prompt = prompt;
    d.generated.assign(generation.tokens.begin() + std::ptrdiff_t(prompt.size()), generation.tokens.end());
    d.text = vocabulary.decode(d.generated);
    d.prompt_seconds = generation.prompt_seconds;
    set_step_figures(d, generation.step_seconds);  // a step per generated token
    return d;
}

// --prompt: the prompt's text tokenized and continued by the sampler, the text streamed to stdout
// (the prompt first) unless the report is JSON.
Decoding generate_text(llama::Model& model, const GgufVocabulary& vocabulary, const Options& options) {
    Decoding d;
    d.prompt = tokenize_prompt(vocabulary, options.text.prompt);
    if (d.prompt.size() >= size_t(model.config().seq_len))
        throw std::runtime_error("the prompt's " + std::to_string(d.prompt.size()) +
                                 " tokens leave no room in the model's context of " +
                                 std::to_string(model.config().seq_len));
    GenerationLimits limits;
    limits.max_tokens = options.generate;
    limits.stop_strings = options.text.stop_strings;
    Sampler sampler(options.text.sampling);
    TextSession session(model, vocabulary);
    TextCallback print;
    if (!options.json) {
        std::fwrite(options.text.prompt.data(), 1, options.text.prompt.size(), stdout);
        print = [](std::string_view piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        };
    }
    const GeneratedText generated = session.generate(d.prompt, limits, sampler, print);
    if (!options.json) {
        std::printf("\n");
        std::fflush(stdout);  // the text before the figures on stderr
    }
    d.generated = generated.tokens;
    d.text = generated.text;
    d.stop_reason = stop_reason_name(generated.reason);
    d.prompt_seconds = generated.prompt_seconds;  // the first token's step included
    set_step_figures(d, generated.step_seconds);
    return d;
}

// Everything a run reports.
struct Report {
    std::shared_ptr<const llama::Weights> weights;
    std::string architecture;  // general.architecture
    std::string linears;
    llama::QjitStorage storage;
    double load_seconds = 0.0;
    std::string pack;  // with --pack: "mapped", or "written (<why>)"
    int64_t calibration_rows = 0;
    double quantization_seconds = 0, calibration_seconds = 0;
    std::optional<llama::CalibratedQuantization> choice;  // hqq's per-layer choice against rtn
    std::optional<llama::NllResult> nll;
    double eval_seconds = 0.0;
    std::optional<Decoding> decoding;
    std::vector<double> prompt_bench_seconds;
    int64_t peak_resident_bytes = 0;
    llama::FfnSparsity sparsity;
    std::optional<qjit_flash_counters> flash;
    std::optional<qjit_flash_ffn_info> flash_info;
    double flash_fit_seconds = 0.0;
    double flash_curve_gbps = 0.0;  // the read curve at the run's mean read size
    bool ffn_linears = true;        // false: the model holds no FFN linears (--flash serves them)
};

// What the reads moved per second of reading (start to end, overlapped or not).
double flash_read_gbps(const qjit_flash_counters& f) {
    return f.io_seconds > 0 ? double(f.bytes_read) / f.io_seconds * 1e-9 : 0.0;
}

double flash_mean_read_bytes(const qjit_flash_counters& f) {
    return f.reads > 0 ? double(f.bytes_read) / double(f.reads) : 0.0;
}

// The share of the FFNs' weight bytes a layer call touches, resident or read: with resident gates,
// every gate and the active neurons' up and down; else the active neurons' vectors. (Per call: for
// one token a call with --token-by-token.)
double flash_weight_fraction(const qjit_flash_counters& f, const qjit_flash_ffn_info& info) {
    const double active = double(f.active_neurons) / double(std::max<int64_t>(1, f.tokens)) / double(info.d_ff);
    return info.resident_gate_bytes > 0 ? (1.0 + 2.0 * active) / 3.0 : active;
}

// Milliseconds per decoded token in each forward step (llama::kStepNames' order), then in what no
// step holds (argmax, the calls between steps): --profile's figures.
std::vector<double> profile_ms_per_token(const Decoding& d) {
    const double tokens = double(std::max<size_t>(1, d.generated.size()));
    std::vector<double> ms;
    for (const double seconds : d.profile->seconds) ms.push_back(1e3 * seconds / tokens);
    ms.push_back(1e3 * (d.step_seconds - d.profile->total()) / tokens);
    return ms;
}

void print_profile(const Decoding& d) {
    const std::vector<double> ms = profile_ms_per_token(d);
    const double total_ms = std::max(1e3 * d.step_seconds / double(std::max<size_t>(1, d.generated.size())), 1e-9);
    std::printf("\n| step of a decoded token | ms | share |\n|---|---|---|\n");
    for (size_t i = 0; i < ms.size(); ++i)
        std::printf("| %s | %.3f | %.1f %% |\n",
                    i < size_t(llama::kStepCount) ? llama::kStepNames[i] : "the rest (argmax, between steps)", ms[i],
                    100 * ms[i] / total_ms);
    std::printf("\n");
}

// The median prompt benchmark's tokens per second.
double prompt_tokens_per_second(const Options& options, const Report& r) {
    const double median = percentile(r.prompt_bench_seconds, 0.5);
    return median > 0 ? double(options.prompt_bench) / median : 0.0;
}

// The process's peak resident set so far (getrusage's ru_maxrss, in KiB on Linux).
int64_t peak_resident_bytes() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return int64_t(usage.ru_maxrss) * 1024;
}

// A prompt of `count` tokens spread over the vocabulary (llama-bench's prompt test feeds random ones).
std::vector<int> bench_prompt(int count, int vocab_size) {
    std::vector<int> tokens(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) tokens[size_t(i)] = 1 + int((int64_t(i) * 7919) % (vocab_size - 1));
    return tokens;
}

void print_json(const Options& options, const Report& r) {
    JsonLine json;
    json.text("model", options.model)
        .text("architecture", r.architecture)
        .text("method", options.method.method)
        .text("linears", r.linears)
        .integer("threads", options.context.threads)
        .text("activations", activations_name(options.context.activations))
        .text("kv_cache", kv_type_name(options.kv_cache))
        .number("bits_per_weight", r.storage.bits_per_weight(), 4)
        .integer("stored_bytes", r.storage.stored_bytes)
        .integer("weights", r.storage.weights)
        .number("load_seconds", r.load_seconds, 3);
    if (!r.pack.empty()) json.text("pack", r.pack);
    json.number("quantization_seconds", r.quantization_seconds, 3);
    if (options.method.calibrated())
        json.integer("calibration_tokens", r.calibration_rows).number("calibration_seconds", r.calibration_seconds, 3);
    if (r.choice)
        json.integer("layers_kept", r.choice->layers_kept)
            .integer("layers_tried", r.choice->layers_tried)
            .number("calibration_nll_rtn", r.choice->start_nll)
            .number("calibration_nll", r.choice->end_nll);
    if (r.nll) {
        json.number("nll", r.nll->mean_nll)
            .integer("tokens", r.nll->tokens)
            .integer("sequences", int64_t(r.nll->sequence_nll.size()))
            .number("eval_seconds", r.eval_seconds, 3)
            .numbers("per_sequence_nll_sum", r.nll->sequence_nll);
    }
    if (options.ffn_threshold > 0)
        json.number("ffn_threshold", options.ffn_threshold, 6).number("ffn_sparsity", r.sparsity.fraction(), 6);
    if (r.flash) {
        const qjit_flash_counters& f = *r.flash;
        const double calls = double(std::max<int64_t>(1, f.tokens));
        json.text("flash_file", options.flash.path)
            .boolean("model_ffn_linears", r.ffn_linears)
            .text("flash_format", r.flash_info->format)
            .text("flash_kernels", r.flash_info->kernels)
            .text("flash_products", options.flash.activations == QJIT_ACTIVATIONS_F32 ? "f32" : "auto")
            .integer("flash_dram_bytes", r.flash_info->dram_bytes)
            .integer("flash_weight_bytes", r.flash_info->weight_bytes)
            .integer("flash_resident_gate_bytes", r.flash_info->resident_gate_bytes)
            .number("flash_sparsity", r.flash_info->sparsity, 4)
            .number("flash_fit_seconds", r.flash_fit_seconds, 3)
            .integer("flash_calls", f.tokens)
            .number("flash_active_fraction", double(f.active_neurons) / calls / double(r.flash_info->d_ff), 6)
            .number("flash_weight_fraction_touched", flash_weight_fraction(f, *r.flash_info), 6)
            .number("flash_hit_rate", f.active_neurons ? double(f.cache_hits) / double(f.active_neurons) : 0.0, 6)
            .number("flash_bytes_read_per_call", double(f.bytes_read) / calls, 1)
            .number("flash_io_seconds", f.io_seconds, 4)
            .number("flash_cache_seconds", f.cache_seconds, 4)
            .number("flash_compute_seconds", f.compute_seconds, 4)
            .number("flash_predict_seconds", f.predict_seconds, 4)
            .number("flash_io_wait_seconds", f.io_wait_seconds, 4)
            .integer("flash_reads", f.reads)
            .number("flash_mean_read_bytes", flash_mean_read_bytes(f), 1)
            .number("flash_read_gbps", flash_read_gbps(f), 4)
            .number("flash_curve_gbps", r.flash_curve_gbps, 4)
            .integer("flash_read_ahead_neurons", f.read_ahead_neurons)
            .integer("flash_read_ahead_used", f.read_ahead_used);
    }
    if (r.decoding) {
        json.integers("prompt_tokens", r.decoding->prompt)
            .integers("generated_tokens", r.decoding->generated)
            .text("text", r.decoding->text)
            .number("prompt_seconds", r.decoding->prompt_seconds, 4)
            .number("tokens_per_second", r.decoding->tokens_per_second, 2)
            .number("p50_ms", r.decoding->p50_ms, 3)
            .number("p99_ms", r.decoding->p99_ms, 3);
        if (!r.decoding->stop_reason.empty()) json.text("stop_reason", r.decoding->stop_reason);
        if (r.decoding->profile) {
            const std::vector<double> ms = profile_ms_per_token(*r.decoding);
            for (size_t i = 0; i < ms.size(); ++i)
                json.number(("step_ms_" + std::string(i < size_t(llama::kStepCount) ? llama::kStepKeys[i] : "rest")).c_str(),
                            ms[i], 4);
        }
    }
    if (!r.prompt_bench_seconds.empty()) {
        json.integer("prompt_bench_tokens", options.prompt_bench)
            .number("prompt_bench_tokens_per_second", prompt_tokens_per_second(options, r), 2)
            .numbers("prompt_bench_seconds", r.prompt_bench_seconds);
    }
    json.integer("peak_resident_bytes", r.peak_resident_bytes);
    std::printf("%s\n", json.str().c_str());
}

// The report as text on `out`: stdout, or stderr when the generated text went to stdout.
void print_text(const Options& options, const Report& r, FILE* out) {
    const llama::Config& c = r.weights->config;
    std::fprintf(out, "model: %s: %s, %d layers, dim %d, FFN %d, %d heads (%d KV) of %d, vocab %d, context %d, "
                "RoPE base %g, RMSNorm eps %g, classifier %s\n",
                options.model.c_str(), r.architecture.c_str(), c.n_layers, c.dim, c.hidden_dim, c.n_heads,
                c.n_kv_heads, c.head_size, c.vocab_size, c.seq_len, double(c.rope_base), double(c.rms_eps),
                r.weights->tied_classifier ? "tied to the embedding" : "separate");
    std::fprintf(out, "linears: %s, %.3f bits per weight as stored, loaded in %.2f s%s\n", r.linears.c_str(),
                r.storage.bits_per_weight(), r.load_seconds, r.ffn_linears ? "" : " (not the FFNs: --flash serves them)");
    if (!r.pack.empty()) std::fprintf(out, "pack %s: %s\n", options.pack.c_str(), r.pack.c_str());
    if (r.nll)
        std::fprintf(out, "NLL %.6f nats per token over %lld tokens of %zu sequences (%.2f s)\n", r.nll->mean_nll,
                    static_cast<long long>(r.nll->tokens), r.nll->sequence_nll.size(), r.eval_seconds);
    if (options.ffn_threshold > 0)
        std::fprintf(out, "FFN activations below %g zeroed: %.2f%% of them\n", double(options.ffn_threshold),
                    100.0 * r.sparsity.fraction());
    if (r.flash) {
        const qjit_flash_counters& f = *r.flash;
        const double calls = double(std::max<int64_t>(1, f.tokens));
        std::fprintf(out, "flash FFNs: %s (%s), %.1f MB resident (%.1f MB of gates) of %.1f MB; per layer call: %.2f%% of "
                    "neurons active, %.1f%% of the weight bytes touched, %.1f%% of the active resident, %.1f KB read; "
                    "I/O %.2f s, cache %.2f s, compute %.2f s, predictors %.2f s\n",
                    options.flash.path.c_str(), r.flash_info->format, r.flash_info->dram_bytes * 1e-6,
                    r.flash_info->resident_gate_bytes * 1e-6, r.flash_info->weight_bytes * 1e-6,
                    100.0 * double(f.active_neurons) / calls / double(r.flash_info->d_ff),
                    100.0 * flash_weight_fraction(f, *r.flash_info),
                    f.active_neurons ? 100.0 * double(f.cache_hits) / double(f.active_neurons) : 0.0,
                    double(f.bytes_read) / calls * 1e-3, f.io_seconds, f.cache_seconds, f.compute_seconds,
                    f.predict_seconds);
        char curve[48] = "not measured, see --flash-tune-reads";
        if (r.flash_curve_gbps > 0) std::snprintf(curve, sizeof curve, "%.3f GB/s", r.flash_curve_gbps);
        std::fprintf(out, "flash reads: %lld of %.1f KB on average at %.3f GB/s (the disk's curve: %s); %.2f s of waiting "
                    "for them; %lld neurons read ahead, %lld of them used\n",
                    static_cast<long long>(f.reads), flash_mean_read_bytes(f) * 1e-3, flash_read_gbps(f), curve,
                    f.io_wait_seconds, static_cast<long long>(f.read_ahead_neurons),
                    static_cast<long long>(f.read_ahead_used));
    }
    if (r.decoding) {
        const Decoding& d = *r.decoding;
        if (d.stop_reason.empty()) std::fprintf(out, "----\n%s\n----\n", d.text.c_str());
        std::fprintf(out, "decode: %zu tokens, %.1f tokens/s, p50 %.2f ms, p99 %.2f ms per token (prompt of %zu tokens: "
                    "%.3f s)%s%s\n",
                    d.generated.size(), d.tokens_per_second, d.p50_ms, d.p99_ms, d.prompt.size(), d.prompt_seconds,
                    d.stop_reason.empty() ? "" : "; stopped by ", d.stop_reason.c_str());
        if (d.profile) print_profile(d);
    }
    if (!r.prompt_bench_seconds.empty())
        std::fprintf(out, "prompt: %d tokens, %.1f tokens/s (the median of %zu forwards from an empty cache)\n",
                    options.prompt_bench, prompt_tokens_per_second(options, r), r.prompt_bench_seconds.size());
    std::fprintf(out, "peak resident memory: %.1f MB\n", double(r.peak_resident_bytes) * 1e-6);
}

int run(const Options& options) {
    Report report;
    const auto load_start = std::chrono::steady_clock::now();
    const std::shared_ptr<const qjit::GgufFile> file = qjit::GgufFile::open(options.model);
    report.weights = llama::load_gguf_llama(file);
    report.architecture = file->get_string("general.architecture");  // load_gguf_llama checked it
    const llama::Config& c = report.weights->config;
    const GgufVocabulary vocabulary(*file);
    const TokenSequences sequences = options.text_file.empty()
                                         ? read_sequences(options.tokens, options.max_sequences, c, "--tokens")
                                         : text_sequences(options.text_file, options.max_sequences, vocabulary, c,
                                                          "--text-file");
    const TokenSequences calibration =
        options.calibration_text.empty()
            ? read_sequences(options.calibration_tokens, options.calibration_sequences, c, "--calibration-tokens")
            : text_sequences(options.calibration_text, options.calibration_sequences, vocabulary, c,
                             "--calibration-text");
    const bool text_mode = options.text.has_prompt() || options.text.chat;
    const std::vector<int> prompt =
        options.generate > 0 && !text_mode ? read_prompt(options, vocabulary, c) : std::vector<int>{};

    // FFNs served from a neuron file need no linears of their own, unless the model runs densely
    // first: to fit predictors, or to quantize its later layers on its own activations.
    const bool ffn_linears = options.flash.path.empty() || options.flash.target_recall > 0 ||
                             options.method.calibrated() || !options.pack.empty();
    const llama::MethodModel built = options.pack.empty()
                                         ? llama::build_method_model(report.weights, options.method,
                                                                     options.context.context_options(), &calibration,
                                                                     options.fp32_classifier, ffn_linears)
                                         : llama::build_packed_model(report.weights, options.pack, options.model,
                                                                     options.context.context_options(),
                                                                     options.fp32_classifier);
    llama::Model& model = *built.model;
    report.load_seconds = seconds_since(load_start);
    report.ffn_linears = ffn_linears;
    report.linears = built.maker_name;
    report.calibration_rows = built.calibration_rows;
    report.quantization_seconds = built.quantization_seconds;
    report.calibration_seconds = built.calibration_seconds;
    report.choice = built.choice;
    report.pack = built.pack;
    report.storage = llama::qjit_storage(model);
    if (report.storage.weights == 0) {  // no qjit layer: every matrix dense fp32
        report.storage.weights = model.linear_weight_count();
        report.storage.stored_bytes = model.linear_stored_bytes();
    }

    model.set_ffn_threshold(options.ffn_threshold);
    model.set_kv_type(options.kv_cache);
    std::unique_ptr<qjit_context, qjit_status (*)(qjit_context*)> flash_context(nullptr, qjit_context_destroy);
    std::unique_ptr<llama::FlashFfnRunner> flash;
    if (!options.flash.path.empty()) {
        const qjit_context_options context_options = options.context.context_options();
        qjit_context* context = nullptr;
        if (qjit_context_create(&context_options, &context) != QJIT_OK)
            fail("creating a context: ", qjit_last_error());
        flash_context.reset(context);
        flash = std::make_unique<llama::FlashFfnRunner>(context, c, options.flash);
        if (options.flash.target_recall > 0) {
            const auto start = std::chrono::steady_clock::now();
            flash->fit_predictors(model, calibration);
            report.flash_fit_seconds = seconds_since(start);
        }
        flash->reset_counters();
        model.set_ffn_override(flash.get());
    }

    if (!sequences.empty()) {
        const auto start = std::chrono::steady_clock::now();
        report.nll = llama::evaluate_nll(model, sequences, options.token_by_token);
        report.eval_seconds = seconds_since(start);
    }
    if (options.text.chat) return run_chat(model, *file, vocabulary, options.text, options.generate);
    if (options.text.has_prompt()) report.decoding = generate_text(model, vocabulary, options);
    else if (options.generate > 0) report.decoding = decode(model, prompt, options.generate, vocabulary, options.profile);
    if (options.prompt_bench > 0) {
        if (options.prompt_bench > c.seq_len)
            throw std::runtime_error("--prompt-bench " + std::to_string(options.prompt_bench) +
                                     " exceeds the model's context of " + std::to_string(c.seq_len));
        report.prompt_bench_seconds =
            llama::time_prompts(model, bench_prompt(options.prompt_bench, c.vocab_size), options.bench_repeats);
    }
    report.peak_resident_bytes = peak_resident_bytes();
    report.sparsity = model.ffn_sparsity();
    if (flash) {
        report.flash = flash->counters();
        report.flash_info = flash->info();
        if (report.flash->reads > 0)
            report.flash_curve_gbps = flash->curve_gbps(int64_t(flash_mean_read_bytes(*report.flash)));
    }
    if (options.json) print_json(options, report);
    else print_text(options, report, options.text.has_prompt() ? stderr : stdout);
    return 0;
}

}  // namespace

int run_gguf_program(int argc, char** argv) {
    const std::optional<Options> options = parse_args(argc, argv);
    if (!options) return 2;
    if (options->help) return 0;
    try {
        return run(*options);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "qjit-run: %s\n", e.what());
        return 1;
    }
}

}  // namespace qjit_models
