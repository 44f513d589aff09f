#include "models/tune_driver.hpp"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model_config.hpp"
#include "models/runner_options.hpp"
#include "tools/bandwidth_probe.hpp"
#include "tools/peak_probe.hpp"
#include "tools/random_gptq.hpp"

namespace qjit_models {

namespace {

using Json = nlohmann::ordered_json;  // keeps the keys in the order written

struct Options {
    std::string model;       // empty: Llama-2-7B
    std::string checkpoint;  // a GPTQ checkpoint directory: tune its layers instead of a model's
    std::string gguf;        // a Llama GGUF file: likewise
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
    std::string isa = "auto";  // the cap on the instruction set, as qjit-run --isa
    std::string db;  // empty: the library's default path
    bool list = false;
    std::string export_path, import_path;
    std::string json_path;  // non-empty: also write the run as JSON here
    int cuda_device = -1;   // >= 0: also tune the CUDA kernels of that device
    std::string cuda_dtype = "f16";
};

// A failure: the run stops, its contexts and layers are released, and the outcome names it.
struct Failure {
    std::string what;
    qjit_status status;
    std::string message;
};

// printf into a string.
template <typename... Args>
std::string printed(const char* format, Args... args) {
    std::string text(size_t(std::snprintf(nullptr, 0, format, args...)), '\0');
    std::snprintf(text.data(), text.size() + 1, format, args...);
    return text;
}

void check(qjit_status status, const char* what) {
    if (status != QJIT_OK) throw Failure{what, status, qjit_last_error()};
}

struct ContextDeleter {
    void operator()(qjit_context* context) const { qjit_context_destroy(context); }
};
struct LayerDeleter {
    void operator()(qjit_linear* layer) const { qjit_linear_destroy(layer); }
};
using ContextPtr = std::unique_ptr<qjit_context, ContextDeleter>;
using LayerPtr = std::unique_ptr<qjit_linear, LayerDeleter>;

ContextPtr make_context(const Options& o, int64_t batch, double budget_ms, qjit_tuning_mode mode, qjit_isa max_isa,
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
    return ContextPtr(context);
}

// The database operations: --import, then --export, then --list.
void manage_database(const Options& o, const TuneIo& io) {
    const ContextPtr context = make_context(o, 1, 0, QJIT_TUNING_DEFAULT, QJIT_ISA_AUTO, true);
    if (!o.import_path.empty()) {
        check(qjit_tuning_db_import(context.get(), o.import_path.c_str()), "qjit_tuning_db_import");
        io.out("imported " + o.import_path + "\n");
    }
    if (!o.export_path.empty()) {
        check(qjit_tuning_db_export(context.get(), o.export_path.c_str()), "qjit_tuning_db_export");
        io.out("exported to " + o.export_path + "\n");
    }
    if (o.list) {
        const char* text = nullptr;
        check(qjit_tuning_db_list(context.get(), &text), "qjit_tuning_db_list");
        io.out(*text ? text : "(no records)\n");
    }
}

// One distinct layer to tune and how to make it in a context.
struct Target {
    std::string name;  // e.g. "q_proj,k_proj" or "model.layers.0.mlp.up_proj (+31)"
    LinearShape shape;
    std::function<LayerPtr(qjit_context*)> create;
};

// The run's layers, what keeps their weights alive, and the line that says what they are.
struct Targets {
    std::vector<Target> list;
    std::string what;
    std::vector<qjit_tools::GptqTensors> random_layers;
    GgmlLinears gguf;
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

// "NAME (+N)": a layer and how many later ones share its format and shape.
std::string with_others(const std::string& name, int others) {
    return others > 0 ? name + " (+" + std::to_string(others) + ")" : name;
}

// The model's distinct shapes, each a random GPTQ layer of the asked width and group.
void add_model_targets(const ModelConfig& model, const Options& o, Targets* targets) {
    const std::vector<LinearShape> shapes = distinct_shapes(model.linear);
    targets->random_layers.resize(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
        const LinearShape shape = shapes[i];
        qjit_tools::GptqTensors* tensors = &targets->random_layers[i];
        qjit_tools::random_gptq(shape.k, shape.n, o.bits, o.group, uint64_t(shape.k * 31 + shape.n), tensors,
                                o.symmetric);
        targets->list.push_back({shape.name, shape, [shape, tensors](qjit_context* context) {
                                     qjit_linear* layer = nullptr;
                                     check(qjit_linear_create_from_gptq(context, shape.k, shape.n, &tensors->view, &layer),
                                           "qjit_linear_create_from_gptq");
                                     return LayerPtr(layer);
                                 }});
    }
    targets->what = printed("%s layers%s, %d-bit, group %d, %s", model.name.c_str(),
                            o.tp > 1 ? printed(" as one rank's shards at tensor-parallel size %d", o.tp).c_str() : "",
                            o.bits, o.group, o.symmetric ? "symmetric" : "asymmetric");
}

// The layers of --model (default Llama-2-7B), as --tp shards them.
void add_config_targets(const Options& o, Targets* targets) {
    ModelConfig model;
    try {
        model = o.model.empty() ? llama2_7b_config() : load_model_config(o.model);
        model.linear = tensor_parallel_shards(model.linear, o.tp, o.group);
    } catch (const std::exception& e) {
        throw Failure{"reading the model", QJIT_ERROR_INVALID_ARGUMENT, e.what()};
    }
    add_model_targets(model, o, targets);
}

// A checkpoint opened once per context that creates its layers (a checkpoint belongs to a context).
class CheckpointLayers {
public:
    explicit CheckpointLayers(std::string directory) : directory_(std::move(directory)) {}
    CheckpointLayers(const CheckpointLayers&) = delete;
    CheckpointLayers& operator=(const CheckpointLayers&) = delete;
    ~CheckpointLayers() {
        for (auto& [context, checkpoint] : opened_) qjit_checkpoint_close(checkpoint);
    }
    qjit_checkpoint* in(qjit_context* context) {
        qjit_checkpoint*& checkpoint = opened_[context];
        if (checkpoint == nullptr)
            check(qjit_checkpoint_open(context, directory_.c_str(), &checkpoint), "qjit_checkpoint_open");
        return checkpoint;
    }

private:
    std::string directory_;
    std::map<qjit_context*, qjit_checkpoint*> opened_;
};

// Layers of one format and shape: the first one's name, and how many later ones share them.
struct Distinct {
    std::string format, first;
    int64_t k, n;
    int others = 0;
};

// Adds (format, k, n) to `distinct`: a new entry, or one more of a seen one. True when new.
bool count_distinct(std::vector<Distinct>* distinct, const std::string& format, const std::string& name, int64_t k,
                    int64_t n) {
    const auto seen = std::find_if(distinct->begin(), distinct->end(),
                                   [&](const Distinct& d) { return d.format == format && d.k == k && d.n == n; });
    if (seen != distinct->end()) {
        ++seen->others;
        return false;
    }
    distinct->push_back({format, name, k, n});
    return true;
}

// The checkpoint's distinct (format, K, N), each made from the first layer that has it.
void add_checkpoint_targets(const std::string& directory, CheckpointLayers* checkpoint, qjit_context* context,
                            Targets* targets) {
    qjit_checkpoint* opened = checkpoint->in(context);
    int64_t count = 0;
    check(qjit_checkpoint_num_layers(opened, &count), "qjit_checkpoint_num_layers");
    std::vector<Distinct> distinct;
    int64_t bytes = 0;
    std::string summary;
    for (int64_t i = 0; i < count; ++i) {
        qjit_checkpoint_layer info;
        check(qjit_checkpoint_get_layer(opened, i, &info), "qjit_checkpoint_get_layer");
        bytes += info.checkpoint_bytes;
        if (i == 0)
            summary = printed("%lld layers, %d-bit, group %d, %s", (long long)count, info.bits, info.group_size,
                              info.checkpoint_format == QJIT_GPTQ_V1 ? "gptq (v1)" : "gptq_v2");
        count_distinct(&distinct, info.format, info.name, info.k, info.n);
    }
    for (const Distinct& d : distinct) {
        const std::string name = d.first;
        targets->list.push_back({with_others(name, d.others), LinearShape{name, d.k, d.n}, [checkpoint, name](qjit_context* c) {
                                     qjit_linear* layer = nullptr;
                                     check(qjit_checkpoint_create_layer(checkpoint->in(c), name.c_str(), &layer),
                                           "qjit_checkpoint_create_layer");
                                     return LayerPtr(layer);
                                 }});
    }
    targets->what = "checkpoint " + directory + ": " + summary +
                    printed(", %.2f GB, %zu distinct format and shape", double(bytes) * 1e-9, targets->list.size());
}

// The GGUF file's distinct (ggml type, K, N), each made from the first tensor that has it, exactly
// as the file stores it. Types qjit does not import are listed and left out.
void add_gguf_targets(const std::string& path, const TuneIo& io, Targets* targets) {
    if (!io.gguf) throw Failure{"reading " + path, QJIT_ERROR_UNSUPPORTED, "this build of qjit-tune reads no GGUF files"};
    try {
        targets->gguf = io.gguf(path);
    } catch (const std::exception& e) {
        throw Failure{"reading " + path, QJIT_ERROR_INVALID_ARGUMENT, e.what()};
    }
    std::vector<Distinct> distinct;
    std::vector<const GgmlLinear*> firsts;
    std::string skipped;
    int64_t bytes = 0;
    for (const GgmlLinear& linear : targets->gguf.linears) {
        bytes += int64_t(linear.bytes);
        if (count_distinct(&distinct, linear.type_name, linear.name, linear.k, linear.n)) firsts.push_back(&linear);
    }
    for (size_t i = 0; i < distinct.size(); ++i) {
        const GgmlLinear* first = firsts[i];
        const std::string name = with_others(first->name, distinct[i].others) + " " + first->type_name;
        if (!first->importable) {
            skipped += (skipped.empty() ? "" : ", ") + name;
            continue;
        }
        targets->list.push_back({name, LinearShape{first->name, first->k, first->n}, [first](qjit_context* c) {
                                     qjit_linear* layer = nullptr;
                                     check(qjit_linear_create_from_gguf(c, first->ggml_type, first->data, first->bytes,
                                                                        first->k, first->n, &layer),
                                           "qjit_linear_create_from_gguf");
                                     return LayerPtr(layer);
                                 }});
    }
    targets->what = printed("GGUF %s: %zu linear weights, %.2f GB, %zu distinct format and shape", path.c_str(),
                            targets->gguf.linears.size(), double(bytes) * 1e-9, targets->list.size());
    if (!skipped.empty()) targets->what += " (not imported by qjit, left out: " + skipped + ")";
}

void show_progress(const TuneIo& io, size_t done, size_t total, const std::string& what) {
    constexpr int kWidth = 30;
    const int filled = int(done * kWidth / total);
    io.out(printed("\r[%s%s] %zu/%zu %-40s", std::string(size_t(filled), '#').c_str(),
                   std::string(size_t(kWidth - filled), '.').c_str(), done, total, what.c_str()));
}

const char* source_word(qjit_tiling_source source) {
    switch (source) {
        case QJIT_TILING_DATABASE: return "hit";
        case QJIT_TILING_SEARCHED: return "tuned";
        case QJIT_TILING_CONTEXT: return "same";
        case QJIT_TILING_MODEL: return "model";
        case QJIT_TILING_FORCED: return "forced";
        case QJIT_TILING_PACK: return "pack";
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
// whole new one.
void write_atomically(const std::string& path, const std::string& text) {
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
    if (failure != 0) throw Failure{"writing " + path, QJIT_ERROR_IO, std::strerror(failure)};
}

// The machine's peaks, on one thread and on the layers' thread count; "x probe" is against the
// latter, measured again after the rows are timed (a shared machine's bandwidth drifts): the higher
// of the two is the floor. The probe's 1 GiB buffer is freed before any layer is made.
double print_peaks(const TuneIo& io, int threads) {
    double probe_gbps = 0;
    {
        qjit_tools::BandwidthProbe probe;
        probe_gbps = probe.peak(threads);
        io.out(printed("memory read probe (%s loads, best of %d sweeps): %.1f GB/s on 1 thread, %.1f GB/s on %d\n",
                       probe.load_width(), qjit_tools::BandwidthProbe::kPeakSweeps,
                       threads > 1 ? probe.peak(1) : probe_gbps, probe_gbps, threads));
    }
    if (qjit_tools::PeakProbe::available()) {
        qjit_tools::PeakProbe int8_peak;
        const double all = int8_peak.peak(threads);
        io.out(printed("int8 dot-product peak (%s, best of %d runs): %.3f T MAC/s on 1 thread, %.3f T MAC/s on %d\n",
                       int8_peak.instruction(), qjit_tools::PeakProbe::kPeakRuns,
                       (threads > 1 ? int8_peak.peak(1) : all) * 1e-12, all * 1e-12, threads));
    }
    return probe_gbps;
}

// The contexts a run times layers in: the portable path, and per batch a tuned one and an untuned one.
struct Contexts {
    ContextPtr portable;
    std::vector<ContextPtr> tuned, untuned;
    int threads = 0;
    const char* machine = nullptr;
};

Contexts make_contexts(const Options& o) {
    const qjit_tuning_mode mode =
        o.exhaustive ? QJIT_TUNING_EXHAUSTIVE : o.retune ? QJIT_TUNING_RETUNE : QJIT_TUNING_DEFAULT;
    Contexts c;
    c.portable = make_context(o, 1, 0, QJIT_TUNING_DEFAULT, QJIT_ISA_PORTABLE, false);
    check(qjit_context_num_threads(c.portable.get(), &c.threads), "qjit_context_num_threads");
    for (int64_t batch : o.batches) {
        c.tuned.push_back(make_context(o, batch, o.budget_ms, mode, parse_isa(o.isa), true));
        c.untuned.push_back(make_context(o, batch, 0, QJIT_TUNING_DEFAULT, parse_isa(o.isa), false));
    }
    check(qjit_context_describe(c.tuned.front().get(), &c.machine), "qjit_context_describe");
    return c;
}

// One row: the target made in the tuned context of batch b, its tuning and its cold time (and on
// the CUDA device), against the untuned default and the portable layer `slow`.
Row time_row(const Options& o, const Target& target, const Contexts& c, size_t b, qjit_linear* slow, const TuneIo& io) {
    Row row;
    row.layer = target.name;
    row.shape = target.shape;
    row.batch = o.batches[b];
    LayerPtr layer = target.create(c.tuned[b].get());
    qjit_linear_tuning tuning;
    qjit_linear_info info;
    check(qjit_linear_get_tuning(layer.get(), &tuning), "qjit_linear_get_tuning");
    check(qjit_linear_get_info(layer.get(), &info), "qjit_linear_get_info");
    if (*tuning.warning) io.err(std::string("\nqjit-tune: warning: ") + tuning.warning + "\n");
    row.source = tuning.source;
    row.kernel = std::string(tuning.kernel_key).substr(0, std::string(tuning.kernel_key).find(' '));
    row.tiling = tuning.tiling;
    row.tuning_ms = tuning.tuning_ms;
    row.us = time_layer(layer.get(), row.batch, o.repeats);
    row.gbps = double(info.weight_bytes) / row.us * 1e-3;
    if (o.cuda_device >= 0) {
        const qjit_dtype dtype = o.cuda_dtype == "bf16" ? QJIT_DTYPE_BF16 : QJIT_DTYPE_F16;
        check(qjit_linear_get_tuning_cuda(layer.get(), row.batch, dtype, &tuning), "qjit_linear_get_tuning_cuda");
        row.cuda_source = tuning.source;
        row.cuda_tiling = tuning.tiling;
        row.cuda_tuning_ms = tuning.tuning_ms;
        check(qjit_linear_benchmark_cuda(layer.get(), row.batch, dtype, o.repeats, &row.cuda_us),
              "qjit_linear_benchmark_cuda");
        row.cuda_gbps = double(info.weight_bytes) / row.cuda_us * 1e-3;  // CPU packing size: close to the device's
    }
    layer.reset();
    if (o.compare) {
        const LayerPtr plain = target.create(c.untuned[b].get());
        row.default_us = time_layer(plain.get(), row.batch, o.repeats);
        row.portable_us = time_layer(slow, row.batch, std::max(3, o.repeats / 3));
    }
    return row;
}

std::vector<Row> time_rows(const Options& o, const std::vector<Target>& targets, const Contexts& c, const TuneIo& io) {
    std::vector<Row> rows;
    const size_t total = targets.size() * o.batches.size();
    for (const Target& target : targets) {
        const LayerPtr slow = o.compare ? target.create(c.portable.get()) : nullptr;
        for (size_t b = 0; b < o.batches.size(); ++b) {
            if (io.tty) show_progress(io, rows.size(), total, target.name + " m=" + std::to_string(o.batches[b]));
            rows.push_back(time_row(o, target, c, b, slow.get(), io));
        }
    }
    if (io.tty) io.out(printed("\r%-80s\r", ""));
    return rows;
}

void print_tables(const Options& o, const std::vector<Row>& rows, double probe_gbps, const TuneIo& io) {
    io.out("\n| layer | K x N | m | tiling from | kernel | tiling | tuning ms | us | GB/s | x probe | vs default | vs portable |\n");
    io.out("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows) {
        io.out(printed("| %s | %lldx%lld | %lld | %s | %s | %s | %.0f | %.1f | %.2f | %.2f |", r.layer.c_str(),
                       (long long)r.shape.k, (long long)r.shape.n, (long long)r.batch, source_word(r.source),
                       r.kernel.c_str(), r.tiling.c_str(), r.tuning_ms, r.us, r.gbps, r.gbps / probe_gbps));
        io.out(o.compare ? printed(" %.2fx | %.1fx |\n", r.default_us / r.us, r.portable_us / r.us) : " - | - |\n");
    }
    if (std::any_of(rows.begin(), rows.end(), [&](const Row& r) { return r.gbps > probe_gbps; }))
        io.out("\nA layer read faster than the probe (x probe above 1): its weights stayed partly in a cache, or\n"
               "the machine's memory bandwidth varied more than the two probes saw; those ratios are not reliable.\n");
    if (o.cuda_device < 0) return;
    io.out(printed("\nCUDA device %d (%s activations), L2 flushed before each call:\n\n", o.cuda_device,
                   o.cuda_dtype.c_str()));
    io.out("| layer | K x N | m | tiling from | tiling | tuning ms | us | weight GB/s |\n|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows)
        io.out(printed("| %s | %lldx%lld | %lld | %s | %s | %.0f | %.2f | %.0f |\n", r.layer.c_str(),
                       (long long)r.shape.k, (long long)r.shape.n, (long long)r.batch, source_word(r.cuda_source),
                       r.cuda_tiling.c_str(), r.cuda_tuning_ms, r.cuda_us, r.cuda_gbps));
}

// Tunes and times the layers the options name.
void tune(const Options& o, const TuneIo& io) {
    Targets targets;
    if (o.checkpoint.empty() && o.gguf.empty()) add_config_targets(o, &targets);  // a bad config: before any context
    const Contexts contexts = make_contexts(o);
    CheckpointLayers checkpoint(o.checkpoint);  // declared after the contexts: closed before them
    io.out(printed("qjit %s: %s\n", qjit_version(), contexts.machine));
    if (!o.checkpoint.empty()) add_checkpoint_targets(o.checkpoint, &checkpoint, contexts.tuned.front().get(), &targets);
    if (!o.gguf.empty()) add_gguf_targets(o.gguf, io, &targets);
    const int threads = contexts.threads;
    io.out(printed("%s; %d threads; %s; median of %d cold calls\n", targets.what.c_str(), threads,
                   o.exhaustive ? "exhaustive search" : o.retune ? "retuning every shape" : "database hits reused",
                   o.repeats));
    double probe_gbps = print_peaks(io, threads);
    const std::vector<Row> rows = time_rows(o, targets.list, contexts, io);
    const double probe_after = qjit_tools::BandwidthProbe().peak(threads);
    probe_gbps = std::max(probe_gbps, probe_after);
    io.out(printed("memory read probe after timing: %.1f GB/s on %d threads; x probe is against %.1f GB/s\n",
                   probe_after, threads, probe_gbps));
    print_tables(o, rows, probe_gbps, io);
    if (!o.json_path.empty())
        write_atomically(o.json_path, run_json(o, contexts.machine, threads, targets.what, probe_gbps, rows).dump(2) + "\n");
}

void add_options(CLI::App& app, Options& o) {
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
    CLI::Option* checkpoint = app.add_option("--checkpoint", o.checkpoint,
                                             "GPTQ checkpoint directory: tune each distinct format and shape of its "
                                             "layers (width, group and symmetry come from it)")
                                  ->check(CLI::ExistingDirectory)
                                  ->excludes(model, bits, group, symmetric, tp);
    app.add_option("--gguf", o.gguf,
                   "Llama GGUF file: tune each distinct format and shape of its linear weights, made from the "
                   "file's own (format and shapes come from it)")
        ->check(CLI::ExistingFile)
        ->excludes(model, bits, group, symmetric, tp, checkpoint);
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
    app.add_option("--isa", o.isa,
                   "cap on the CPU instruction set, as $QJIT_MAX_ISA: auto, portable, avx2, avx2-vnni, avx512 or "
                   "avx512-vnni")
        ->check(CLI::Validator(
            [](std::string& name) {
                try {
                    parse_isa(name);  // the names qjit-run --isa takes
                    return std::string();
                } catch (const std::invalid_argument& e) {
                    return std::string(e.what());
                }
            },
            "ISA"));
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
}

// Reads the arguments into `o`; an outcome when that ends the run (help shown, bad usage).
std::optional<TuneOutcome> parse(const std::vector<std::string>& arguments, Options& o, const TuneIo& io) {
    CLI::App app{"qjit-tune: tune qjit kernels for LLM layer shapes on this machine and store the choices "
                 "(default: Llama-2-7B, 4-bit, group 128, batch 1 and 16)",
                 "qjit-tune"};
    add_options(app, o);
    std::vector<std::string> reversed(arguments.rbegin(), arguments.rend());  // as CLI11 takes them
    try {
        app.parse(reversed);
        return std::nullopt;
    } catch (const CLI::ParseError& e) {
        std::ostringstream out, err;
        const int code = app.exit(e, out, err);
        if (!out.str().empty()) io.out(out.str());
        if (!err.str().empty()) io.err(err.str());
        if (code == 0) return TuneOutcome{};
        return TuneOutcome{QJIT_ERROR_INVALID_ARGUMENT, "reading the arguments", e.what(), code};
    }
}

}  // namespace

std::string failure_text(const TuneOutcome& outcome) {
    return outcome.what + " failed: " + qjit_status_string(outcome.status) + ": " + outcome.message;
}

TuneOutcome run_tune(const std::vector<std::string>& arguments, const TuneIo& io) {
    Options o;
    if (std::optional<TuneOutcome> parsed = parse(arguments, o, io)) return *parsed;
    try {
        if (o.list || !o.export_path.empty() || !o.import_path.empty()) manage_database(o, io);
        else tune(o, io);
        return {};
    } catch (const Failure& f) {
        const TuneOutcome outcome{f.status, f.what, f.message, 1};
        io.err("qjit-tune: " + failure_text(outcome) + "\n");
        return outcome;
    }
}

}  // namespace qjit_models
