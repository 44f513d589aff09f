// qjit-tune: tunes qjit's kernels for LLM layer shapes on this machine, stores the choices in the
// tuning database, and prints how fast they run.
//
// With no arguments it tunes the embedded default: the Llama-2-7B linear layers at 4-bit, group
// 128, batch 1 and 16. --model configs/models/NAME.yaml tunes another model's layers (random
// weights: speed does not depend on their values), and with --tp N the shards one of N
// tensor-parallel ranks holds (tools/model_config.hpp says which layers split which way);
// --checkpoint DIR tunes every distinct format and shape of a GPTQ checkpoint, with its own layers.
// Shapes the database already holds for this machine are not timed again (--retune times them anyway).
// --list, --export and --import work on the database and tune nothing. --json FILE also writes the
// run's settings and rows as JSON (what qjit.tune in Python reads).
//
// Every layer is timed cold (weights flushed from the caches before each call, as when decoding a
// model larger than the caches), next to a memory-bandwidth probe of the same thread count, and
// against the untuned default (the performance model's first pick) and the portable path.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qjit/qjit.h"
#include "tools/bandwidth_probe.hpp"
#include "tools/int8_peak_probe.hpp"
#include "tools/random_gptq.hpp"
#include "tools/model_config.hpp"

namespace {

using qjit_tools::LinearShape;
using Json = nlohmann::ordered_json;  // keeps the keys in the order written

// The embedded default, Llama-2-7B (as configs/models/llama-2-7b.yaml): hidden 4096, MLP 11008.
const qjit_tools::ModelConfig kLlama2_7b = {"llama-2-7b",
                                      32,
                                      {{"q_proj", 4096, 4096},
                                       {"k_proj", 4096, 4096},
                                       {"v_proj", 4096, 4096},
                                       {"o_proj", 4096, 4096},
                                       {"gate_proj", 4096, 11008},
                                       {"up_proj", 4096, 11008},
                                       {"down_proj", 11008, 4096}}};

struct Options {
    std::string model;  // empty: the embedded Llama-2-7B
    std::string checkpoint;  // a GPTQ checkpoint directory: tune its layers instead of a model's
    int tp = 1;              // tensor-parallel world size: tune one rank's shards
    int bits = 4;
    int group = 128;
    bool symmetric = false;
    std::vector<int64_t> batches = {1, 16};
    int threads = 0;
    double budget_ms = -1;  // the library's default
    bool exhaustive = false;
    bool retune = false;
    bool compare = true;
    int repeats = 15;
    std::string activations = "auto";
    std::string db;  // empty: the library's default path
    bool list = false;
    std::string export_path, import_path;
    std::string json_path;  // non-empty: also write the run as JSON here
    int cuda_device = -1;       // >= 0: also tune the CUDA kernels of that device
    std::string cuda_dtype = "f16";
};

// printf into a string.
template <typename... Args>
std::string printed(const char* format, Args... args) {
    std::string text(size_t(std::snprintf(nullptr, 0, format, args...)), '\0');
    std::snprintf(text.data(), text.size() + 1, format, args...);
    return text;
}

// Every failure is reported as "qjit-tune: WHAT failed: STATUS: MESSAGE" (qjit.tune maps STATUS to
// its exception class).
void report_failure(const std::string& what, qjit_status status, const char* message) {
    std::fprintf(stderr, "qjit-tune: %s failed: %s: %s\n", what.c_str(), qjit_status_string(status), message);
}

[[noreturn]] void die(const char* what, qjit_status status) {
    report_failure(what, status, qjit_last_error());
    std::exit(1);
}

void check(qjit_status status, const char* what) {
    if (status != QJIT_OK) die(what, status);
}

qjit_context* make_context(const Options& o, int64_t batch, double budget_ms, qjit_tuning_mode mode, qjit_isa max_isa,
                           bool use_db) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = o.threads;
    options.max_isa = max_isa;
    options.activations = o.activations == "f32"    ? QJIT_ACTIVATIONS_F32
                          : o.activations == "int8" ? QJIT_ACTIVATIONS_INT8
                                                    : QJIT_ACTIVATIONS_AUTO;
    options.tuning_db_path = !use_db ? "" : o.db.empty() ? nullptr : o.db.c_str();
    options.tuning_budget_ms = budget_ms;
    options.tuning_mode = mode;
    options.tuning_batch = batch;
    if (use_db) {  // the tuned contexts: CUDA layers are tuned at creation too
        options.cuda_device = o.cuda_device;
        options.cuda_dtype = o.cuda_dtype == "bf16" ? QJIT_DTYPE_BF16 : QJIT_DTYPE_F16;
    }
    qjit_context* context = nullptr;
    check(qjit_context_create(&options, &context), "qjit_context_create");
    return context;
}

