// Neuron files for the flash FFN's tests: random layers written in any format and layout, the
// oracle's dense view of them, and the oracle itself (the FFN over a set of active neurons, in
// double, with a bound on what an fp32 computation of it may differ by).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/half.hpp"
#include "format/reference.hpp"
#include "io/neuron_file.hpp"
#include "faulty_storage.hpp"
#include "test_support.hpp"

namespace qjit::test {

namespace fs = std::filesystem;

// An empty folder of this process's: emptied first, since an earlier process with the same pid (a
// sanitizer run after the plain one) may have left files in it.
inline fs::path scratch_dir(const std::string& name) {
    const fs::path dir = fs::path(::testing::TempDir()) / ("qjit-flash-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

struct FfnCase {
    int bits;           // 16: fp16 vectors
    int64_t group;
    bool symmetric;
    FfnActivation activation;
    bool bundled;
    int64_t d_model, d_ff;
};

inline std::string case_name(const FfnCase& c) {
    return concat(c.bits == 16 ? std::string("f16") : concat("q", c.bits, "g", c.group, c.symmetric ? "sym" : "asym"),
                  c.activation == FfnActivation::SwiGlu ? "_swiglu" : "_relu", c.bundled ? "_bundled" : "_split", "_",
                  c.d_model, "x", c.d_ff);
}

inline NeuronFileHeader header_of(const FfnCase& c, int64_t layers) {
    NeuronFileHeader h;
    h.layers = layers;
    h.d_model = c.d_model;
    h.d_ff = c.d_ff;
    h.activation = c.activation;
    h.has_bias = c.activation == FfnActivation::Relu;
    h.bundled = c.bundled;
    h.alignment = 512;
    if (c.bits == 16) {
        h.vector = f16_vector_layout(c.d_model);
    } else {
        WeightFormat f = f16_scaled_format();
        f.bits = c.bits;
        f.group_size = c.group;
        f.symmetric = c.symmetric;
        h.vector = quantized_vector_layout(f, c.d_model);
    }
    return h;
}

// One layer as the oracle sees it: dense fp32 weights, as the file stores them.
struct DenseLayer {
    std::vector<float> up, gate, down_t, bias;  // [d_model][d_ff] each; bias [d_ff]
};

inline std::vector<float> dense_of(const NeuronFileHeader& h, const QuantizedMatrix& q, const std::vector<float>& f32) {
    if (h.vector.coding == VectorCoding::Quantized) return dequantize(q);
    std::vector<float> out(f32.size());
    for (size_t i = 0; i < f32.size(); ++i) out[i] = half_to_float(float_to_half(f32[i]));
    return out;
}

// A file of `layers` random layers written to `path`; returns the oracle's view of each.
inline std::vector<DenseLayer> write_random_file(const fs::path& path, const NeuronFileHeader& h, uint32_t seed) {
    NeuronFileWriter writer(path.string(), h);
    std::vector<DenseLayer> dense;
    for (int64_t l = 0; l < h.layers; ++l) {
        const auto up = random_floats(size_t(h.d_model * h.d_ff), seed + 10 * uint32_t(l));
        const auto gate = random_floats(size_t(h.d_model * h.d_ff), seed + 10 * uint32_t(l) + 1);
        const auto down = random_floats(size_t(h.d_ff * h.d_model), seed + 10 * uint32_t(l) + 2);
        const auto bias = random_floats(size_t(h.d_ff), seed + 10 * uint32_t(l) + 3, -0.5f, 0.5f);
        const bool gated = h.activation == FfnActivation::SwiGlu;
        const FfnLayerWeights w = quantize_ffn_layer(h, up.data(), gated ? gate.data() : nullptr, down.data(),
                                                     h.has_bias ? bias.data() : nullptr);
        writer.add_layer(w);
        DenseLayer d;
        d.up = dense_of(h, w.up, w.up_f32);
        if (gated) d.gate = dense_of(h, w.gate, w.gate_f32);
        d.down_t = dense_of(h, w.down_t, w.down_t_f32);
        if (h.has_bias) d.bias = w.bias;
        dense.push_back(std::move(d));
    }
    writer.finish();
    return dense;
}

// The oracle: y (m x d_model) over the active neurons only, in double, and a bound on the error an
// fp32 computation of it may make.
inline void oracle(const NeuronFileHeader& h, const DenseLayer& d, const std::vector<int32_t>& active, const float* x,
            int64_t m, std::vector<float>& y, std::vector<double>& bound) {
    const int64_t k = h.d_model, n = h.d_ff;
    y.assign(size_t(m * k), 0.0f);
    bound.assign(size_t(m * k), 1e-6);
    constexpr double kRelative = 2e-5;  // a few fp32 roundings over sums of a few hundred terms
    for (int64_t r = 0; r < m; ++r) {
        std::vector<double> acc(size_t(k), 0.0);
        for (int32_t i : active) {
            double u = 0, g = 0, u_abs = 0, g_abs = 0;
            for (int64_t j = 0; j < k; ++j) {
                const double xv = x[r * k + j];
                u += xv * d.up[size_t(j * n + i)];
                u_abs += std::fabs(xv * d.up[size_t(j * n + i)]);
                if (!d.gate.empty()) {
                    g += xv * d.gate[size_t(j * n + i)];
                    g_abs += std::fabs(xv * d.gate[size_t(j * n + i)]);
                }
            }
            double a, a_error;
            if (h.activation == FfnActivation::Relu) {
                const double b = d.bias.empty() ? 0.0 : d.bias[size_t(i)];
                a = std::max(0.0, u + b);
                a_error = kRelative * (u_abs + std::fabs(b));
            } else {
                const double silu = g / (1 + std::exp(-g));
                a = silu * u;
                a_error = kRelative * (std::fabs(silu) * u_abs + 1.1 * g_abs * std::fabs(u));
            }
            for (int64_t j = 0; j < k; ++j) {
                const double w = d.down_t[size_t(j * n + i)];
                acc[size_t(j)] += a * w;
                bound[size_t(r * k + j)] += (a_error + kRelative * std::fabs(a)) * std::fabs(w);
            }
        }
        for (int64_t j = 0; j < k; ++j) y[size_t(r * k + j)] = float(acc[size_t(j)]);
    }
}


// A random file of `layers` layers: its header, its bytes and the oracle's view of each layer.
struct TestFile {
    NeuronFileHeader header;
    std::string bytes;
    std::vector<DenseLayer> dense;
    std::unique_ptr<Storage> storage() const { return make_memory_storage(bytes, 512); }
};

inline TestFile test_file(const std::string& name, const FfnCase& c, int64_t layers, uint32_t seed) {
    const fs::path path = scratch_dir(name) / "ffn.qnf";
    TestFile f{header_of(c, layers), "", {}};
    f.dense = write_random_file(path, f.header, seed);
    f.bytes = read_file(path);
    return f;
}


}  // namespace qjit::test
