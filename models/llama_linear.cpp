#include "models/llama_linear.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "base/simd_family.hpp"

namespace qjit_models::llama {

void check_qjit(qjit_status status, const char* call) {
    if (status != QJIT_OK)
        throw std::runtime_error(std::string(call) + " failed: " + qjit_status_string(status) + ": " +
                                 qjit_last_error());
}

namespace {

// y[r][j] = sum over i of x[r][i] * w_t[i][j], each sum taken in input order i = 0, 1, ... as run.c's
// matmul takes it, so every output equals the plain loop's bit for bit (this file is compiled without
// contraction into FMA). The loops run across outputs, which the compiler vectorizes at each
// family's width (base/simd_family.hpp).
[[gnu::always_inline]] inline void dense_product_loops(const float* w_t, int64_t n, int64_t k, const float* x,
                                                       int64_t m, float* y) {
    constexpr int64_t kRows = 4, kOutputs = 64;  // a tile of rows x outputs held in the accumulators
    float acc[kRows][kOutputs];
    for (int64_t r0 = 0; r0 < m; r0 += kRows) {
        const int64_t rows = std::min(kRows, m - r0);
        for (int64_t j0 = 0; j0 < n; j0 += kOutputs) {
            const int64_t width = std::min(kOutputs, n - j0);
            for (int64_t r = 0; r < rows; ++r) std::fill(acc[r], acc[r] + width, 0.0f);
            for (int64_t i = 0; i < k; ++i) {
                const float* w = w_t + i * n + j0;
                for (int64_t r = 0; r < rows; ++r) {
                    const float xv = x[(r0 + r) * k + i];
                    for (int64_t j = 0; j < width; ++j) acc[r][j] += xv * w[j];
                }
            }
            for (int64_t r = 0; r < rows; ++r) std::copy(acc[r], acc[r] + width, y + (r0 + r) * n + j0);
        }
    }
}

using DenseProduct = void (*)(const float*, int64_t, int64_t, const float*, int64_t, float*);
void dense_product_portable(const float* w_t, int64_t n, int64_t k, const float* x, int64_t m, float* y) {
    dense_product_loops(w_t, n, k, x, m, y);
}
QJIT_TARGET_AVX2 void dense_product_avx2(const float* w_t, int64_t n, int64_t k, const float* x, int64_t m, float* y) {
    dense_product_loops(w_t, n, k, x, m, y);
}
QJIT_TARGET_AVX512 void dense_product_avx512(const float* w_t, int64_t n, int64_t k, const float* x, int64_t m,
                                             float* y) {
    dense_product_loops(w_t, n, k, x, m, y);
}
constexpr qjit::PerFamily<DenseProduct> kDenseProduct{dense_product_portable, dense_product_avx2,
                                                       dense_product_avx512};

class DenseLinear final : public Linear {
public:
    DenseLinear(const LoadedMatrix& matrix, qjit_isa isa)
        : n_(matrix.n()), k_(matrix.k()), product_(kDenseProduct[qjit::simd_family(isa)]),
          weights_t_(size_t(n_) * size_t(k_)) {
        std::vector<float> scratch;
        const std::span<const float> w = matrix.dense_values(scratch);
        for (int64_t out = 0; out < n_; ++out)
            for (int64_t in = 0; in < k_; ++in) weights_t_[size_t(in * n_ + out)] = w[size_t(out * k_ + in)];
    }

    void forward(const float* x, int64_t m, float* y) const override {
        product_(weights_t_.data(), n_, k_, x, m, y);
    }
    int64_t in_features() const override { return k_; }
    int64_t out_features() const override { return n_; }
    int64_t weight_bytes() const override { return n_ * k_ * int64_t(sizeof(float)); }
    int64_t stored_bytes() const override { return weight_bytes(); }
    std::string describe() const override { return "fp32 dense loops"; }

private:
    int64_t n_, k_;
    DenseProduct product_;
    std::vector<float> weights_t_;  // [k][n]
};

// A qjit layer, made by the caller's create call, destroyed with it.
class QjitLinear final : public Linear {
public:
    QjitLinear(SharedContext context, qjit_linear* layer, int64_t n, int64_t k)
        : context_(std::move(context)), layer_(layer), n_(n), k_(k) {}
    ~QjitLinear() override { qjit_linear_destroy(layer_); }
    QjitLinear(const QjitLinear&) = delete;
    QjitLinear& operator=(const QjitLinear&) = delete;

