// bench_cuda: qjit's CUDA layers against a cuBLAS fp16 GEMM on the same GPU, next to a
// device-to-device copy-bandwidth probe, all in one run on device 0.
//
// Every call (cuBLAS and qjit alike) is timed the same way: the L2 cache is flushed by a memset of
// twice its size, then CUDA events bracket the one call, and the median over --reps calls (after a
// warm-up) is reported. The weights stay resident in device memory but are never in L2 when a call
// starts, as when decoding a model much larger than the cache.
//
//   bench_cuda [--shapes llama7b,llama70b,mixtral,granite] [--batches 1,4,16,32,64] [--reps 50]
//              [--bits 4,3] [--all] [--dtype f16|bf16] [--tuning-db PATH] [--budget MS] [--tuner-check]
//              [--low-rank R] [--low-rank-bits 3|8|16] [--mixed] [--tilings "T1;T2;..."]
//
// --low-rank R adds, for each width, the same layer with a rank-R compensator (MiLo's y += (x U) V,
// U and V stored at --low-rank-bits, 3 by default) and its time over the plain layer's.
// --mixed adds the 2/4/16 format (45 % of the 64-row K-groups at 4 bits, the rest at 2: 2.9 bits
// per code; second-order scales; 0.2 % fp16 outliers), quantized from random weights, and its time
// over q3's.
//
// --tuner-check prints, instead of the main table, the GPU tuner against an exhaustive search for
// each shape, batch and width: the budgeted search's tiling and time, the exhaustive one's, their
// ratio, each search's wall time, and a second creation's time once the database holds the record.
//
// --tilings prints, instead of the main table, each named CUDA tiling (QJIT_CUDA_TILING's form, e.g.
// "kernel=gemm,bm=128,bn=128,bk=64,warps=8,wm=2"; ';' between tilings) forced on every shape, batch
// and width, beside cuBLAS: what the tuner's model and search choose among, measured.
//
// --all is --bits 4,3,2,8. Every qjit layer is GPTQ-style, group 128, asymmetric, with random codes,
// and is created in a context whose tuning_batch is the row's batch (tuned for it, within --budget).
// PyTorch's peers (cuBLAS through torch.matmul, its int4 kernel): bench/peer_torch.py.
// Exits 0 after one line "no CUDA device: ..." where qjit sees no GPU.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "qjit/qjit.h"
#include "tools/random_gptq.hpp"

namespace {

using qjit_bench::median;

constexpr int kGroupSize = 128;
constexpr int kWarmupCalls = 5;
constexpr int kCopyReps = 20;
constexpr size_t kMinCopyBytes = size_t(1) << 30;  // the copy probe moves at least 1 GiB

// ---------------------------------------------------------------------------------------------
// Errors: every CUDA, cuBLAS and qjit call is checked; a failure names the call and exits 1.
// ---------------------------------------------------------------------------------------------

[[noreturn]] void fail(const std::string& what, const std::string& why) {
    std::fprintf(stderr, "bench_cuda: %s failed: %s\n", what.c_str(), why.c_str());
    std::exit(1);
}

void check_cuda(cudaError_t error, const char* what) {
    if (error != cudaSuccess) fail(what, std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error));
}

void check_cublas(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS) fail(what, cublasGetStatusString(status));
}

void check_qjit(qjit_status status, const char* what) {
    if (status != QJIT_OK) fail(what, std::string(qjit_status_string(status)) + ": " + qjit_last_error());
}

#define CUDA_CHECK(call) check_cuda((call), #call)
#define CUBLAS_CHECK(call) check_cublas((call), #call)
#define QJIT_CHECK(call) check_qjit((call), #call)

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

struct Options {
    std::vector<std::string> models{"llama7b", "llama70b", "mixtral", "granite"};
    std::vector<int64_t> batches{1, 4, 16, 32, 64};
    std::vector<int> bits{4, 3};
    int reps = 50;
    qjit_dtype dtype = QJIT_DTYPE_F16;
    std::optional<std::string> tuning_db;  // unset: the context's default database
    double budget_ms = -1;                 // < 0: the context's default budget
    bool tuner_check = false;              // --tuner-check: tuned vs exhaustive instead of the main table
    int low_rank = 0;                      // --low-rank: the compensated layers' rank (0: none)
    int low_rank_bits = 3;                 // --low-rank-bits: how their U and V are stored
    bool mixed = false;                    // --mixed: the 2/4/16 layers too
    std::vector<std::string> tilings;      // --tilings: forced tilings timed instead of the main table
};

[[noreturn]] void usage(const char* problem) {
    std::fprintf(stderr,
                 "bench_cuda: %s\n"
                 "usage: bench_cuda [--shapes llama7b,llama70b,mixtral,granite] [--batches 1,4,16,32,64]\n"
                 "                  [--reps N] [--bits 4,3] [--all] [--dtype f16|bf16] [--tuning-db PATH]\n"
                 "                  [--budget MS] [--tuner-check] [--low-rank R] [--low-rank-bits 3|8|16]\n"
                 "                  [--mixed] [--tilings \"T1;T2;...\"]\n",
                 problem);
    std::exit(2);
}

