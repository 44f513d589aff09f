#include "models/flash_convert.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "io/gguf_file.hpp"
#include "io/gptq_checkpoint.hpp"
#include "format/gptq_import.hpp"
#include "io/neuron_file.hpp"
#include "format/reference.hpp"
#include "format/weight_format.hpp"
#include "models/fail.hpp"
#include "models/gguf_llama.hpp"
#include "models/flash_ffn_runner.hpp"
#include "models/method_model.hpp"
#include "models/tensor_names.hpp"
#include "models/token_sequences.hpp"
#include "runtime/flash/ffn_sparsity.hpp"

namespace qjit_models {

namespace {

struct Options {
    std::string gguf, gptq, out;
    int bits = 4;
    int group = 128;
    bool symmetric = false;
    bool f32_scales = false;
    bool f16 = false;
    bool split = false;
    int64_t alignment = 4096;
    double sparsity = 0;
    std::string calibration_tokens, sparsity_score = "weighted";
    int calibration_sequences = 64;
    int64_t calibration_rows = 4096;
};

// One layer's FFN as fp32: up and gate [d_model][d_ff], down [d_ff][d_model].
struct DenseFfn {
    std::vector<float> up, gate, down;
};

// A model's FFNs, read one layer at a time so that only one layer is in memory as fp32.
struct FfnSource {
    int64_t layers = 0, d_model = 0, d_ff = 0;
    std::function<DenseFfn(int64_t layer)> read;
    std::shared_ptr<const llama::Weights> model;  // GGUF: the whole model, for calibration
};

// rows x cols row-major, transposed.
std::vector<float> transposed(std::span<const float> values, int64_t rows, int64_t cols) {
    std::vector<float> t(values.size());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = values[size_t(r * cols + c)];
    return t;
}

FfnSource gguf_source(const std::string& path) {
    const std::shared_ptr<const llama::Weights> weights = llama::load_gguf_llama(qjit::GgufFile::open(path));
    if (weights->config.ffn_activation != llama::Config::FfnActivation::SwiGlu)
        fail("'", path, "': its FFNs are GELU-gated (Gemma 3), but neuron files hold SwiGLU FFNs");
    FfnSource source;
    source.layers = int64_t(weights->layers.size());
    source.d_model = weights->config.dim;
    source.d_ff = weights->config.hidden_dim;
    source.model = weights;
    source.read = [weights](int64_t layer) {
        // The model's matrices are [out][in]: w1 (gate) and w3 (up) [d_ff][d_model], w2 [d_model][d_ff].
        const llama::LayerWeights& l = weights->layers[size_t(layer)];
        const auto dense = [](const llama::LoadedMatrix& m) {
            std::vector<float> scratch;
            return transposed(m.dense_values(scratch), m.n(), m.k());
        };
        return DenseFfn{dense(l.w3), dense(l.w1), dense(l.w2)};
    };
    return source;
}

FfnSource gptq_source(const std::string& directory) {
    const auto checkpoint = std::make_shared<const qjit::GptqCheckpoint>(directory);
    const auto layer_name = [](int64_t layer, BlockMatrix matrix) { return hf_block_tensor(int(layer), matrix); };
    FfnSource source;
    while (checkpoint->find(layer_name(source.layers, BlockMatrix::gate))) ++source.layers;
    if (source.layers == 0) fail("'", directory, "' has no ", layer_name(0, BlockMatrix::gate));
    const qjit::CheckpointLayer& first = *checkpoint->find(layer_name(0, BlockMatrix::gate));
    source.d_model = first.k;
    source.d_ff = first.n;
    source.read = [checkpoint, layer_name, d_model = source.d_model, d_ff = source.d_ff](int64_t layer) {
        // import_gptq gives W[k][n] (in x out): gate and up are [d_model][d_ff], down [d_ff][d_model].
        const auto dense = [&](BlockMatrix matrix, int64_t k, int64_t n) {
            const std::string name = layer_name(layer, matrix);
            const qjit::CheckpointLayer* found = checkpoint->find(name);
            if (!found) fail("'", checkpoint->directory(), "' has no ", name);
            if (found->k != k || found->n != n)
                fail(name, " is ", found->k, " x ", found->n, "; expected ", k, " x ", n);
            const qjit::CheckpointTensors tensors = checkpoint->tensors(*found);
            return qjit::dequantize(qjit::import_gptq(k, n, tensors.view));
        };
        return DenseFfn{dense(BlockMatrix::up, d_model, d_ff), dense(BlockMatrix::gate, d_model, d_ff),
                        dense(BlockMatrix::down, d_ff, d_model)};
    };
    return source;
}

// Each layer's FFN inputs on the calibration tokens, from the model run densely (qjit's exact import).
std::vector<std::vector<float>> calibration_inputs(const Options& o, const FfnSource& source) {
    if (!source.model) fail("--sparsity needs the whole model (--gguf) to run its calibration tokens");
    TokenSequences sequences = read_token_sequences(o.calibration_tokens);
    if (o.calibration_sequences > 0 && sequences.size() > size_t(o.calibration_sequences))
        sequences.resize(size_t(o.calibration_sequences));
    check_tokens_in_vocabulary(sequences, source.model->config.vocab_size, "--calibration-tokens");
    qjit_context_options context;
    qjit_context_options_init(&context);
    const llama::MethodModel built = llama::build_method_model(source.model, {}, context, nullptr, false);
    return llama::capture_ffn_inputs(*built.model, sequences, o.calibration_rows);
}

int run(const Options& o) {
    const FfnSource source = o.gguf.empty() ? gptq_source(o.gptq) : gguf_source(o.gguf);
    qjit::NeuronFileHeader header;
    header.layers = source.layers;
    header.d_model = source.d_model;
    header.d_ff = source.d_ff;
    header.activation = qjit::FfnActivation::SwiGlu;
    header.bundled = !o.split;
    header.has_sparsity = o.sparsity > 0;
    header.gate_apart = header.has_sparsity && header.bundled;  // the gates stay resident: read apart
    header.alignment = o.alignment;
    if (o.f16) {
        header.vector = qjit::f16_vector_layout(source.d_model);
    } else {
        qjit::WeightFormat format;
        format.bits = o.bits;
        format.group_size = qjit::resolve_group_size(o.group, source.d_model);
        format.symmetric = o.symmetric;
        format.scale_type = o.f32_scales ? qjit::ScaleType::F32 : qjit::ScaleType::F16;
        header.vector = qjit::quantized_vector_layout(format, source.d_model);
    }
    qjit::validate(header);
    const std::vector<std::vector<float>> inputs =
        header.has_sparsity ? calibration_inputs(o, source) : std::vector<std::vector<float>>{};
    qjit::ThreadPool pool(int(std::max(1u, std::thread::hardware_concurrency())));
    const qjit::SparsityScore score =
        o.sparsity_score == "gate" ? qjit::SparsityScore::Gate : qjit::SparsityScore::GateWeighted;
    qjit::FfnSparsity sparsity;
    sparsity.target = float(o.sparsity);
    double zeroed = 0;
    qjit::NeuronFileWriter writer(o.out, header);
    for (int64_t layer = 0; layer < source.layers; ++layer) {
        const DenseFfn ffn = source.read(layer);
        const qjit::FfnLayerWeights weights =
            qjit::quantize_ffn_layer(header, ffn.up.data(), ffn.gate.data(), ffn.down.data(), nullptr);
        if (header.has_sparsity) {
            const std::vector<float>& x = inputs[size_t(layer)];
            const qjit::LayerSparsity calibrated = qjit::calibrate_layer_sparsity(
                header, weights, x.data(), int64_t(x.size()) / header.d_model, o.sparsity, score, pool);
            qjit::append_layer(sparsity, calibrated);
            zeroed += calibrated.zeroed_fraction / double(source.layers);
        }
        writer.add_layer(weights);
    }
    if (header.has_sparsity) writer.set_sparsity(sparsity);
    writer.finish();
    std::printf("wrote %s: %lld layers, d_model %lld, d_ff %lld, %s, %s, records of %lld bytes, %lld bytes\n",
                o.out.c_str(), (long long)header.layers, (long long)header.d_model, (long long)header.d_ff,
                o.f16 ? "f16" : header.vector.format.name().c_str(),
                header.gate_apart ? "gates apart" : header.bundled ? "bundled" : "split",
                (long long)header.record_bytes(), (long long)header.file_bytes());
    if (header.has_sparsity)
        std::printf("sparsity: %s score, thresholds zero %.2f%% of the calibration's gate activations (%zu rows a layer)\n",
                    o.sparsity_score.c_str(), 100.0 * zeroed, inputs.front().size() / size_t(header.d_model));
    return 0;
}

}  // namespace

int flash_convert_program(int argc, char** argv) {
    Options o;
    CLI::App app{"qjit-flash-convert: write a Llama model's FFN layers as a neuron file (LLM in a flash). The "
                 "weights are dequantized to fp32 and quantized again per neuron (round to nearest)."};
    CLI::Option* gguf = app.add_option("--gguf", o.gguf, "a Llama GGUF model")->check(CLI::ExistingFile);
    CLI::Option* gptq = app.add_option("--gptq", o.gptq,
                                       "a GPTQ checkpoint directory (its mlp projections are dequantized, then "
                                       "requantized per neuron)")
                            ->check(CLI::ExistingDirectory);
    gguf->excludes(gptq);
    app.add_option("--out", o.out, "the neuron file to write")->required();
    app.add_option("--bits", o.bits, "weight bits: 2, 3, 4 or 8")->check(CLI::IsMember({2, 3, 4, 8}));
    app.add_option("--group", o.group, "group size along d_model: 16, 32, 64, 128, 256 or -1 (per vector)");
    app.add_flag("--sym", o.symmetric, "symmetric quantization (zero point 2^(bits-1))");
    app.add_flag("--f32-scales", o.f32_scales, "fp32 scales (default fp16)");
    app.add_flag("--f16", o.f16, "store fp16 values, not quantized ones");
    app.add_flag("--split", o.split, "one record per neuron and part (default: one per neuron, all parts)");
    app.add_option("--alignment", o.alignment, "record alignment in bytes: a power of two, 512 .. 2^20");
    CLI::Option* sparsity = app.add_option("--sparsity", o.sparsity,
                                           "calibrate per-layer thresholds on the gate activations that zero this "
                                           "share of them (0 < S < 1; needs --calibration-tokens)")
                                ->check(CLI::Range(0.0, 0.999));
    CLI::Option* calibration = app.add_option("--calibration-tokens", o.calibration_tokens,
                                              "token sequences (.seq.u32) the model runs to calibrate --sparsity")
                                   ->check(CLI::ExistingFile);
    app.add_option("--calibration-sequences", o.calibration_sequences, "the first N sequences (64; 0: all)");
    app.add_option("--calibration-rows", o.calibration_rows, "at most R rows a layer, sampled evenly (4096)")
        ->check(CLI::PositiveNumber);
    app.add_option("--sparsity-score", o.sparsity_score,
                   "gate: |silu(gate)| (CATS); weighted: scaled by each neuron's up and down (default)")
        ->check(CLI::IsMember({"gate", "weighted"}));
    sparsity->needs(calibration);
    calibration->needs(sparsity);
    CLI11_PARSE(app, argc, argv);
    if (o.gguf.empty() == o.gptq.empty()) {
        std::fprintf(stderr, "qjit-flash-convert: give --gguf or --gptq\n");
        return 2;
    }
    try {
        return run(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "qjit-flash-convert: %s\n", e.what());
        return 1;
    }
}

}  // namespace qjit_models