    void forward(const float* x, int64_t m, float* y) const override {
        check_qjit(qjit_linear_forward(layer_, x, m, y), "qjit_linear_forward");
    }
    int64_t in_features() const override { return k_; }
    int64_t out_features() const override { return n_; }
    int64_t weight_bytes() const override { return info().weight_bytes; }
    int64_t stored_bytes() const override { return info().stored_bytes; }
    int64_t low_rank_bytes() const override { return info().low_rank_bytes; }
    std::string describe() const override {
        const char* text = nullptr;
        check_qjit(qjit_linear_describe(layer_, &text), "qjit_linear_describe");
        return text;
    }
    bool qjit_info(qjit_linear_info* out) const override {
        *out = info();
        return true;
    }
    qjit_linear* qjit_layer() const override { return layer_; }
    qjit_context* qjit_layer_context() const override { return context_.get(); }

private:
    qjit_linear_info info() const {
        qjit_linear_info info{};
        check_qjit(qjit_linear_get_info(layer_, &info), "qjit_linear_get_info");
        return info;
    }

    SharedContext context_;  // declared first: outlives layer_
    qjit_linear* layer_ = nullptr;
    int64_t n_, k_;
};

}  // namespace

void forward_shared_input(std::initializer_list<const Linear*> linears, const float* x, int64_t m,
                          std::initializer_list<float*> ys) {
    constexpr size_t kMost = 4;
    qjit_linear* layers[kMost] = {};
    size_t count = 0;
    const qjit_context* context = (*linears.begin())->qjit_layer_context();
    for (const Linear* linear : linears) {
        if (count == kMost || !linear->qjit_layer() || linear->qjit_layer_context() != context) {
            count = 0;
            break;
        }
        layers[count++] = linear->qjit_layer();
    }
    if (count == 0 || count != ys.size()) {
        auto y = ys.begin();
        for (const Linear* linear : linears) linear->forward(x, m, *y++);
        return;
    }
    check_qjit(qjit_linear_forward_shared_input(layers, int(count), x, m, std::data(ys)),
               "qjit_linear_forward_shared_input");
}

namespace {

// Quantizes `matrix` with `config`, on `calibration` when it is not NULL.
std::unique_ptr<Linear> quantized_linear(const SharedContext& context, const qjit_quant_config& config,
                                         const LoadedMatrix& matrix, const qjit_calibration* calibration) {
    std::vector<float> scratch;
    const float* weights = matrix.dense_values(scratch).data();
    qjit_linear* layer = nullptr;
    if (calibration) {
        check_qjit(qjit_linear_create_calibrated(context.get(), &config, calibration, matrix.k(), matrix.n(), weights,
                                                 QJIT_LAYOUT_N_BY_K, &layer),
                   "qjit_linear_create_calibrated");
    } else {
        check_qjit(qjit_linear_create_from_f32(context.get(), &config, matrix.k(), matrix.n(), weights,
                                               QJIT_LAYOUT_N_BY_K, &layer),
                   "qjit_linear_create_from_f32");
    }
    return own_qjit_layer(context, layer, matrix.n(), matrix.k());
}

}  // namespace

std::unique_ptr<Linear> own_qjit_layer(SharedContext context, qjit_linear* layer, int64_t n, int64_t k) {
    return std::make_unique<QjitLinear>(std::move(context), layer, n, k);
}

DenseMaker::DenseMaker() {
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = 1;
    context_ = make_context(&options);
}

std::unique_ptr<Linear> DenseMaker::make_linear(const LoadedMatrix& matrix) {
    qjit_isa isa = QJIT_ISA_PORTABLE;
    check_qjit(qjit_context_isa(context_.get(), &isa), "qjit_context_isa");
    return std::make_unique<DenseLinear>(matrix, isa);
}

SharedContext make_context(const qjit_context_options* options) {
    qjit_context* context = nullptr;
    check_qjit(qjit_context_create(options, &context), "qjit_context_create");
    return SharedContext(context, [](qjit_context* c) { qjit_context_destroy(c); });
}

QuantizingMaker::QuantizingMaker(const qjit_quant_config& config, const qjit_context_options* options)
    : config_(config), context_(make_context(options)) {}

qjit_quant_config QuantizingMaker::config_for(const LoadedMatrix& matrix) const {
    qjit_quant_config config = config_;
    if (!ranks_.empty()) {
        const auto found = ranks_.find(&matrix);
        if (found == ranks_.end())
            throw std::runtime_error("QuantizingMaker: no rank was set for a " + std::to_string(matrix.k()) + " x " +
                                     std::to_string(matrix.n()) + " matrix");
        config.rank = found->second;
    } else if (rank_budget_ > 0) {
        check_qjit(qjit_rank_within_budget(&config_, matrix.k(), matrix.n(), rank_budget_, &config.rank),
                   "qjit_rank_within_budget");
    }
    if (!budgets_.empty()) {
        const auto found = budgets_.find(&matrix);
        if (found == budgets_.end())
            throw std::runtime_error("QuantizingMaker: no bits-per-weight budget was set for a " +
                                     std::to_string(matrix.k()) + " x " + std::to_string(matrix.n()) + " matrix");
        config.mixed_bits_per_weight = found->second;
    }
    if (config.method == QJIT_QUANT_MILO && config.rank == 0) {
        config.method = qjit_quant_method(config.milo_base);
        if (config.method == QJIT_QUANT_GPTQ) config.float_offsets = 0;
    }
    return config;
}

std::unique_ptr<Linear> QuantizingMaker::make_linear(const LoadedMatrix& matrix) {
    return quantized_linear(context_, config_for(matrix), matrix, nullptr);
}

std::unique_ptr<Linear> QuantizingMaker::make_calibrated_linear(const LoadedMatrix& matrix,
                                                            const Calibration* calibration) {
    return quantized_linear(context_, config_for(matrix), matrix, calibration ? calibration->get() : nullptr);
}

std::string QuantizingMaker::name() const { return "qjit " + describe_quant_config(config_); }

Calibration::Calibration(int64_t k) {
    qjit_calibration* calibration = nullptr;
    check_qjit(qjit_calibration_create(k, &calibration), "qjit_calibration_create");
    calibration_.reset(calibration);
}

void Calibration::add(const float* x, int64_t m) {
    check_qjit(qjit_calibration_add(calibration_.get(), x, m), "qjit_calibration_add");
}

int64_t Calibration::rows() const {
    int64_t rows = 0;
    check_qjit(qjit_calibration_rows(calibration_.get(), &rows), "qjit_calibration_rows");
    return rows;
}

qjit_quant_config make_quant_config(int bits, int group_size, bool symmetric) {
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.bits = bits;
    config.group_size = group_size;
    config.symmetric = symmetric ? 1 : 0;
    return config;
}

std::string describe_quant_config(const qjit_quant_config& config) {
    std::ostringstream out;
    const bool mixed = config.method == QJIT_QUANT_MIXED;
    if (config.method == QJIT_QUANT_GPTQ) out << "gptq ";
    if (config.method == QJIT_QUANT_HQQ) out << "hqq ";
    if (config.method == QJIT_QUANT_MILO)
        out << "milo over " << (config.milo_base == QJIT_QUANT_RTN ? "rtn " : config.milo_base == QJIT_QUANT_GPTQ ? "gptq " : "hqq ");
    if (mixed) {
        out << "mixed int2/4 ";
    } else {
        out << "int" << config.bits << ' ';
    }
    if (config.group_size == QJIT_GROUP_PER_COLUMN) {
        out << "per-column";
    } else {
        out << 'g' << config.group_size;
    }
    if (mixed && config.mixed_bits_per_weight > 0) {
        out << " within " << config.mixed_bits_per_weight << " bits per weight, outliers " << config.outlier_fraction
            << (config.second_order_scales ? " sq4" : " f16");
    } else if (mixed) {
        out << " alpha " << config.mixed_alpha << " outliers " << config.outlier_fraction
            << (config.second_order_scales ? " sq4" : " f16");
    } else {
        int offsets = 0;
        qjit_quant_config_float_offsets(&config, &offsets);
        out << (config.symmetric ? " sym" : offsets ? " offsets" : " asym")
            << (config.scale_dtype == QJIT_DTYPE_F16 ? " f16" : " f32");
    }
    if ((config.method == QJIT_QUANT_GPTQ || mixed) && config.act_order) out << " act-order";
    return out.str();
}

}  // namespace qjit_models::llama