std::vector<std::string> split(const std::string& text) {
    std::vector<std::string> parts;
    std::stringstream stream(text);
    for (std::string part; std::getline(stream, part, ',');)
        if (!part.empty()) parts.push_back(part);
    return parts;
}

int64_t parse_int(const std::string& text, int64_t min) {
    char* end = nullptr;
    const long long value = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < min) usage(("bad number: " + text).c_str());
    return value;
}

const std::string kValuedFlags[] = {"--shapes",    "--batches", "--bits",     "--reps",         "--dtype",
                                    "--tuning-db", "--budget",  "--low-rank", "--low-rank-bits", "--tilings"};

Options parse_args(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        std::string flag = argv[i], value;
        if (flag == "--all") {
            options.bits = {4, 3, 2, 8};
            continue;
        }
        if (flag == "--tuner-check") {
            options.tuner_check = true;
            continue;
        }
        if (flag == "--mixed") {
            options.mixed = true;
            continue;
        }
        if (const size_t eq = flag.find('='); eq != std::string::npos) {  // --flag=value
            value = flag.substr(eq + 1);
            flag.resize(eq);
        } else if (std::find(std::begin(kValuedFlags), std::end(kValuedFlags), flag) == std::end(kValuedFlags)) {
            usage(("unknown flag " + flag).c_str());
        } else if (i + 1 < argc) {  // --flag value
            value = argv[++i];
        } else {
            usage(("missing value for " + flag).c_str());
        }
        if (flag == "--shapes") {
            options.models = split(value);
        } else if (flag == "--batches") {
            options.batches.clear();
            for (const std::string& b : split(value)) options.batches.push_back(parse_int(b, 1));
        } else if (flag == "--bits") {
            options.bits.clear();
            for (const std::string& b : split(value)) options.bits.push_back(int(parse_int(b, 1)));
        } else if (flag == "--reps") {
            options.reps = int(parse_int(value, 1));
        } else if (flag == "--dtype") {
            if (value == "f16") options.dtype = QJIT_DTYPE_F16;
            else if (value == "bf16") options.dtype = QJIT_DTYPE_BF16;
            else usage("--dtype takes f16 or bf16");
        } else if (flag == "--tuning-db") {
            options.tuning_db = value;
        } else if (flag == "--budget") {
            options.budget_ms = std::atof(value.c_str());
        } else if (flag == "--tilings") {
            std::stringstream stream(value);
            for (std::string tiling; std::getline(stream, tiling, ';');)
                if (!tiling.empty()) options.tilings.push_back(tiling);
        } else if (flag == "--low-rank") {
            options.low_rank = int(parse_int(value, 0));
        } else if (flag == "--low-rank-bits") {
            options.low_rank_bits = int(parse_int(value, 3));
            if (options.low_rank_bits != 3 && options.low_rank_bits != 8 && options.low_rank_bits != 16)
                usage("--low-rank-bits takes 3, 8 or 16");
        } else {
            usage(("unknown flag " + flag).c_str());
        }
    }
    if (options.models.empty() || options.batches.empty() || options.bits.empty()) usage("empty list");
    return options;
}

// ---------------------------------------------------------------------------------------------
// Shapes: K x N of the linear layers of the models the issue names
// ---------------------------------------------------------------------------------------------

using Shape = qjit_bench::ModelLayerShape;

// The distinct layer shapes of the models --shapes names (configs/models): Llama-2-7B's and -70B's,
// Mixtral-8x7B's experts, Granite-20B's MLP.
std::vector<Shape> select_shapes(const std::vector<std::string>& models) {
    struct Source {
        const char* model;
        const char* config;
        const char* only;  // the layers whose names contain this
    };
    static constexpr Source kSources[] = {{"llama7b", "llama-2-7b", ""},
                                          {"llama70b", "llama-2-70b", ""},
                                          {"mixtral", "mixtral-8x7b", "expert_"},
                                          {"granite", "granite-20b", "mlp_"}};
    std::vector<Shape> shapes;
    for (const std::string& model : models) {
        const auto source = std::find_if(std::begin(kSources), std::end(kSources),
                                         [&](const Source& s) { return model == s.model; });
        if (source == std::end(kSources)) usage(("unknown model " + model).c_str());
        for (const Shape& shape : qjit_bench::model_layers(source->model, source->config, source->only))
            shapes.push_back(shape);
    }
    return shapes;
}

std::string shape_label(const Shape& shape) {
    return shape.model + " " + std::to_string(shape.k) + "x" + std::to_string(shape.n) + " (" + shape.layer + ")";
}

// ---------------------------------------------------------------------------------------------
// Device memory
// ---------------------------------------------------------------------------------------------

class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t bytes) : bytes_(bytes) { CUDA_CHECK(cudaMalloc(&data_, bytes)); }
    ~DeviceBuffer() { cudaFree(data_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }

private:
    void* data_ = nullptr;
    size_t bytes_;
};