// The database operations: --import, then --export, then --list.
int manage_database(const Options& o) {
    qjit_context* context = make_context(o, 1, 0, QJIT_TUNING_DEFAULT, QJIT_ISA_AUTO, true);
    if (!o.import_path.empty()) {
        check(qjit_tuning_db_import(context, o.import_path.c_str()), "qjit_tuning_db_import");
        std::printf("imported %s\n", o.import_path.c_str());
    }
    if (!o.export_path.empty()) {
        check(qjit_tuning_db_export(context, o.export_path.c_str()), "qjit_tuning_db_export");
        std::printf("exported to %s\n", o.export_path.c_str());
    }
    if (o.list) {
        const char* text = nullptr;
        check(qjit_tuning_db_list(context, &text), "qjit_tuning_db_list");
        std::printf("%s", *text ? text : "(no records)\n");
    }
    qjit_context_destroy(context);
    return 0;
}

// One distinct layer to tune and how to make it in a context.
struct Target {
    std::string name;  // e.g. "q_proj,k_proj" or "model.layers.0.mlp.up_proj (+31)"
    LinearShape shape;
    std::function<qjit_linear*(qjit_context*)> create;
};

struct Row {
    std::string layer;
    LinearShape shape;
    int64_t batch = 1;
    qjit_tiling_source source = QJIT_TILING_PORTABLE;
    std::string kernel, tiling;
    double tuning_ms = 0, us = 0, gbps = 0, default_us = 0, portable_us = 0;
    qjit_tiling_source cuda_source = QJIT_TILING_MODEL;  // with --cuda-device
    std::string cuda_tiling;
    double cuda_tuning_ms = 0, cuda_us = 0, cuda_gbps = 0;
};

double time_layer(qjit_linear* layer, int64_t batch, int repeats) {
    double us = 0;
    check(qjit_linear_benchmark(layer, batch, repeats, /*cold=*/1, &us), "qjit_linear_benchmark");
    return us;
}

// The model's distinct shapes, each a random GPTQ layer of the asked width and group.
std::vector<Target> model_targets(const qjit_tools::ModelConfig& model, const Options& o,
                                  std::vector<qjit_tools::GptqTensors>* storage) {
    const std::vector<LinearShape> shapes = qjit_tools::distinct_shapes(model.linear);
    storage->resize(shapes.size());
    std::vector<Target> targets;
    for (size_t i = 0; i < shapes.size(); ++i) {
        const LinearShape shape = shapes[i];
        qjit_tools::GptqTensors* tensors = &(*storage)[i];
        qjit_tools::random_gptq(shape.k, shape.n, o.bits, o.group, uint64_t(shape.k * 31 + shape.n), tensors, o.symmetric);
        targets.push_back({shape.name, shape, [shape, tensors](qjit_context* context) {
                               qjit_linear* layer = nullptr;
                               check(qjit_linear_create_from_gptq(context, shape.k, shape.n, &tensors->view, &layer),
                                     "qjit_linear_create_from_gptq");
                               return layer;
                           }});
    }
    return targets;
}

// A checkpoint opened once per context that creates its layers (a checkpoint belongs to a context).
class CheckpointLayers {
public:
    explicit CheckpointLayers(std::string directory) : directory_(std::move(directory)) {}
    CheckpointLayers(const CheckpointLayers&) = delete;
    CheckpointLayers& operator=(const CheckpointLayers&) = delete;
    ~CheckpointLayers() { close(); }
    void close() {
        for (auto& [context, checkpoint] : opened_) qjit_checkpoint_close(checkpoint);
        opened_.clear();
    }
    qjit_checkpoint* in(qjit_context* context) {
        qjit_checkpoint*& checkpoint = opened_[context];
        if (checkpoint == nullptr) check(qjit_checkpoint_open(context, directory_.c_str(), &checkpoint), "qjit_checkpoint_open");
        return checkpoint;
    }

private:
    std::string directory_;
    std::map<qjit_context*, qjit_checkpoint*> opened_;
};

