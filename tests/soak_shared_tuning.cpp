// Soak test of one tuning database shared by the threads of a context and by two processes.
//
// For --seconds S, T threads (--threads) share one qjit_context and, over and over, create a small
// layer (odd shapes among them; quantized from fp32 and imported from random GPTQ tensors in
// turn), check its forward and destroy it. Meanwhile a second process (this program run again
// with --child) does the same on its own context with the same database file (--db; by default a
// fresh one in a temporary folder). The tuning budget is 2 ms, so each new kernel key is searched
// and stored in milliseconds while the other process stores its own.
//
// A record is identified by (hardware fingerprint, kernel key), and a later store of the same pair
// legitimately replaces an earlier one. The kernel key holds N, so the processes tune disjoint
// keys: the parent makes layers of even N, the child of odd N. Within one context a key is
// searched at most once (later layers of it take the context's choice), so every layer whose
// tiling source is QJIT_TILING_SEARCHED stands for one record that no one else writes. A record
// is LOST when such a layer reported no tuning warning (the store succeeded) and the final file
// lacks its key or holds another tiling or time for it. At the end the parent checks the file
// (no damaged part, no key twice, no temporary or set-aside file left), looks up every record
// either process stored, and makes a sample of them again in a fresh context, whose tiling must
// then come from the database.
//
// Each forward is checked three ways: two calls give the same bits; the outputs are within a
// rounding bound of an untuned layer of the same weights and activation path (the model's pick,
// another tiling); and within that bound plus the int8 activations' error of x times the
// dequantized weights, in double.
//
// Prints one summary line. Exit status 0 when every check holds; otherwise each mismatch is printed
// and the status is 1.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "qjit/qjit.h"
#include "tools/random_gptq.hpp"
#include "tuner/hardware_probe.hpp"
#include "tuner/tuning_db.hpp"

namespace fs = std::filesystem;

namespace {

constexpr double kBudgetMs = 2;   // a search takes milliseconds, so keys are stored all the time
constexpr int kContextThreads = 2;  // part of the kernel key: the same in both processes
constexpr size_t kRecreatedPerProcess = 32;
constexpr size_t kMaxReported = 20;

struct Options {
    double seconds = 20;
    int threads = 8;
    std::string db;       // empty: a fresh file in a temporary folder
    bool child = false;
    std::string records;  // the child writes what it stored here
    std::string seconds_text = "20", threads_text = "8";
};

// ---- shapes ----

struct Format {
    int bits;
    int group;
    bool symmetric;
};
constexpr Format kFormats[] = {{4, 128, false}, {4, 32, true}, {3, 64, false},
                               {2, 32, false},  {8, QJIT_GROUP_PER_COLUMN, false}, {4, 16, false}};
constexpr int64_t kRows[] = {32, 64, 77, 100, 128, 160, 200, 256, 333, 384, 500};  // K, odd ones too
constexpr int64_t kColumnSteps = 160;  // N = 8 + 2 j + process, j < kColumnSteps

struct Shape {
    Format format;
    int64_t k, n;
};

// Consecutive indices change the format and K first, N last; indices past the space wrap around.
Shape shape_of(int process, int64_t index) {
    constexpr int64_t formats = int64_t(std::size(kFormats)), rows = int64_t(std::size(kRows));
    return {kFormats[index % formats], kRows[(index / formats) % rows],
            8 + 2 * ((index / (formats * rows)) % kColumnSteps) + process};
}

// Four draws in five take the next new shape; the fifth repeats an earlier one, whose key another
// thread may still be searching or the context already holds.
int64_t shape_index_of_draw(int64_t draw) {
    const int64_t fresh = draw - draw / 5;
    if (draw % 5 != 4) return fresh;
    return int64_t((uint64_t(draw) * 0x9E3779B97F4A7C15ull >> 17) % uint64_t(fresh));
}

// A layer quantized by RTN in `shape`'s format from random fp32 weights, the same for the same seed.
qjit_status create_f32_layer(qjit_context* context, const Shape& shape, uint64_t seed, qjit_linear** layer) {
    qjit_tools::Rng rng(seed);
    std::vector<float> weights(size_t(shape.k * shape.n));
    for (float& w : weights) w = rng.uniform(-1.0f, 1.0f);
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.bits = shape.format.bits;
    config.group_size = shape.format.group;
    config.symmetric = shape.format.symmetric;
    return qjit_linear_create_from_f32(context, &config, shape.k, shape.n, weights.data(), QJIT_LAYOUT_K_BY_N, layer);
}

// ---- one process's run ----

struct StoredRecord {
    int64_t shape_index = 0;
    std::string kernel_key, tiling;
    double time_us = 0;
};

struct LayerDeleter {
    void operator()(qjit_linear* layer) const { qjit_linear_destroy(layer); }
};
using LayerPtr = std::unique_ptr<qjit_linear, LayerDeleter>;

class Soak {
public:
    Soak(int process, qjit_context* tuned, qjit_context* reference)
        : process_(process), tuned_(tuned), reference_(reference) {}