// Random 16-bit floats of magnitude in [1/16, 1) with random signs: no zeros, denormals or
// infinities, and data that toggles as many bits as real activations and weights do (constant
// data would let the tensor cores draw less power and run faster than they do on a model).
uint16_t random_16bit_float(qjit_tools::Rng& rng, qjit_dtype dtype) {
    const uint64_t r = rng.next();
    const uint16_t sign = uint16_t((r & 1) << 15);
    const uint16_t exponent_step = uint16_t((r >> 1) & 3);  // 4 binades below 1.0
    if (dtype == QJIT_DTYPE_BF16) return uint16_t(sign | ((123 + exponent_step) << 7) | ((r >> 3) & 0x7f));
    return uint16_t(sign | ((11 + exponent_step) << 10) | ((r >> 3) & 0x3ff));
}

void fill_random(DeviceBuffer& buffer, qjit_dtype dtype, uint64_t seed) {
    constexpr size_t kChunk = size_t(1) << 24;  // values per host staging chunk (32 MiB)
    qjit_tools::Rng rng(seed);
    std::vector<uint16_t> host;
    const size_t count = buffer.bytes() / sizeof(uint16_t);
    for (size_t start = 0; start < count; start += kChunk) {
        host.resize(std::min(kChunk, count - start));
        for (uint16_t& value : host) value = random_16bit_float(rng, dtype);
        CUDA_CHECK(cudaMemcpy(static_cast<uint16_t*>(buffer.data()) + start, host.data(),
                              host.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
    }
}

// ---------------------------------------------------------------------------------------------
// Timing: the one protocol every measurement goes through
// ---------------------------------------------------------------------------------------------

class ColdL2Timer {
public:
    ColdL2Timer(cudaStream_t stream, size_t flush_bytes) : stream_(stream), flush_(flush_bytes) {
        CUDA_CHECK(cudaEventCreate(&start_));
        CUDA_CHECK(cudaEventCreate(&stop_));
    }
    ~ColdL2Timer() {
        cudaEventDestroy(start_);
        cudaEventDestroy(stop_);
    }
    ColdL2Timer(const ColdL2Timer&) = delete;
    ColdL2Timer& operator=(const ColdL2Timer&) = delete;

    size_t flush_bytes() const { return flush_.bytes(); }

    // Median microseconds of `reps` calls of `enqueue` (which only enqueues work on the stream),
    // each preceded by an L2 flush that the events leave out. The flush also keeps the GPU busy
    // while the host enqueues the call, so no launch gap lands between the events.
    double median_us(int reps, const std::function<void()>& enqueue) {
        std::vector<double> times;
        for (int call = 0; call < kWarmupCalls + reps; ++call) {
            CUDA_CHECK(cudaMemsetAsync(flush_.data(), call & 0xff, flush_.bytes(), stream_));
            CUDA_CHECK(cudaEventRecord(start_, stream_));
            enqueue();
            CUDA_CHECK(cudaEventRecord(stop_, stream_));
            CUDA_CHECK(cudaEventSynchronize(stop_));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
            if (call >= kWarmupCalls) times.push_back(1e3 * double(ms));
        }
        return median(times);
    }

private:
    cudaStream_t stream_;
    DeviceBuffer flush_;
    cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Copy-bandwidth probe
// ---------------------------------------------------------------------------------------------

// Device-to-device copy of max(1 GiB, 4 x L2), median of kCopyReps; GB/s counts the bytes read
// plus the bytes written (2 x the buffer), the traffic a kernel streaming its weights competes with.
double copy_bandwidth_gbps(ColdL2Timer& timer, cudaStream_t stream, size_t l2_bytes) {
    const size_t bytes = std::max(kMinCopyBytes, 4 * l2_bytes);
    DeviceBuffer source(bytes), destination(bytes);
    CUDA_CHECK(cudaMemsetAsync(source.data(), 1, bytes, stream));
    const double us = timer.median_us(kCopyReps, [&] {
        CUDA_CHECK(cudaMemcpyAsync(destination.data(), source.data(), bytes, cudaMemcpyDeviceToDevice, stream));
    });
    const double gbps = 2.0 * double(bytes) / (us * 1e3);
    std::printf("copy probe: cudaMemcpyAsync D2D of %.0f MiB, median of %d: %.1f us, %.1f GB/s "
                "(convention: bytes read + bytes written, 2 x %.0f MiB, per second; 1 GB = 1e9 B)\n",
                double(bytes) / double(1 << 20), kCopyReps, us, gbps, double(bytes) / double(1 << 20));
    return gbps;
}

// The launch floor: the time of the smallest launch there is (a one-word memset kernel) under the
// same protocol, below which no layer's call can go, however few bytes it streams.
double launch_floor_us(ColdL2Timer& timer, cudaStream_t stream) {
    DeviceBuffer word(sizeof(uint32_t));
    const double us = timer.median_us(kCopyReps, [&] { CUDA_CHECK(cudaMemsetAsync(word.data(), 0, word.bytes(), stream)); });
    std::printf("launch floor: a 4-byte cudaMemsetAsync, median of %d: %.1f us\n", kCopyReps, us);
    return us;
}

// ---------------------------------------------------------------------------------------------
// cuBLAS baseline: dense 16-bit weights, fp32 accumulation
// ---------------------------------------------------------------------------------------------

class CublasGemm {
public:
    CublasGemm(cudaStream_t stream, qjit_dtype dtype)
        : type_(dtype == QJIT_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F) {
        CUBLAS_CHECK(cublasCreate(&handle_));
        CUBLAS_CHECK(cublasSetStream(handle_, stream));
    }
    ~CublasGemm() { cublasDestroy(handle_); }
    CublasGemm(const CublasGemm&) = delete;
    CublasGemm& operator=(const CublasGemm&) = delete;

    // y[m][n] = x[m][k] * w[k][n], all row-major. cuBLAS is column-major, where these buffers are
    // y^T (n x m), x^T (k x m) and w^T (n x k), so it computes y^T = w^T * x^T with no transposes.
    void enqueue(const void* w, const void* x, void* y, int64_t m, int64_t k, int64_t n) const {
        const float alpha = 1.0f, beta = 0.0f;
        CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, w, type_,
                                  int(n), x, type_, int(k), &beta, y, type_, int(n), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    }

private:
    cublasHandle_t handle_ = nullptr;
    cudaDataType_t type_;
};

// ---------------------------------------------------------------------------------------------
// qjit layers
// ---------------------------------------------------------------------------------------------

// A context whose layers are tuned for m rows at creation (as qjit-tune tunes each batch).
qjit_context* make_context(const Options& options, int64_t m, qjit_tuning_mode mode = QJIT_TUNING_DEFAULT,
                           const char* tuning_db = nullptr) {
    qjit_context_options context_options;
    qjit_context_options_init(&context_options);
    context_options.cuda_device = 0;
    context_options.tuning_batch = m;
    context_options.tuning_mode = mode;
    context_options.cuda_dtype = options.dtype;
    if (options.tuning_db) context_options.tuning_db_path = options.tuning_db->c_str();
    if (tuning_db) context_options.tuning_db_path = tuning_db;
    context_options.tuning_budget_ms = options.budget_ms;
    qjit_context* context = nullptr;
    QJIT_CHECK(qjit_context_create(&context_options, &context));
    return context;
}

struct QjitLayer {
    qjit_linear* layer = nullptr;
    int64_t weight_bytes = 0;  // packed codes + scales + zeros: what one forward streams
    double create_ms = 0;      // random codes, import, upload, tuning for the context's batch, compilation
};

// A layer just created, with its streamed bytes and the time since `start` (its creation).
QjitLayer made_since(qjit_linear* layer, std::chrono::steady_clock::time_point start) {
    QjitLayer made;
    made.layer = layer;
    made.create_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    qjit_linear_info info;
    QJIT_CHECK(qjit_linear_get_info(layer, &info));
    made.weight_bytes = info.weight_bytes;
    return made;
}

// Random GPTQ codes: importing them is far faster than quantizing fp32 weights, which matters for
// the 70B layers, and a kernel's speed does not depend on the values.
QjitLayer make_layer(qjit_context* context, const Shape& shape, int bits) {
    const auto start = std::chrono::steady_clock::now();
    qjit_tools::GptqTensors tensors;
    qjit_tools::random_gptq(shape.k, shape.n, bits, kGroupSize, uint64_t(shape.k * 131 + shape.n + bits), &tensors);
    qjit_linear* layer = nullptr;
    QJIT_CHECK(qjit_linear_create_from_gptq(context, shape.k, shape.n, &tensors.view, &layer));
    return made_since(layer, start);
}

// The 2/4/16 layer --mixed describes, quantized from random weights of a trained layer's spread.
QjitLayer make_mixed_layer(qjit_context* context, const Shape& shape) {
    const auto start = std::chrono::steady_clock::now();
    qjit_tools::Rng rng(uint64_t(shape.k * 5 + shape.n));
    std::vector<float> w(size_t(shape.k * shape.n));
    for (float& value : w) value = rng.uniform(-0.05f, 0.05f);
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.method = QJIT_QUANT_MIXED;
    config.group_size = 64;
    config.mixed_alpha = 0.45;
    config.outlier_fraction = 0.002;
    qjit_linear* layer = nullptr;
    QJIT_CHECK(qjit_linear_create_from_f32(context, &config, shape.k, shape.n, w.data(), QJIT_LAYOUT_K_BY_N, &layer));
    return made_since(layer, start);
}

// The same layer plus a rank-`rank` compensator stored at `factor_bits` (random factors of the
// magnitude MiLo's have: a correction well below the weights).
QjitLayer make_compensated_layer(qjit_context* context, const Shape& shape, int bits, int rank, int factor_bits) {
    const auto start = std::chrono::steady_clock::now();
    qjit_tools::GptqTensors tensors;
    qjit_tools::random_gptq(shape.k, shape.n, bits, kGroupSize, uint64_t(shape.k * 131 + shape.n + bits), &tensors);
    qjit_tools::Rng rng(uint64_t(shape.k * 7 + shape.n * 3 + rank));
    std::vector<float> u(size_t(shape.k * rank)), v(size_t(rank * shape.n));
    for (float& value : u) value = rng.uniform(-0.01f, 0.01f);
    for (float& value : v) value = rng.uniform(-0.01f, 0.01f);
    const qjit_low_rank low_rank{rank, factor_bits, u.data(), v.data()};
    qjit_linear* layer = nullptr;
    QJIT_CHECK(qjit_linear_create_with_low_rank(context, shape.k, shape.n, &tensors.view, &low_rank, &layer));
    return made_since(layer, start);
}

std::string cuda_tiling(qjit_linear* layer, int64_t m, qjit_dtype dtype) {
    qjit_linear_tuning tuning;
    QJIT_CHECK(qjit_linear_get_tuning_cuda(layer, m, dtype, &tuning));
    return tuning.tiling && *tuning.tiling ? tuning.tiling : "-";
}

// ---------------------------------------------------------------------------------------------
// Measurements and report
// ---------------------------------------------------------------------------------------------

struct QjitResult {
    double us = 0;
    double speedup = 0;        // cuBLAS time / qjit time
    double copy_fraction = 0;  // weight GB/s over the copy probe's GB/s
};

struct Row {
    int64_t m = 0;
    double cublas_us = 0;
    std::map<int, QjitResult> by_bits;
    std::map<int, double> compensated_ratio;  // --low-rank: compensated layer's time / plain layer's, by bits
    double mixed_ratio = 0;                   // --mixed: the 2/4/16 layer's time / q3's (0: not measured)
};

void print_device(const qjit_cuda_device_info& info) {
    std::printf("device %d: %s, compute %d.%d, %d SMs, L2 %.0f MiB, %.1f GiB, %d-bit bus at %d MHz, "
                "peak %.1f GB/s (data sheet: 2 x bus x clock), driver %d\n",
                info.ordinal, info.name, info.compute_major, info.compute_minor, info.sm_count,
                double(info.l2_bytes) / double(1 << 20), double(info.global_memory_bytes) / double(1 << 30),
                info.memory_bus_bits, info.memory_clock_khz / 1000, info.peak_bandwidth_gbps, info.driver_version);
}

const char* factor_label(int factor_bits) { return factor_bits == 16 ? "f16" : factor_bits == 8 ? "q8" : "q3"; }

void print_table_header(const Options& options) {
    const char* dtype = options.dtype == QJIT_DTYPE_BF16 ? "bf16" : "f16";
    std::printf("\n| shape | m | cuBLAS %s us | cuBLAS weight GB/s |", dtype);
    std::string rule = "|---|---|---|---|";
    for (int bits : options.bits) {
        std::printf(" q%d us | q%d speedup | q%d weight GB/s | q%d %% of copy | q%d tiling |", bits, bits, bits, bits, bits);
        rule += "---|---|---|---|---|";
        if (options.low_rank > 0) {
            std::printf(" q%d+r%d%s us | / q%d |", bits, options.low_rank, factor_label(options.low_rank_bits), bits);
            rule += "---|---|";
        }
    }
    if (options.mixed) {
        std::printf(" 2/4/16 us | 2/4/16 weight GB/s | / q3 |");
        rule += "---|---|---|";
    }
    std::printf("\n%s\n", rule.c_str());
}

// What every row shares: the protocol, the baseline, the buffers sized for the largest row.
struct Bench {
    const Options& options;
    cudaStream_t stream;
    ColdL2Timer& timer;
    const CublasGemm& cublas;
    const DeviceBuffer& weights;  // dense K x N, for cuBLAS
    const DeviceBuffer& x;
    const DeviceBuffer& y;
    double copy_gbps;
};

// `compensated`: by bits, the layers with a compensator (empty without --low-rank); `mixed`: the
// 2/4/16 layer (null without --mixed).
Row measure_row(const Bench& bench, const Shape& shape, int64_t m, const std::map<int, QjitLayer>& layers,
                const std::map<int, QjitLayer>& compensated, const QjitLayer* mixed) {
    const Options& options = bench.options;
    Row row;
    row.m = m;
    row.cublas_us = bench.timer.median_us(options.reps, [&] {
        bench.cublas.enqueue(bench.weights.data(), bench.x.data(), bench.y.data(), m, shape.k, shape.n);
    });
    const double dense_bytes = double(shape.k * shape.n * 2);
    std::printf("| %s | %lld | %.1f | %.0f |", shape_label(shape).c_str(), (long long)m, row.cublas_us,
                dense_bytes / (row.cublas_us * 1e3));
    for (int bits : options.bits) {
        qjit_linear* layer = layers.at(bits).layer;
        QjitResult result;
        result.us = bench.timer.median_us(options.reps, [&] {
            QJIT_CHECK(qjit_linear_forward_cuda(layer, bench.x.data(), bench.y.data(), m, options.dtype, bench.stream));
        });
        const double gbps = double(layers.at(bits).weight_bytes) / (result.us * 1e3);
        result.speedup = row.cublas_us / result.us;
        result.copy_fraction = gbps / bench.copy_gbps;
        row.by_bits[bits] = result;
        std::printf(" %.1f | %.2fx | %.0f | %.0f%% | %s |", result.us, result.speedup, gbps, 100 * result.copy_fraction,
                    cuda_tiling(layer, m, options.dtype).c_str());
        if (const auto found = compensated.find(bits); found != compensated.end()) {
            const double us = bench.timer.median_us(options.reps, [&] {
                QJIT_CHECK(qjit_linear_forward_cuda(found->second.layer, bench.x.data(), bench.y.data(), m, options.dtype,
                                                    bench.stream));
            });
            row.compensated_ratio[bits] = us / result.us;
            std::printf(" %.1f | %.2f |", us, us / result.us);
        }
    }
    if (mixed) {
        const double us = bench.timer.median_us(options.reps, [&] {
            QJIT_CHECK(qjit_linear_forward_cuda(mixed->layer, bench.x.data(), bench.y.data(), m, options.dtype, bench.stream));
        });
        const auto q3 = row.by_bits.find(3);
        row.mixed_ratio = q3 == row.by_bits.end() ? 0 : us / q3->second.us;
        char ratio[32] = "-";
        if (row.mixed_ratio > 0) std::snprintf(ratio, sizeof ratio, "%.2f", row.mixed_ratio);
        std::printf(" %.1f | %.0f | %s |", us, double(mixed->weight_bytes) / (us * 1e3), ratio);
    }
    std::printf("\n");
    std::fflush(stdout);
    return row;
}

// A target of the issue: `metric` of the rows at `bits` with m in [m_lo, m_hi], every one >= threshold.
struct Target {
    std::string text;
    int bits;
    int64_t m_lo, m_hi;
    bool copy_fraction;  // false: speedup over cuBLAS
    double threshold;
};

std::vector<Target> issue_targets(const Options& options) {
    std::vector<Target> targets = {
        {"q4 g128, batch 1-16: >= 3.5x faster than cuBLAS", 4, 1, 16, false, 3.5},
        {"q4 g128, batch 1: >= 85% of copy bandwidth", 4, 1, 1, true, 0.85},
        {"q3 g128, batch 1-16: >= 4.5x faster than cuBLAS", 3, 1, 16, false, 4.5},
    };
    for (int bits : options.bits)
        targets.push_back({"q" + std::to_string(bits) + " g128, batch 64: no slower than cuBLAS (>= 1x)", bits, 64, 64,
                           false, 1.0});
    return targets;
}

// Printed after the results, so that nothing interleaves with the rows of the main table.
void print_creation_times(const std::vector<std::string>& lines) {
    std::printf("\n| layer | tuned for m | weight MiB | creation ms (upload, tuning, compiles) |\n|---|---|---|---|\n");
    for (const std::string& line : lines) std::printf("%s\n", line.c_str());
}

void print_summary(const Options& options, const std::vector<Row>& rows) {
    std::printf("\n| target | rows | min | median | result |\n|---|---|---|---|---|\n");
    for (const Target& target : issue_targets(options)) {
        std::vector<double> values;
        for (const Row& row : rows) {
            const auto found = row.by_bits.find(target.bits);
            if (found == row.by_bits.end() || row.m < target.m_lo || row.m > target.m_hi) continue;
            values.push_back(target.copy_fraction ? found->second.copy_fraction : found->second.speedup);
        }
        if (values.empty()) {
            std::printf("| %s | 0 | - | - | not measured |\n", target.text.c_str());
            continue;
        }
        const double low = *std::min_element(values.begin(), values.end());
        const double scale = target.copy_fraction ? 100.0 : 1.0;
        const char* unit = target.copy_fraction ? "%" : "x";
        std::printf("| %s | %zu | %.2f%s | %.2f%s | %s |\n", target.text.c_str(), values.size(), scale * low, unit,
                    scale * median(values), unit, low >= target.threshold ? "PASS" : "FAIL");
    }
    std::vector<double> mixed_ratios;  // the 2/4/16 layers over q3, batch 1 to 16
    for (const Row& row : rows)
        if (row.m <= 16 && row.mixed_ratio > 0) mixed_ratios.push_back(row.mixed_ratio);
    if (!mixed_ratios.empty()) {
        const double worst = *std::max_element(mixed_ratios.begin(), mixed_ratios.end());
        std::printf("| 2/4/16 at 2.9 bits per code, batch 1-16: faster than q3 (< 1.00) | %zu | %.2f (worst) | %.2f | %s |\n",
                    mixed_ratios.size(), worst, median(mixed_ratios), worst < 1.0 ? "PASS" : "FAIL");
    }
    if (options.low_rank == 0) return;
    std::vector<double> ratios;  // the compensated INT3 layers at batch 1, over plain INT3
    for (const Row& row : rows)
        if (const auto found = row.compensated_ratio.find(3); row.m == 1 && found != row.compensated_ratio.end())
            ratios.push_back(found->second);
    if (ratios.empty()) return;
    const double worst = *std::max_element(ratios.begin(), ratios.end());
    std::printf("| q3 + rank %d %s compensator, batch 1: within 10%% of plain q3 (<= 1.10) | %zu | %.2f (worst) | %.2f | %s |\n",
                options.low_rank, factor_label(options.low_rank_bits), ratios.size(), worst, median(ratios),
                worst <= 1.10 ? "PASS" : "FAIL");
}

// The budgeted search against the exhaustive one, and a database hit, for every shape, batch and
// width; each layer's forward timed with the bench's protocol.
void tuner_check(const Options& options, const std::vector<Shape>& shapes, ColdL2Timer& timer, cudaStream_t stream,
                 const DeviceBuffer& x, const DeviceBuffer& y) {
    char db_template[] = "/tmp/qjit-tuner-check-XXXXXX";
    if (!mkdtemp(db_template)) fail("mkdtemp", "cannot create a temporary folder");
    std::printf("\n| shape | m | bits | tuned tiling | tuned us | search ms | timed | exhaustive tiling | exhaustive us |"
                " exhaustive ms | tuned / exhaustive | database hit: creation ms |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    auto time_layer = [&](qjit_linear* layer, int64_t m) {
        return timer.median_us(options.reps, [&] {
            QJIT_CHECK(qjit_linear_forward_cuda(layer, x.data(), y.data(), m, options.dtype, stream));
        });
    };
    for (const Shape& shape : shapes)
        for (int64_t m : options.batches)
            for (int bits : options.bits) {
                const std::string db = std::string(db_template) + "/" + std::to_string(shape.k) + "x" +
                                       std::to_string(shape.n) + "_m" + std::to_string(m) + "_q" + std::to_string(bits) +
                                       ".yaml";
                qjit_context* budgeted = make_context(options, m, QJIT_TUNING_DEFAULT, db.c_str());
                qjit_context* exhaustive = make_context(options, m, QJIT_TUNING_EXHAUSTIVE, "");
                QjitLayer tuned = make_layer(budgeted, shape, bits), best = make_layer(exhaustive, shape, bits);
                qjit_linear_tuning tuned_info, best_info;
                QJIT_CHECK(qjit_linear_get_tuning_cuda(tuned.layer, m, options.dtype, &tuned_info));
                QJIT_CHECK(qjit_linear_get_tuning_cuda(best.layer, m, options.dtype, &best_info));
                const std::string tuned_tiling = tuned_info.tiling, best_tiling = best_info.tiling;
                const double tuned_us = time_layer(tuned.layer, m), best_us = time_layer(best.layer, m);
                QjitLayer again = make_layer(budgeted, shape, bits);  // the database now holds the record
                std::printf("| %s | %lld | %d | %s | %.1f | %.0f | %d/%d | %s | %.1f | %.0f | %.3f | %.0f |\n",
                            shape_label(shape).c_str(), (long long)m, bits, tuned_tiling.c_str(), tuned_us,
                            tuned_info.tuning_ms, tuned_info.candidates_timed, tuned_info.candidates_ranked,
                            best_tiling.c_str(), best_us, best_info.tuning_ms, tuned_us / best_us, again.create_ms);
                std::fflush(stdout);
                for (QjitLayer* layer : {&tuned, &best, &again}) QJIT_CHECK(qjit_linear_destroy(layer->layer));
                QJIT_CHECK(qjit_context_destroy(budgeted));
                QJIT_CHECK(qjit_context_destroy(exhaustive));
            }
}

// Each of --tilings forced (QJIT_CUDA_TILING, read at a context's creation) on every shape, batch
// and width, in a context and layer of its own, beside cuBLAS on the same shape and batch.
void forced_tilings(const Options& options, const std::vector<Shape>& shapes, ColdL2Timer& timer, cudaStream_t stream,
                    const CublasGemm& cublas, const DeviceBuffer& weights, const DeviceBuffer& x, const DeviceBuffer& y) {
    std::printf("\n| shape | m | bits | tiling | us | cuBLAS f16 us | qjit / cuBLAS speed |\n|---|---|---|---|---|---|---|\n");
    for (const Shape& shape : shapes)
        for (int64_t m : options.batches) {
            const double cublas_us = timer.median_us(options.reps, [&] {
                cublas.enqueue(weights.data(), x.data(), y.data(), m, shape.k, shape.n);
            });
            for (int bits : options.bits)
                for (const std::string& tiling : options.tilings) {
                    setenv("QJIT_CUDA_TILING", tiling.c_str(), 1);
                    qjit_context* context = make_context(options, m, QJIT_TUNING_DEFAULT, "");
                    unsetenv("QJIT_CUDA_TILING");
                    const QjitLayer layer = make_layer(context, shape, bits);
                    const double us = timer.median_us(options.reps, [&] {
                        QJIT_CHECK(qjit_linear_forward_cuda(layer.layer, x.data(), y.data(), m, options.dtype, stream));
                    });
                    std::printf("| %s | %lld | %d | %s | %.1f | %.1f | %.2fx |\n", shape_label(shape).c_str(),
                                (long long)m, bits, cuda_tiling(layer.layer, m, options.dtype).c_str(), us, cublas_us,
                                cublas_us / us);
                    std::fflush(stdout);
                    QJIT_CHECK(qjit_linear_destroy(layer.layer));
                    QJIT_CHECK(qjit_context_destroy(context));
                }
        }
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = parse_args(argc, argv);
    const std::vector<Shape> shapes = select_shapes(options.models);

    int devices = 0;
    if (qjit_cuda_device_count(&devices) != QJIT_OK || devices < 1) {
        std::printf("%s\n", qjit_last_error());  // "no CUDA device: <why>"
        return 0;
    }
    qjit_cuda_device_info info;
    QJIT_CHECK(qjit_cuda_get_device_info(0, &info));
    std::printf("qjit %s, bench_cuda: median of %d calls after %d warm-up calls, each with L2 flushed first\n",
                qjit_version(), options.reps, kWarmupCalls);
    print_device(info);

    // The runtime's primary context exists before qjit's context, so both work on the same one.
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaFree(nullptr));
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int l2_bytes = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0));
    ColdL2Timer timer(stream, 2 * size_t(l2_bytes));
    std::printf("L2 flush: cudaMemsetAsync of %.0f MiB (2 x L2) before every timed call, outside the events\n",
                double(timer.flush_bytes()) / double(1 << 20));

    const double copy_gbps = copy_bandwidth_gbps(timer, stream, size_t(l2_bytes));
    std::printf("copy bandwidth / peak: %.0f%%\n", 100 * copy_gbps / info.peak_bandwidth_gbps);
    launch_floor_us(timer, stream);

    // One buffer of each kind, sized for the largest shape and batch, shared by every row.
    int64_t max_k = 0, max_n = 0, max_kn = 0;
    for (const Shape& shape : shapes) {
        max_k = std::max(max_k, shape.k);
        max_n = std::max(max_n, shape.n);
        max_kn = std::max(max_kn, shape.k * shape.n);
    }
    const int64_t max_m = *std::max_element(options.batches.begin(), options.batches.end());
    DeviceBuffer weights(size_t(max_kn) * 2), x(size_t(max_m * max_k) * 2), y(size_t(max_m * max_n) * 2);
    fill_random(weights, options.dtype, 1);
    fill_random(x, options.dtype, 2);

    if (options.tuner_check) {
        tuner_check(options, shapes, timer, stream, x, y);
        CUDA_CHECK(cudaStreamDestroy(stream));
        return 0;
    }
    CublasGemm cublas(stream, options.dtype);
    if (!options.tilings.empty()) {
        forced_tilings(options, shapes, timer, stream, cublas, weights, x, y);
        CUDA_CHECK(cudaStreamDestroy(stream));
        return 0;
    }
    const Bench bench{options, stream, timer, cublas, weights, x, y, copy_gbps};
    std::map<int64_t, qjit_context*> contexts;
    for (int64_t m : options.batches) contexts[m] = make_context(options, m);
    print_table_header(options);
    std::vector<Row> rows;
    std::vector<std::string> creation_lines;
    for (const Shape& shape : shapes)
        for (int64_t m : options.batches) {
            std::map<int, QjitLayer> layers;  // tuned for this batch, as a user's layers would be
            for (int bits : options.bits) {
                const QjitLayer& made = layers[bits] = make_layer(contexts[m], shape, bits);
                char line[256];
                std::snprintf(line, sizeof line, "| q%dg%d %s | %lld | %.1f | %.0f |", bits, kGroupSize,
                              shape_label(shape).c_str(), (long long)m, double(made.weight_bytes) / double(1 << 20),
                              made.create_ms);
                creation_lines.push_back(line);
            }
            std::map<int, QjitLayer> compensated;
            if (options.low_rank > 0)
                for (int bits : options.bits)
                    compensated[bits] =
                        make_compensated_layer(contexts[m], shape, bits, options.low_rank, options.low_rank_bits);
            std::optional<QjitLayer> mixed;
            if (options.mixed) {
                mixed = make_mixed_layer(contexts[m], shape);
                char line[256];
                std::snprintf(line, sizeof line, "| 2/4/16 %s | %lld | %.1f | %.0f |", shape_label(shape).c_str(),
                              (long long)m, double(mixed->weight_bytes) / double(1 << 20), mixed->create_ms);
                creation_lines.push_back(line);
            }
            rows.push_back(measure_row(bench, shape, m, layers, compensated, mixed ? &*mixed : nullptr));
            if (mixed) QJIT_CHECK(qjit_linear_destroy(mixed->layer));
            for (auto& [bits, layer] : layers) QJIT_CHECK(qjit_linear_destroy(layer.layer));
            for (auto& [bits, layer] : compensated) QJIT_CHECK(qjit_linear_destroy(layer.layer));
        }
    print_summary(options, rows);
    print_creation_times(creation_lines);

    for (auto& [m, context] : contexts) QJIT_CHECK(qjit_context_destroy(context));
    CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
}
