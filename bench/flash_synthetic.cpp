#include "bench/flash_synthetic.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "bench/bench_common.hpp"

namespace qjit_bench {

namespace {

constexpr int kUpRank = 16;

// Standard normal samples by Box-Muller.
class Gaussian {
public:
    explicit Gaussian(uint64_t seed) : rng_(seed) {}
    float next() {
        if (has_spare_) {
            has_spare_ = false;
            return spare_;
        }
        const double u1 = (double(rng_.next() >> 11) + 1.0) * 0x1p-53, u2 = double(rng_.next() >> 11) * 0x1p-53;
        const double radius = std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * M_PI * u2;
        spare_ = float(radius * std::sin(angle));
        has_spare_ = true;
        return float(radius * std::cos(angle));
    }

private:
    Rng rng_;
    float spare_ = 0;
    bool has_spare_ = false;
};

// z with P(N(0,1) > z) = tail, by bisection on erfc.
double upper_quantile(double tail) {
    double lo = -10, hi = 10;
    for (int i = 0; i < 80; ++i) {
        const double mid = 0.5 * (lo + hi);
        (0.5 * std::erfc(mid / std::sqrt(2.0)) > tail ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
}

bool holds_header(const std::string& path, const qjit::NeuronFileHeader& header) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return false;
    const std::vector<uint8_t> expected = qjit::encode_neuron_file_header(header);
    std::vector<uint8_t> actual(expected.size());
    const bool same = ::pread(fd, actual.data(), actual.size(), 0) == ssize_t(actual.size()) && actual == expected &&
                      ::lseek(fd, 0, SEEK_END) == header.file_bytes();
    ::close(fd);
    return same;
}

}  // namespace

SyntheticFfn make_synthetic_ffn(const SyntheticFfnSpec& spec) {
    const int64_t d_model = spec.d_model, d_ff = spec.d_ff;
    SyntheticFfn ffn{spec, std::vector<float>(size_t(d_model * d_ff)), std::vector<float>(size_t(d_ff)),
                     std::vector<float>(size_t(d_ff * d_model))};
    Gaussian gaussian(spec.seed);
    std::vector<float> l(size_t(d_model * kUpRank)), r(size_t(kUpRank * d_ff));
    for (float& v : l) v = gaussian.next();
    for (float& v : r) v = gaussian.next() / std::sqrt(float(kUpRank));
    for (int64_t k = 0; k < d_model; ++k) {
        float* row = ffn.up.data() + k * d_ff;
        for (int64_t i = 0; i < d_ff; ++i) row[i] = float(spec.sigma) * gaussian.next();
        for (int j = 0; j < kUpRank; ++j) {
            const float lv = l[size_t(k * kUpRank + j)];
            const float* rj = r.data() + j * d_ff;
            for (int64_t i = 0; i < d_ff; ++i) row[i] += lv * rj[i];
        }
    }
    std::vector<double> norm2(size_t(d_ff), 0.0);
    for (int64_t k = 0; k < d_model; ++k)
        for (int64_t i = 0; i < d_ff; ++i) norm2[size_t(i)] += double(ffn.up[size_t(k * d_ff + i)]) * ffn.up[size_t(k * d_ff + i)];
    // Log-normal activity with mean spec.activity: exp(s N - s^2 / 2) has mean 1.
    constexpr double kSpread = 0.8;
    for (int64_t i = 0; i < d_ff; ++i) {
        const double p = std::clamp(spec.activity * std::exp(kSpread * gaussian.next() - kSpread * kSpread / 2), 1e-4, 0.5);
        ffn.bias[size_t(i)] = float(-upper_quantile(p) * std::sqrt(norm2[size_t(i)]));
    }
    const float down_scale = 1.0f / std::sqrt(float(d_ff));
    for (float& v : ffn.down) v = down_scale * gaussian.next();
    return ffn;
}

namespace {

// One layer's own stream, x_t = rho x_{t-1} + sqrt(1 - rho^2) e_t.
std::vector<float> time_stream(const SyntheticFfnSpec& spec, int64_t layer, int64_t tokens, uint64_t stream) {
    Gaussian gaussian(spec.seed * 1000003 + uint64_t(layer) * 7919 + stream * 104729 + 17);
    std::vector<float> x(size_t(tokens * spec.d_model));
    const float keep = float(spec.rho), fresh = float(std::sqrt(1 - spec.rho * spec.rho));
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t k = 0; k < spec.d_model; ++k) {
            const float e = gaussian.next();
            x[size_t(t * spec.d_model + k)] = t == 0 ? e : keep * x[size_t((t - 1) * spec.d_model + k)] + fresh * e;
        }
    return x;
}

}  // namespace

std::vector<std::vector<float>> synthetic_inputs(const SyntheticFfnSpec& spec, int64_t layers, int64_t tokens,
                                                 uint64_t stream) {
    std::vector<std::vector<float>> x;
    const float keep = float(spec.layer_rho), fresh = float(std::sqrt(1 - spec.layer_rho * spec.layer_rho));
    for (int64_t l = 0; l < layers; ++l) {
        x.push_back(time_stream(spec, l, tokens, stream));
        if (l == 0) continue;
        // A sum of two independent streams of the same kind, weights squared summing to 1: one more.
        std::vector<float>& layer = x.back();
        const std::vector<float>& below = x[size_t(l - 1)];
        for (size_t i = 0; i < layer.size(); ++i) layer[i] = keep * below[i] + fresh * layer[i];
    }
    return x;
}

bool write_synthetic_file(const std::string& path, const SyntheticFfn& ffn, qjit::NeuronFileHeader header) {
    header.layers = ffn.spec.layers;
    header.d_model = ffn.spec.d_model;
    header.d_ff = ffn.spec.d_ff;
    header.activation = qjit::FfnActivation::Relu;
    header.has_bias = true;
    if (holds_header(path, header)) return false;
    const qjit::FfnLayerWeights weights =
        qjit::quantize_ffn_layer(header, ffn.up.data(), nullptr, ffn.down.data(), ffn.bias.data());
    qjit::NeuronFileWriter writer(path, header);
    for (int64_t l = 0; l < header.layers; ++l) writer.add_layer(weights);
    writer.finish();
    return true;
}

}  // namespace qjit_bench