    void run(const Options& options) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.seconds);
        std::vector<std::thread> threads;
        for (int t = 0; t < options.threads; ++t)
            threads.emplace_back([this, deadline] {
                while (std::chrono::steady_clock::now() < deadline) check_one_layer(next_draw_++);
            });
        for (std::thread& thread : threads) thread.join();
    }

    int64_t layers_made() const { return made_; }
    std::map<qjit_tiling_source, int64_t> sources() const {
        std::lock_guard lock(mutex_);
        return sources_;
    }
    std::map<std::string, StoredRecord> stored() const {
        std::lock_guard lock(mutex_);
        return stored_;
    }
    std::vector<std::string> failures() const {
        std::lock_guard lock(mutex_);
        return failures_;
    }

private:
    void fail(const std::string& what) {
        std::lock_guard lock(mutex_);
        failures_.push_back(what);
    }

    void check_one_layer(int64_t draw) {
        const int64_t index = shape_index_of_draw(draw);
        const Shape shape = shape_of(process_, index);
        std::ostringstream name;
        name << "process " << process_ << " draw " << draw << " (q" << shape.format.bits << " group "
             << shape.format.group << (shape.format.symmetric ? " sym" : " asym") << " K=" << shape.k
             << " N=" << shape.n << (draw % 2 ? ", gptq" : ", f32") << ")";
        const uint64_t seed = uint64_t(process_) << 40 | uint64_t(draw);
        LayerPtr layer = make_layer(tuned_, shape, draw % 2 != 0, seed, name.str());
        LayerPtr reference = make_layer(reference_, shape, draw % 2 != 0, seed, name.str());
        if (!layer || !reference) return;
        ++made_;
        if (!check_tuning(*layer, shape, index, name.str())) return;
        check_forward(*layer, *reference, shape, 1 + draw % 3, seed, name.str());
    }

    LayerPtr make_layer(qjit_context* context, const Shape& shape, bool gptq, uint64_t seed, const std::string& name) {
        qjit_linear* layer = nullptr;
        qjit_status status;
        if (gptq) {
            qjit_tools::GptqTensors tensors;
            qjit_tools::random_gptq(shape.k, shape.n, shape.format.bits, shape.format.group, seed, &tensors,
                                    shape.format.symmetric);
            status = qjit_linear_create_from_gptq(context, shape.k, shape.n, &tensors.view, &layer);
        } else {
            status = create_f32_layer(context, shape, seed, &layer);
        }
        if (status != QJIT_OK) {
            fail(name + ": creation failed: " + qjit_status_string(status) + ": " + qjit_last_error());
            return nullptr;
        }
        return LayerPtr(layer);
    }

    // Notes where the tiling came from; a searched one is a record this process stored.
    bool check_tuning(const qjit_linear& layer, const Shape& shape, int64_t index, const std::string& name) {
        qjit_linear_tuning tuning{};
        if (qjit_linear_get_tuning(&layer, &tuning) != QJIT_OK) {
            fail(name + ": qjit_linear_get_tuning: " + qjit_last_error());
            return false;
        }
        const std::string key = tuning.kernel_key;
        {
            std::lock_guard lock(mutex_);
            ++sources_[tuning.source];
        }
        if (*tuning.warning) fail(name + ": tuning warning: " + tuning.warning);
        switch (tuning.source) {
            case QJIT_TILING_PORTABLE:  // no generated kernel on this machine: nothing is tuned
            case QJIT_TILING_CONTEXT:
            case QJIT_TILING_DATABASE:  // a database given with --db may hold keys from earlier runs
                return true;
            case QJIT_TILING_SEARCHED:
                break;
            default:
                fail(name + ": unexpected tiling source " + std::to_string(int(tuning.source)));
                return false;
        }
        // The processes' keys are disjoint only while the key names N.
        if (key.find(" N=" + std::to_string(shape.n) + " ") == std::string::npos) {
            fail(name + ": kernel key '" + key + "' does not name N=" + std::to_string(shape.n));
            return false;
        }
        if (*tuning.warning) return true;  // not stored: nothing the database must keep
        std::lock_guard lock(mutex_);
        auto [it, inserted] = stored_.try_emplace(key, StoredRecord{index, key, tuning.tiling, tuning.measured_us});
        if (!inserted)
            failures_.push_back(name + ": key '" + key + "' searched again in the same context (first for shape " +
                                std::to_string(it->second.shape_index) + ")");
        return true;
    }

    void check_forward(qjit_linear& layer, qjit_linear& reference, const Shape& shape, int64_t m, uint64_t seed,
                       const std::string& name) {
        const int64_t k = shape.k, n = shape.n;
        qjit_tools::Rng rng(~seed);
        std::vector<float> x(size_t(m * k));
        for (float& v : x) v = rng.uniform(-1.0f, 1.0f);
        std::vector<float> y(size_t(m * n)), again(y.size()), untuned(y.size()), w(size_t(k * n));
        if (qjit_linear_forward(&layer, x.data(), m, y.data()) != QJIT_OK ||
            qjit_linear_forward(&layer, x.data(), m, again.data()) != QJIT_OK ||
            qjit_linear_forward(&reference, x.data(), m, untuned.data()) != QJIT_OK ||
            qjit_linear_dequantize(&layer, w.data()) != QJIT_OK) {
            fail(name + ": forward or dequantize failed: " + qjit_last_error());
            return;
        }
        if (std::memcmp(y.data(), again.data(), y.size() * sizeof(float)) != 0)
            fail(name + ": two forwards of the same input differ");
        qjit_linear_tuning tuning{};
        qjit_linear_get_tuning(&layer, &tuning);
        const bool int8 = std::string(tuning.kernel_key).find("_gemm_i8_") != std::string::npos;

        std::vector<double> column_max(size_t(n), 0.0), column_abs_sum(size_t(n), 0.0);
        for (int64_t r = 0; r < k; ++r)
            for (int64_t c = 0; c < n; ++c) {
                const double v = std::fabs(double(w[size_t(r * n + c)]));
                column_max[size_t(c)] = std::max(column_max[size_t(c)], v);
                column_abs_sum[size_t(c)] += v;
            }
        for (int64_t i = 0; i < m; ++i) {
            double x_abs_sum = 0, x_max = 0;
            for (int64_t r = 0; r < k; ++r) {
                x_abs_sum += std::fabs(double(x[size_t(i * k + r)]));
                x_max = std::max(x_max, std::fabs(double(x[size_t(i * k + r)])));
            }
            for (int64_t c = 0; c < n; ++c) {
                double exact = 0;
                for (int64_t r = 0; r < k; ++r) exact += double(x[size_t(i * k + r)]) * double(w[size_t(r * n + c)]);
                // fp32 rounding of sum_k x s (q + z), with s (q + z) at most a few times the column's
                // largest weight; the int8 path also rounds each activation by up to max|x| / (2 qmax),
                // qmax >= 63.
                const double rounding = 2e-3 * x_abs_sum * column_max[size_t(c)] + 1e-6;
                const double activations = int8 ? x_max / 126.0 * column_abs_sum[size_t(c)] : 0.0;
                const double got = y[size_t(i * n + c)], other = untuned[size_t(i * n + c)];
                if (!std::isfinite(got) || std::fabs(got - other) > rounding ||
                    std::fabs(got - exact) > rounding + activations) {
                    std::ostringstream out;
                    out << name << ": row " << i << " column " << c << ": got " << got << ", untuned layer " << other
                        << " (bound " << rounding << "), x W " << exact << " (bound " << rounding + activations
                        << "), tiling " << tuning.tiling;
                    fail(out.str());
                    return;
                }
            }
        }
    }

    const int process_;
    qjit_context* const tuned_;
    qjit_context* const reference_;
    std::atomic<int64_t> next_draw_{0};
    std::atomic<int64_t> made_{0};
    mutable std::mutex mutex_;
    std::map<qjit_tiling_source, int64_t> sources_;
    std::map<std::string, StoredRecord> stored_;  // by kernel key
    std::vector<std::string> failures_;
};