// The checkpoint's distinct (format, K, N), each made from the first layer that has it.
std::vector<Target> checkpoint_targets(CheckpointLayers* checkpoint, qjit_context* context, std::string* summary) {
    qjit_checkpoint* opened = checkpoint->in(context);
    int64_t count = 0;
    check(qjit_checkpoint_num_layers(opened, &count), "qjit_checkpoint_num_layers");
    struct Distinct {
        std::string format, first_layer;
        int64_t k, n;
        int others;  // later layers of the same format and shape
    };
    std::vector<Distinct> distinct;
    int64_t bytes = 0;
    for (int64_t i = 0; i < count; ++i) {
        qjit_checkpoint_layer info;
        check(qjit_checkpoint_get_layer(opened, i, &info), "qjit_checkpoint_get_layer");
        bytes += info.checkpoint_bytes;
        if (i == 0)
            *summary = printed("%lld layers, %d-bit, group %d, %s", (long long)count, info.bits, info.group_size,
                               info.checkpoint_format == QJIT_GPTQ_V1 ? "gptq (v1)" : "gptq_v2");
        const auto seen = std::find_if(distinct.begin(), distinct.end(), [&](const Distinct& d) {
            return d.format == info.format && d.k == info.k && d.n == info.n;
        });
        if (seen != distinct.end())
            ++seen->others;
        else
            distinct.push_back({info.format, info.name, info.k, info.n, 0});
    }
    std::vector<Target> targets;
    for (const Distinct& d : distinct) {
        const std::string name = d.first_layer;
        targets.push_back({d.others > 0 ? name + " (+" + std::to_string(d.others) + ")" : name,
                           LinearShape{name, d.k, d.n}, [checkpoint, name](qjit_context* c) {
                               qjit_linear* layer = nullptr;
                               check(qjit_checkpoint_create_layer(checkpoint->in(c), name.c_str(), &layer),
                                     "qjit_checkpoint_create_layer");
                               return layer;
                           }});
    }
    *summary += printed(", %.2f GB, %zu distinct format and shape", double(bytes) * 1e-9, targets.size());
    return targets;
}

void show_progress(size_t done, size_t total, const std::string& what) {
    constexpr int kWidth = 30;
    const int filled = int(done * kWidth / total);
    std::printf("\r[%s%s] %zu/%zu %-40s", std::string(size_t(filled), '#').c_str(),
                std::string(size_t(kWidth - filled), '.').c_str(), done, total, what.c_str());
    std::fflush(stdout);
}

const char* source_word(qjit_tiling_source source) {
    switch (source) {
        case QJIT_TILING_DATABASE: return "hit";
        case QJIT_TILING_SEARCHED: return "tuned";
        case QJIT_TILING_CONTEXT: return "same";
        case QJIT_TILING_MODEL: return "model";
        case QJIT_TILING_FORCED: return "forced";
        default: return "portable";
    }
}

// The run as a JSON document: its settings and one object per row, in the table's words.
Json run_json(const Options& o, const char* machine, int threads, const std::string& what, double probe_gbps,
              const std::vector<Row>& rows) {
    Json json_rows = Json::array();
    for (const Row& r : rows) {
        Json row = {{"layer", r.layer},
                    {"k", r.shape.k},
                    {"n", r.shape.n},
                    {"batch", r.batch},
                    {"source", source_word(r.source)},
                    {"kernel", r.kernel},
                    {"tiling", r.tiling},
                    {"tuning_ms", r.tuning_ms},
                    {"us", r.us},
                    {"gbps", r.gbps},
                    {"x_probe", r.gbps / probe_gbps},
                    {"default_us", o.compare ? Json(r.default_us) : Json()},  // null: --no-compare
                    {"portable_us", o.compare ? Json(r.portable_us) : Json()}};
        if (o.cuda_device >= 0) {
            row["cuda_source"] = source_word(r.cuda_source);
            row["cuda_tiling"] = r.cuda_tiling;
            row["cuda_tuning_ms"] = r.cuda_tuning_ms;
            row["cuda_us"] = r.cuda_us;
            row["cuda_gbps"] = r.cuda_gbps;
        }
        json_rows.push_back(std::move(row));
    }
    return {{"qjit_version", qjit_version()}, {"machine", machine},      {"threads", threads},
            {"what", what},                   {"probe_gbps", probe_gbps}, {"repeats", o.repeats},
            {"rows", std::move(json_rows)}};
}

