// The command-line options the model runners share (stories_runner, qjit-run): the qjit context
// (--threads, --activations, --isa) and how the linear layers are made (--method and the
// quantization options of each method). Each runner reads its argv with one ArgumentReader, offers
// each option to these parsers and keeps the options that are its own.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "qjit/qjit.h"

namespace qjit_models {

// Reads argv one option at a time. A missing or malformed value prints a message naming the option
// on stderr.
class ArgumentReader {
public:
    ArgumentReader(int argc, char** argv) : argc_(argc), argv_(argv) {}

    bool next();  // moves to the next option; false when none is left
    const std::string& option() const { return option_; }
    const char* value();                                // nullptr when missing
    std::optional<int> int_value(int min, int max);     // an integer in [min, max]
    std::optional<double> number_value(double max);     // a number in [0, max]
    std::optional<double> real_value();                 // any number (the caller checks its range)

private:
    int argc_;
    char** argv_;
    int at_ = 0;
    std::string option_;
};

// What a parser made of the current option.
enum class OptionParse { taken, not_mine, failed };

struct ContextOptions {
    int threads = 0;  // 0: qjit's default (one per core)
    qjit_activations activations = QJIT_ACTIVATIONS_AUTO;
    qjit_isa max_isa = QJIT_ISA_AUTO;

    qjit_context_options context_options() const;  // the rest at qjit's defaults
};
OptionParse parse_context_option(ArgumentReader& args, ContextOptions& options);
const char* isa_name(qjit_isa isa);  // "auto", "avx2", ...
qjit_isa parse_isa(const std::string& name);  // isa_name's inverse; throws std::invalid_argument
// The usage lines of these options, one per option, each ending in a newline.
extern const char* const kContextOptionsUsage;

struct MethodOptions {
    std::string method;  // empty: none given
    int bits = 3;
    int group_size = 64;
    qjit_dtype scale_dtype = QJIT_DTYPE_F16;
    int rank = 0;              // MiLo: every matrix's rank, unless a policy shares avg_rank
    std::string rank_policy;   // "uniform", "dense-r", "sparse-r", "kurtosis-r", "frequency-r"
    double avg_rank = 0;
    int low_rank_bits = 8;
    double rank_budget = 0;    // MiLo: > 0: each matrix's rank the largest within this fraction of its base's bytes
    std::string milo_base = "hqq";  // MiLo: the quantizer under the compensator: hqq, rtn or gptq
    // rtn, hqq, milo: a real offset per group (true), integer zero points (false), or the method's
    // measured choice (unset: QJIT_FLOAT_OFFSETS_BY_METHOD)
    std::optional<bool> float_offsets;
    // gptq and mixed
    bool act_order = false;
    double damp = 0.01;
    bool no_calibration = false;  // mixed: rank groups by their range, round to nearest
    double alpha = 0.25;          // mixed: fraction of K-groups in 4 bits
    double bits_per_weight = 0;   // mixed: > 0: each matrix's 4-bit groups within this budget, in place of alpha
    bool share_budget = false;    // mixed: the budget shared among the matrices by their gains (share_mixed_budget)
    bool share_budget_by_loss = false;  // ... by their measured effect on the loss (share_mixed_budget_by_loss)
    double outlier_fraction = 0.002;
    bool second_order_scales = true;
    bool with_calibration = false;  // calibration tokens given: hqq and milo use them too

    // Whether the method cannot run without calibration sequences, takes them, runs with them.
    bool needs_calibration() const {
        return method == "gptq" || (method == "mixed" && !no_calibration) || (method == "milo" && milo_base == "gptq");
    }
    bool takes_calibration() const { return needs_calibration() || method == "hqq" || method == "milo"; }
    bool calibrated() const { return needs_calibration() || (with_calibration && takes_calibration()); }
    // The qjit config of a quantizing method (rtn when the method is not one of qjit's).
    qjit_quant_config quant_config() const;
};
OptionParse parse_method_option(ArgumentReader& args, MethodOptions& options);
// After parsing: whether the method is one of `methods` (when given) and the options go together;
// false after printing the problem on stderr.
bool check_method_options(const MethodOptions& options, std::span<const char* const> methods);
// "a, b or c"
std::string list_of(std::span<const char* const> names);
// The usage lines of the quantization options (--method's own line is each runner's).
extern const char* const kMethodOptionsUsage;

qjit_rank_policy parse_rank_policy(const std::string& name);  // throws std::runtime_error on a bad name

}  // namespace qjit_models