qjit_context* make_context(const char* db_path, double budget_ms, int threads) {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = threads;
    options.tuning_db_path = db_path;
    options.tuning_budget_ms = budget_ms;
    qjit_context* context = nullptr;
    if (qjit_context_create(&options, &context) != QJIT_OK) {
        std::cerr << "soak_shared_tuning: context: " << qjit_last_error() << "\n";
        std::exit(1);
    }
    return context;
}

struct ProcessResult {
    int64_t made = 0;
    std::map<std::string, StoredRecord> stored;
    std::vector<std::string> failures;
    bool tuned_anything = false;  // false: every layer ran on the portable path
};

ProcessResult run_process(int process, const Options& options) {
    qjit_context* tuned = make_context(options.db.c_str(), kBudgetMs, kContextThreads);
    // No database and no timing: the model's pick, a tiling other than the searched one.
    qjit_context* reference = make_context("", 0, 1);
    ProcessResult result;
    {
        Soak soak(process, tuned, reference);
        soak.run(options);
        result.made = soak.layers_made();
        result.stored = soak.stored();
        result.failures = soak.failures();
        for (const auto& [source, count] : soak.sources())
            result.tuned_anything |= source != QJIT_TILING_PORTABLE && count > 0;
    }
    qjit_context_destroy(reference);
    qjit_context_destroy(tuned);
    return result;
}