// Writes PATH.tmp-PID beside PATH and renames it over PATH, so a reader sees the old file or the
// whole new one. Reports a failure and returns false.
bool write_atomically(const std::string& path, const std::string& text) {
    const auto last_errno = [] { return errno != 0 ? errno : EIO; };
    const std::string temporary = path + ".tmp-" + std::to_string(getpid());
    int failure = 0;
    if (std::FILE* file = std::fopen(temporary.c_str(), "wb")) {
        if (std::fwrite(text.data(), 1, text.size(), file) != text.size() || std::fflush(file) != 0 ||
            fsync(fileno(file)) != 0)
            failure = last_errno();
        if (std::fclose(file) != 0 && failure == 0) failure = last_errno();
        if (failure == 0 && std::rename(temporary.c_str(), path.c_str()) != 0) failure = last_errno();
        if (failure != 0) std::remove(temporary.c_str());
    } else {
        failure = last_errno();
    }
    if (failure == 0) return true;
    report_failure("writing " + path, QJIT_ERROR_IO, std::strerror(failure));
    return false;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"qjit-tune: tune qjit kernels for LLM layer shapes on this machine and store the choices "
                 "(default: Llama-2-7B, 4-bit, group 128, batch 1 and 16)"};
    CLI::Option* model = app.add_option("--model", o.model, "model config, e.g. configs/models/llama-2-70b.yaml")
                             ->check(CLI::ExistingFile);
    CLI::Option* bits = app.add_option("--bits", o.bits, "weight bits: 2, 3, 4 or 8")->check(CLI::IsMember({2, 3, 4, 8}));
    CLI::Option* group = app.add_option("--group", o.group, "group size: 16, 32, 64, 128, 256 or -1 (per column)")
                             ->check(CLI::IsMember({16, 32, 64, 128, 256, -1}));
    CLI::Option* symmetric = app.add_flag("--symmetric", o.symmetric, "symmetric quantization (zero point 2^(bits-1))");
    CLI::Option* tp = app.add_option("--tp", o.tp,
                                     "tensor-parallel world size: tune one rank's shards (column-parallel layers "
                                     "N / tp, row-parallel K / tp)")
                          ->check(CLI::Range(1, 4096));
    app.add_option("--checkpoint", o.checkpoint,
                   "GPTQ checkpoint directory: tune each distinct format and shape of its layers "
                   "(width, group and symmetry come from it)")
        ->check(CLI::ExistingDirectory)
        ->excludes(model, bits, group, symmetric, tp);
    app.add_option("--batch", o.batches, "activation rows per forward to tune for (one or more)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    app.add_option("--threads", o.threads, "threads (0: all cores)")->check(CLI::NonNegativeNumber);
    app.add_option("--budget", o.budget_ms, "milliseconds of timing per shape (default 300; 0: the model's pick)")
        ->check(CLI::NonNegativeNumber);
    app.add_flag("--exhaustive", o.exhaustive, "time every tiling the registers allow (no pruning, no budget)");
    app.add_flag("--retune", o.retune, "tune shapes the database already holds");
    app.add_flag("!--no-compare", o.compare, "skip timing the untuned default and the portable path");
    app.add_option("--repeats", o.repeats, "cold calls per timing in the table (the median is shown)")
        ->check(CLI::Range(1, 100000));
    app.add_option("--activations", o.activations, "activation path: auto, f32 (exact) or int8")
        ->check(CLI::IsMember({"auto", "f32", "int8"}));
    app.add_option("--db", o.db, "tuning database (default: $QJIT_TUNING_DB, else $XDG_CACHE_HOME/qjit/tuning.yaml)");
    app.add_option("--cuda-device", o.cuda_device, "also tune the CUDA kernels of this device (ordinal)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--cuda-dtype", o.cuda_dtype, "CUDA activation type: f16 or bf16")->check(CLI::IsMember({"f16", "bf16"}));
    CLI::Option* list = app.add_flag("--list", o.list, "print the database and exit");
    CLI::Option* export_db = app.add_option("--export", o.export_path, "write the database to this file and exit");
    CLI::Option* import_db =
        app.add_option("--import", o.import_path, "merge this database file into the database and exit")
            ->check(CLI::ExistingFile);
    app.add_option("--json", o.json_path, "also write the run's settings and rows as JSON to this file")
        ->excludes(list, export_db, import_db);
    CLI11_PARSE(app, argc, argv);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // through a pipe too, each line as it is printed (qjit.tune streams it)
    if (o.list || !o.export_path.empty() || !o.import_path.empty()) return manage_database(o);

    qjit_tools::ModelConfig model_config = kLlama2_7b;
    try {
        if (!o.model.empty()) model_config = qjit_tools::load_model_config(o.model);
        model_config.linear = qjit_tools::tensor_parallel_shards(model_config.linear, o.tp, o.group);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "qjit-tune: %s\n", e.what());
        return 1;
    }
    const qjit_tuning_mode mode = o.exhaustive ? QJIT_TUNING_EXHAUSTIVE : o.retune ? QJIT_TUNING_RETUNE : QJIT_TUNING_DEFAULT;
    qjit_context* portable = make_context(o, 1, 0, QJIT_TUNING_DEFAULT, QJIT_ISA_PORTABLE, false);
    int threads = 0;
    check(qjit_context_num_threads(portable, &threads), "qjit_context_num_threads");
    const char* machine = nullptr;
    std::vector<qjit_context*> tuned, untuned;
    for (int64_t batch : o.batches) {
        tuned.push_back(make_context(o, batch, o.budget_ms, mode, QJIT_ISA_AUTO, true));
        untuned.push_back(make_context(o, batch, 0, QJIT_TUNING_DEFAULT, QJIT_ISA_AUTO, false));
    }
    check(qjit_context_describe(tuned.front(), &machine), "qjit_context_describe");
    std::printf("qjit %s: %s\n", qjit_version(), machine);

    std::vector<qjit_tools::GptqTensors> random_layers;
    CheckpointLayers checkpoint(o.checkpoint);
    std::string what;
    std::vector<Target> targets;
    if (o.checkpoint.empty()) {
        targets = model_targets(model_config, o, &random_layers);
        what = printed("%s layers%s, %d-bit, group %d, %s", model_config.name.c_str(),
                       o.tp > 1 ? printed(" as one rank's shards at tensor-parallel size %d", o.tp).c_str() : "",
                       o.bits, o.group, o.symmetric ? "symmetric" : "asymmetric");
    } else {
        targets = checkpoint_targets(&checkpoint, tuned.front(), &what);
        what = "checkpoint " + o.checkpoint + ": " + what;
    }

    std::printf("%s; %d threads; %s; median of %d cold calls\n", what.c_str(), threads,
                o.exhaustive ? "exhaustive search" : o.retune ? "retuning every shape" : "database hits reused", o.repeats);
    // The machine's peaks, on one thread and on the layers' thread count; "x probe" is against the
    // latter, measured again after the rows are timed (a shared machine's bandwidth drifts): the
    // higher of the two is the floor. The probe's 1 GiB buffer is freed before any layer is made.
    double probe_gbps = [&] {
        qjit_tools::BandwidthProbe probe;
        const double all = probe.peak(threads);
        std::printf("memory read probe (%s loads, best of %d sweeps): %.1f GB/s on 1 thread, %.1f GB/s on %d\n",
                    probe.load_width(), qjit_tools::BandwidthProbe::kPeakSweeps, threads > 1 ? probe.peak(1) : all, all,
                    threads);
        return all;
    }();
    if (qjit_tools::Int8PeakProbe::available()) {
        qjit_tools::Int8PeakProbe int8_peak;
        const double all = int8_peak.peak(threads);
        std::printf("int8 dot-product peak (%s, best of %d runs): %.3f T MAC/s on 1 thread, %.3f T MAC/s on %d\n",
                    int8_peak.instruction(), qjit_tools::Int8PeakProbe::kPeakRuns,
                    (threads > 1 ? int8_peak.peak(1) : all) * 1e-12, all * 1e-12, threads);
    }

    const bool tty = isatty(STDOUT_FILENO);
    std::vector<Row> rows;
    const size_t total = targets.size() * o.batches.size();
    for (const Target& target : targets) {
        const LinearShape& shape = target.shape;
        qjit_linear* slow = o.compare ? target.create(portable) : nullptr;
        for (size_t b = 0; b < o.batches.size(); ++b) {
            Row row{target.name, shape, o.batches[b]};
            if (tty) show_progress(rows.size(), total, row.layer + " m=" + std::to_string(row.batch));
            qjit_linear* layer = target.create(tuned[b]);
            qjit_linear_tuning tuning;
            qjit_linear_info info;
            check(qjit_linear_get_tuning(layer, &tuning), "qjit_linear_get_tuning");
            check(qjit_linear_get_info(layer, &info), "qjit_linear_get_info");
            if (*tuning.warning) std::fprintf(stderr, "\nqjit-tune: warning: %s\n", tuning.warning);
            row.source = tuning.source;
            row.kernel = std::string(tuning.kernel_key).substr(0, std::string(tuning.kernel_key).find(' '));
            row.tiling = tuning.tiling;
            row.tuning_ms = tuning.tuning_ms;
            row.us = time_layer(layer, row.batch, o.repeats);
            row.gbps = double(info.weight_bytes) / row.us * 1e-3;
            if (o.cuda_device >= 0) {
                const qjit_dtype dtype = o.cuda_dtype == "bf16" ? QJIT_DTYPE_BF16 : QJIT_DTYPE_F16;
                check(qjit_linear_get_tuning_cuda(layer, row.batch, dtype, &tuning), "qjit_linear_get_tuning_cuda");
                row.cuda_source = tuning.source;
                row.cuda_tiling = tuning.tiling;
                row.cuda_tuning_ms = tuning.tuning_ms;
                check(qjit_linear_benchmark_cuda(layer, row.batch, dtype, o.repeats, &row.cuda_us),
                      "qjit_linear_benchmark_cuda");
                row.cuda_gbps = double(info.weight_bytes) / row.cuda_us * 1e-3;  // CPU packing size: close to the device's
            }
            qjit_linear_destroy(layer);
            if (o.compare) {
                qjit_linear* plain = target.create(untuned[b]);
                row.default_us = time_layer(plain, row.batch, o.repeats);
                qjit_linear_destroy(plain);
                row.portable_us = time_layer(slow, row.batch, std::max(3, o.repeats / 3));
            }
            rows.push_back(row);
        }
        qjit_linear_destroy(slow);
    }
    if (tty) std::printf("\r%-80s\r", "");
    const double probe_after = qjit_tools::BandwidthProbe().peak(threads);
    probe_gbps = std::max(probe_gbps, probe_after);
    std::printf("memory read probe after timing: %.1f GB/s on %d threads; x probe is against %.1f GB/s\n", probe_after,
                threads, probe_gbps);

    std::printf("\n| layer | K x N | m | tiling from | kernel | tiling | tuning ms | us | GB/s | x probe | vs default | vs portable |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows) {
        std::printf("| %s | %lldx%lld | %lld | %s | %s | %s | %.0f | %.1f | %.2f | %.2f |", r.layer.c_str(),
                    (long long)r.shape.k, (long long)r.shape.n, (long long)r.batch, source_word(r.source),
                    r.kernel.c_str(), r.tiling.c_str(), r.tuning_ms, r.us, r.gbps, r.gbps / probe_gbps);
        if (o.compare) std::printf(" %.2fx | %.1fx |\n", r.default_us / r.us, r.portable_us / r.us);
        else std::printf(" - | - |\n");
    }
    if (std::any_of(rows.begin(), rows.end(), [&](const Row& r) { return r.gbps > probe_gbps; }))
        std::printf("\nA layer read faster than the probe (x probe above 1): its weights stayed partly in a cache, or\n"
                    "the machine's memory bandwidth varied more than the two probes saw; those ratios are not reliable.\n");
    if (o.cuda_device >= 0) {
        std::printf("\nCUDA device %d (%s activations), L2 flushed before each call:\n\n", o.cuda_device,
                    o.cuda_dtype.c_str());
        std::printf("| layer | K x N | m | tiling from | tiling | tuning ms | us | weight GB/s |\n|---|---|---|---|---|---|---|---|\n");
        for (const Row& r : rows)
            std::printf("| %s | %lldx%lld | %lld | %s | %s | %.0f | %.2f | %.0f |\n", r.layer.c_str(),
                        (long long)r.shape.k, (long long)r.shape.n, (long long)r.batch, source_word(r.cuda_source),
                        r.cuda_tiling.c_str(), r.cuda_tuning_ms, r.cuda_us, r.cuda_gbps);
    }
    const bool json_written =
        o.json_path.empty() ||
        write_atomically(o.json_path, run_json(o, machine, threads, what, probe_gbps, rows).dump(2) + "\n");
    checkpoint.close();  // before the contexts it was opened in
    for (qjit_context* c : tuned) qjit_context_destroy(c);
    for (qjit_context* c : untuned) qjit_context_destroy(c);
    qjit_context_destroy(portable);
    return json_written ? 0 : 1;
}