// ---- the child's report ----

void write_records(const std::string& path, const ProcessResult& result) {
    std::ofstream out(path, std::ios::trunc);
    out.precision(17);  // doubles round-trip
    out << "made " << result.made << " tuned " << result.tuned_anything << "\n";
    for (const auto& [key, record] : result.stored)
        out << record.shape_index << "\t" << record.kernel_key << "\t" << record.tiling << "\t" << record.time_us << "\n";
}

bool read_records(const std::string& path, ProcessResult& result) {
    std::ifstream in(path);
    std::string word;
    if (!(in >> word >> result.made >> word >> result.tuned_anything)) return false;
    in.ignore(1);
    for (std::string line; std::getline(in, line);) {
        std::istringstream fields(line);
        StoredRecord record;
        std::string index, time;
        if (!std::getline(fields, index, '\t') || !std::getline(fields, record.kernel_key, '\t') ||
            !std::getline(fields, record.tiling, '\t') || !std::getline(fields, time))
            return false;
        record.shape_index = std::stoll(index);
        record.time_us = std::strtod(time.c_str(), nullptr);
        result.stored[record.kernel_key] = record;
    }
    return true;
}

// ---- the parent's checks of the database file ----

struct DbCheck {
    size_t found = 0;      // stored records present with the tiling and time stored
    size_t recreated = 0;  // layers made again whose tiling came from the database
    std::vector<std::string> failures;
};

DbCheck check_database(const std::string& path, const ProcessResult (&processes)[2]) {
    DbCheck check;
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    const qjit::ParsedTuningDb parsed = qjit::parse_tuning_db(text.str());
    if (parsed.damaged != 0) check.failures.push_back(path + ": " + std::to_string(parsed.damaged) + " damaged parts");
    std::map<std::pair<std::string, std::string>, qjit::TuningRecord> on_disk;
    for (const qjit::TuningRecord& record : parsed.records)
        if (!on_disk.try_emplace({record.fingerprint, record.kernel_key}, record).second)
            check.failures.push_back(path + ": key '" + record.kernel_key + "' twice");
    for (const auto& entry : fs::directory_iterator(fs::path(path).parent_path())) {
        const std::string file = entry.path().filename().string(), base = fs::path(path).filename().string();
        if (file.rfind(base + ".tmp-", 0) == 0 || file.rfind(base + ".corrupt-", 0) == 0)
            check.failures.push_back("left beside the database: " + entry.path().string());
    }

    const std::string fingerprint = qjit::probe_cpu().fingerprint;
    for (int process = 0; process < 2; ++process)
        for (const auto& [key, stored] : processes[process].stored) {
            auto it = on_disk.find({fingerprint, key});
            if (it == on_disk.end()) {
                check.failures.push_back("lost: process " + std::to_string(process) + "'s record '" + key + "'");
            } else if (it->second.tiling != stored.tiling || it->second.time_us != stored.time_us) {
                std::ostringstream out;
                out.precision(17);
                out << "replaced: process " << process << "'s record '" << key << "' (" << stored.tiling << ", "
                    << stored.time_us << " us) reads " << it->second.tiling << ", " << it->second.time_us << " us";
                check.failures.push_back(out.str());
            } else {
                ++check.found;
            }
        }

    // A sample of the stored keys made again: the tiling now comes from the database.
    qjit_context* context = make_context(path.c_str(), kBudgetMs, kContextThreads);
    for (int process = 0; process < 2; ++process) {
        const auto& stored = processes[process].stored;
        const size_t step = std::max<size_t>(1, (stored.size() + kRecreatedPerProcess - 1) / kRecreatedPerProcess);
        size_t i = 0;
        for (const auto& [key, record] : stored) {
            if (i++ % step != 0) continue;
            const Shape shape = shape_of(process, record.shape_index);
            qjit_linear* layer = nullptr;
            qjit_linear_tuning tuning{};
            if (create_f32_layer(context, shape, uint64_t(record.shape_index), &layer) != QJIT_OK ||
                qjit_linear_get_tuning(layer, &tuning) != QJIT_OK) {
                check.failures.push_back("made again: '" + key + "': " + qjit_last_error());
            } else if (tuning.source != QJIT_TILING_DATABASE || key != tuning.kernel_key ||
                       record.tiling != tuning.tiling || *tuning.warning) {
                check.failures.push_back("made again: '" + key + "' came as '" + tuning.kernel_key + "' from source " +
                                         std::to_string(int(tuning.source)) + " with " + tuning.tiling +
                                         " (stored " + record.tiling + ") " + tuning.warning);
            } else {
                ++check.recreated;
            }
            qjit_linear_destroy(layer);
        }
    }
    qjit_context_destroy(context);
    return check;
}

// ---- command line and processes ----

[[noreturn]] void usage(const std::string& problem) {
    std::cerr << "soak_shared_tuning: " << problem << "\n"
              << "usage: qjit_soak_shared_tuning [--seconds S (20)] [--threads T (8)] [--db PATH (a fresh file)]\n";
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(arg + " needs a value");
            return argv[++i];
        };
        if (arg == "--seconds") {
            options.seconds_text = value();
            char* end = nullptr;
            options.seconds = std::strtod(options.seconds_text.c_str(), &end);
            if (*end || !(options.seconds > 0)) usage("--seconds takes a positive number");
        } else if (arg == "--threads") {
            options.threads_text = value();
            char* end = nullptr;
            const long threads = std::strtol(options.threads_text.c_str(), &end, 10);
            if (*end || threads < 1 || threads > 256) usage("--threads takes 1 .. 256");
            options.threads = int(threads);
        } else if (arg == "--db") {
            options.db = value();
            if (options.db.empty()) usage("--db takes a path");
        } else if (arg == "--child") {
            options.child = true;
        } else if (arg == "--records") {
            options.records = value();
        } else {
            usage("unknown argument '" + arg + "'");
        }
    }
    if (options.child && (options.db.empty() || options.records.empty())) usage("--child needs --db and --records");
    return options;
}

// This program again, as the second process; started before the parent makes any thread.
pid_t start_child(const Options& options) {
    const std::vector<std::string> args = {"qjit_soak_shared_tuning", "--child", "--seconds", options.seconds_text,
                                           "--threads", options.threads_text, "--db", options.db,
                                           "--records", options.records};
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::execv("/proc/self/exe", argv.data());
        std::perror("soak_shared_tuning: exec");
        ::_exit(127);
    }
    return pid;
}

int wait_status(pid_t pid) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int main(int argc, char** argv) {
    Options options = parse(argc, argv);
    if (options.child) {
        const ProcessResult result = run_process(1, options);
        write_records(options.records, result);
        for (const std::string& failure : result.failures) std::cerr << "FAIL (child) " << failure << "\n";
        return result.failures.empty() ? 0 : 1;
    }

    fs::path folder;  // a temporary folder of ours, removed after a clean run
    if (options.db.empty()) {
        std::string pattern = (fs::temp_directory_path() / "qjit_soak_XXXXXX").string();
        if (!::mkdtemp(pattern.data())) usage("cannot make a temporary folder");
        folder = pattern;
        options.db = (folder / "tuning.yaml").string();
        options.records = (folder / "child-records.txt").string();
    } else {
        options.records = options.db + ".soak-child-" + std::to_string(::getpid());
    }

    const pid_t child = start_child(options);
    ProcessResult processes[2];
    processes[0] = run_process(0, options);
    const int child_status = wait_status(child);

    std::vector<std::string> failures = processes[0].failures;
    if (child_status != 0) failures.push_back("the child process exited with status " + std::to_string(child_status));
    if (!read_records(options.records, processes[1])) failures.push_back("no records from the child in " + options.records);
    std::error_code ignored;
    fs::remove(options.records, ignored);
    for (int process = 0; process < 2; ++process)
        for (const auto& [key, record] : processes[process].stored)
            if (processes[1 - process].stored.count(key))
                failures.push_back("both processes stored '" + key + "': the shapes do not keep them apart");

    DbCheck db;
    const bool tuned = processes[0].tuned_anything || processes[1].tuned_anything;
    if (tuned) {
        db = check_database(options.db, processes);
        failures.insert(failures.end(), db.failures.begin(), db.failures.end());
        if (processes[0].stored.empty() || processes[1].stored.empty())
            failures.push_back("a process stored no record: nothing was shared");
    }

    std::printf("soak_shared_tuning: %g s, %d threads per process; layers made %lld + %lld; records stored %zu + %zu; "
                "found %zu of %zu; made again from the database %zu%s; %s\n",
                options.seconds, options.threads, (long long)processes[0].made, (long long)processes[1].made,
                processes[0].stored.size(), processes[1].stored.size(), db.found,
                processes[0].stored.size() + processes[1].stored.size(), db.recreated,
                tuned ? "" : " (no generated kernels on this CPU: nothing tuned)",
                failures.empty() ? "ok" : "FAILED");
    for (size_t i = 0; i < failures.size() && i < kMaxReported; ++i) std::printf("FAIL %s\n", failures[i].c_str());
    if (failures.size() > kMaxReported) std::printf("FAIL ... and %zu more\n", failures.size() - kMaxReported);
    std::fflush(stdout);
    if (failures.empty() && !folder.empty()) fs::remove_all(folder, ignored);
    if (!failures.empty() && !folder.empty()) std::printf("the database is kept: %s\n", options.db.c_str());
    return failures.empty() ? 0 : 1;
}
