// The shared Llama model (models/llama_model) with GGUF weights (models/gguf_llama): the dense backend
// against run.c's loop, the GGUF loader against the llama2.c loader on the same weights, refusals of
// malformed model files by name, token sequence files, and the real SmolLM2-135M file (skipped
// without it: scripts/fetch_model.sh) against the fp32 reference of shared/smollm2.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/gguf_file.hpp"
#include "gguf_writer.hpp"
#include "llama_gguf_writer.hpp"
#include "models/gguf_import_maker.hpp"
#include "models/gguf_llama.hpp"
#include "models/gguf_vocabulary.hpp"
#include "models/packed_gguf_maker.hpp"
#include "models/llama2_checkpoint.hpp"
#include "models/llama2_tokenizer.hpp"
#include "models/llama_eval.hpp"
#include "models/llama_model.hpp"
#include "models/token_sequences.hpp"
#include "model_files.hpp"

namespace {

namespace llama = qjit_models::llama;
using qjit::test::GgufTensorSpec;
using qjit::test::GgufWriter;

const std::string kModelsDir = QJIT_SHARED_MODELS_DIR;
const std::string kSmolLM2Dir = kModelsDir + "/../smollm2/";

constexpr uint32_t kGgmlF32 = 0;

std::string float_bytes(std::span<const float> values) {
    return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)};
}

// Changes to make to a model file, to see them refused.
struct FileDamage {
    std::string architecture = "llama";
    std::string left_out;                   // a tensor not written
    std::string extra;                      // a tensor written besides the model's
    std::string reshaped;                   // a tensor written with `reshaped_dims`
    std::vector<uint64_t> reshaped_dims;
    std::string extra_key;                  // a float metadata key written besides the model's
    float extra_value = 0.0f;
};

// `weights` as a GGUF file with F32 tensors, laid out as llama.cpp's converter lays out a Llama model.
std::string llama_gguf(const llama::Weights& weights, const FileDamage& damage = {}) {
    const llama::Config& c = weights.config;
    GgufWriter writer;
    qjit::test::add_llama_metadata(writer, c, damage.architecture);
    const std::string arch = damage.architecture + ".";
    if (c.sliding_window > 0)
        writer.value(arch + "attention.sliding_window", uint32_t(c.sliding_window))
            .value(arch + "attention.sliding_window_pattern", uint32_t(c.swa_pattern))
            .value(arch + "rope.freq_base_swa", c.local_rope_base);
    if (!damage.extra_key.empty()) writer.value(damage.extra_key, damage.extra_value);
    auto add = [&](const std::string& name, std::vector<uint64_t> dims, std::span<const float> values) {
        if (name == damage.left_out) return;
        std::string data = float_bytes(values);
        if (name == damage.reshaped) {
            dims = damage.reshaped_dims;
            uint64_t count = 1;
            for (const uint64_t dim : dims) count *= dim;
            data.assign(count * sizeof(float), '\0');
        }
        writer.tensor(GgufTensorSpec{name, kGgmlF32, dims, data, std::nullopt});
    };
    auto add_matrix = [&](const std::string& name, const llama::LoadedMatrix& matrix) {
        std::vector<float> scratch;
        add(name, {uint64_t(matrix.k()), uint64_t(matrix.n())}, matrix.dense_values(scratch));
    };
    using qjit_models::BlockMatrix;
    using qjit_models::gguf_block_tensor;
    add_matrix(qjit_models::kGgufTokenEmbedding, weights.token_embedding);
    for (int l = 0; l < c.n_layers; ++l) {
        const llama::LayerWeights& w = weights.layers[size_t(l)];
        add(gguf_block_tensor(l, qjit_models::kGgufAttentionNorm), {uint64_t(c.dim)}, w.attention_norm);
        add_matrix(gguf_block_tensor(l, BlockMatrix::q), w.wq);
        add_matrix(gguf_block_tensor(l, BlockMatrix::k), w.wk);
        add_matrix(gguf_block_tensor(l, BlockMatrix::v), w.wv);
        add_matrix(gguf_block_tensor(l, BlockMatrix::o), w.wo);
        add(gguf_block_tensor(l, qjit_models::kGgufFfnNorm), {uint64_t(c.dim)}, w.ffn_norm);
        add_matrix(gguf_block_tensor(l, BlockMatrix::gate), w.w1);
        add_matrix(gguf_block_tensor(l, BlockMatrix::down), w.w2);
        add_matrix(gguf_block_tensor(l, BlockMatrix::up), w.w3);
        const std::pair<BlockMatrix, const std::vector<float>*> biases[] = {
            {BlockMatrix::q, &w.q_bias}, {BlockMatrix::k, &w.k_bias}, {BlockMatrix::v, &w.v_bias}};
        for (const auto& [m, bias] : biases)
            if (!bias->empty()) add(qjit_models::gguf_block_bias(l, m), {uint64_t(bias->size())}, *bias);
        if (!w.q_norm.empty()) add(gguf_block_tensor(l, qjit_models::kGgufQNorm), {uint64_t(c.head_size)}, w.q_norm);
        if (!w.k_norm.empty()) add(gguf_block_tensor(l, qjit_models::kGgufKNorm), {uint64_t(c.head_size)}, w.k_norm);
        if (!w.post_attention_norm.empty())
            add(gguf_block_tensor(l, qjit_models::kGgufPostAttentionNorm), {uint64_t(c.dim)}, w.post_attention_norm);
        if (!w.post_ffn_norm.empty())
            add(gguf_block_tensor(l, qjit_models::kGgufPostFfnNorm), {uint64_t(c.dim)}, w.post_ffn_norm);
    }
    add(qjit_models::kGgufOutputNorm, {uint64_t(c.dim)}, weights.final_norm);
    if (!weights.tied_classifier) add_matrix(qjit_models::kGgufClassifier, weights.classifier);
    if (!damage.extra.empty()) add(damage.extra, {uint64_t(c.dim)}, weights.final_norm);
    return writer.bytes();
}

// A GGUF file in memory and the model's weights read from it (which point into it).
struct LoadedGguf {
    std::string bytes;
    std::shared_ptr<const llama::Weights> weights;
};

LoadedGguf load(std::string bytes) {
    LoadedGguf loaded{std::move(bytes), nullptr};
    const auto file = qjit::GgufFile::parse(reinterpret_cast<const uint8_t*>(loaded.bytes.data()), loaded.bytes.size(),
                                            "tiny.gguf");
    loaded.weights = llama::load_gguf_llama(file);
    return loaded;
}

// Normal(0, 0.5) values from one seeded generator, drawn in the order asked for, as vectors, dense
// matrices and the Llama layer's weights.
class RandomWeights {
public:
    explicit RandomWeights(unsigned seed) : rng_(seed) {}

    std::vector<float> values(int64_t count) {
        std::vector<float> v(static_cast<size_t>(count));
        for (float& x : v) x = normal_(rng_);
        return v;
    }
    llama::LoadedMatrix matrix(const char* name, int64_t n, int64_t k) {
        return llama::LoadedMatrix::dense(name, n, k, values(n * k));
    }
    // The norms and the seven matrices every layer has.
    llama::LayerWeights layer(const llama::Config& c) {
        return {values(c.dim),
                matrix("wq", c.q_dim(), c.dim),
                matrix("wk", c.kv_dim(), c.dim),
                matrix("wv", c.kv_dim(), c.dim),
                matrix("wo", c.dim, c.q_dim()),
                values(c.dim),
                matrix("w1", c.hidden_dim, c.dim),
                matrix("w2", c.dim, c.hidden_dim),
                matrix("w3", c.hidden_dim, c.dim)};
    }

private:
    std::mt19937 rng_;
    std::normal_distribution<float> normal_{0.0f, 0.5f};
};

// A random model of one layer: dim 8, FFN 16, 2 heads of 4 sharing one KV head, 6 tokens.
llama::Weights tiny_weights() {
    RandomWeights random(7);
    llama::Weights w;
    llama::Config& c = w.config;
    c = {.dim = 8, .hidden_dim = 16, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .head_size = 4, .vocab_size = 6,
         .seq_len = 16, .rope_base = 10000.0f, .rms_eps = 1e-5f};
    w.token_embedding = random.matrix("embedding", c.vocab_size, c.dim);
    w.layers.push_back(random.layer(c));
    w.final_norm = random.values(c.dim);
    w.classifier = w.token_embedding;
    return w;
}

// tiny_weights() as Qwen2 (q, k and v biases) or Qwen3 (heads of 8 over a width of 8, wider than
// the width over the heads, and per-head norms of q and k), both with RoPE over the halves' pairs.
llama::Weights tiny_qwen_weights(bool qwen3) {
    llama::Weights w = tiny_weights();
    llama::Config& c = w.config;
    c.rope_pairs = llama::Config::RopePairs::Halves;
    RandomWeights random(qwen3 ? 11 : 13);
    llama::LayerWeights& layer = w.layers[0];
    if (!qwen3) {
        layer.q_bias = random.values(c.q_dim());
        layer.k_bias = random.values(c.kv_dim());
        layer.v_bias = random.values(c.kv_dim());
        return w;
    }
    c.head_size = 8;
    layer.wq = random.matrix("wq", c.q_dim(), c.dim);
    layer.wk = random.matrix("wk", c.kv_dim(), c.dim);
    layer.wv = random.matrix("wv", c.kv_dim(), c.dim);
    layer.wo = random.matrix("wo", c.dim, c.q_dim());
    layer.q_norm = random.values(c.head_size);
    layer.k_norm = random.values(c.head_size);
    return w;
}

// A random Gemma 3 model of three layers (dim 8, FFN 16, 2 heads of 8 sharing one KV head, 6
// tokens): per-head q and k norms, RoPE over the halves' pairs, the embedding times sqrt(dim), norms
// of the attention's and FFN's outputs, GELU-gated FFNs, and layers 0 and 1 local (a window of 3
// positions, RoPE base 10000), layer 2 global (base 1e6).
llama::Weights tiny_gemma_weights() {
    RandomWeights random(17);
    llama::Weights w;
    llama::Config& c = w.config;
    c = {.dim = 8, .hidden_dim = 16, .n_layers = 3, .n_heads = 2, .n_kv_heads = 1, .head_size = 8, .vocab_size = 6,
         .seq_len = 32, .rope_base = 1e6f, .rms_eps = 1e-6f, .rope_pairs = llama::Config::RopePairs::Halves,
         .embedding_scale = std::sqrt(8.0f), .ffn_activation = llama::Config::FfnActivation::GeGlu,
         .sliding_window = 3, .swa_pattern = 3, .local_rope_base = 10000.0f};
    w.token_embedding = random.matrix("embedding", c.vocab_size, c.dim);
    for (int l = 0; l < c.n_layers; ++l) {
        llama::LayerWeights& layer = w.layers.emplace_back(random.layer(c));
        layer.q_norm = random.values(c.head_size);
        layer.k_norm = random.values(c.head_size);
        layer.post_attention_norm = random.values(c.dim);
        layer.post_ffn_norm = random.values(c.dim);
    }
    w.final_norm = random.values(c.dim);
    w.classifier = w.token_embedding;
    return w;
}

// The logits of every position, written from the architectures' definitions in double precision,
// independently of the model's code: embedding (times the config's scale), then per layer RMSNorm,
// q/k/v (+ biases), per-head q/k norms, RoPE (adjacent or halves' pairs; a local layer's own base),
// causal grouped-query attention (a local layer's within its window), the output projection (its
// norm, if any), RMSNorm and the SwiGLU or GELU-gated FFN (its norm, if any), each added to the
// residual; the final norm and classifier.
std::vector<double> reference_logits(const llama::Weights& w, const std::vector<int>& tokens) {
    const llama::Config& c = w.config;
    std::vector<float> scratch;
    auto times = [&](const llama::LoadedMatrix& m, const std::vector<double>& x) {
        const std::span<const float> values = m.dense_values(scratch);
        std::vector<double> y(size_t(m.n()), 0.0);
        for (int64_t o = 0; o < m.n(); ++o)
            for (int64_t i = 0; i < m.k(); ++i) y[size_t(o)] += double(values[size_t(o * m.k() + i)]) * x[size_t(i)];
        return y;
    };
    auto rms = [&](const double* x, const std::vector<float>& weight, double* out) {
        double ss = 0.0;
        for (size_t i = 0; i < weight.size(); ++i) ss += x[i] * x[i];
        const double scale = 1.0 / std::sqrt(ss / double(weight.size()) + double(c.rms_eps));
        for (size_t i = 0; i < weight.size(); ++i) out[i] = double(weight[i]) * x[i] * scale;
    };
    auto rotate = [&](double* head, int pos, double base) {
        const int half = c.head_size / 2;
        for (int i = 0; i < half; ++i) {
            const double angle = pos * std::pow(base, -2.0 * i / c.head_size);
            const bool halves = c.rope_pairs == llama::Config::RopePairs::Halves;
            double& a = head[halves ? i : 2 * i];
            double& b = head[halves ? i + half : 2 * i + 1];
            const double a0 = a, b0 = b;
            a = a0 * std::cos(angle) - b0 * std::sin(angle);
            b = a0 * std::sin(angle) + b0 * std::cos(angle);
        }
    };
    const int hs = c.head_size;
    std::vector<std::vector<std::vector<double>>> keys(size_t(c.n_layers)), values(size_t(c.n_layers));
    std::vector<double> logits;
    for (size_t pos = 0; pos < tokens.size(); ++pos) {
        std::vector<float> row(size_t(c.dim));
        w.token_embedding.read_row(tokens[pos], row.data());
        std::vector<double> x(row.begin(), row.end()), xb(size_t(c.dim));
        for (double& v : x) v *= double(c.embedding_scale);
        for (int l = 0; l < c.n_layers; ++l) {
            const llama::LayerWeights& lw = w.layers[size_t(l)];
            const bool local = c.sliding_window > 0 && (c.swa_pattern == 0 || l % c.swa_pattern != c.swa_pattern - 1);
            const double base = local ? c.local_rope_base : c.rope_base;
            const size_t first = local && int(pos) >= c.sliding_window ? pos - size_t(c.sliding_window) + 1 : 0;
            const double scale = c.attention_scale > 0 ? c.attention_scale : 1.0 / std::sqrt(double(hs));
            rms(x.data(), lw.attention_norm, xb.data());
            std::vector<double> q = times(lw.wq, xb), k = times(lw.wk, xb), v = times(lw.wv, xb);
            for (size_t i = 0; i < lw.q_bias.size(); ++i) q[i] += lw.q_bias[i];
            for (size_t i = 0; i < lw.k_bias.size(); ++i) k[i] += lw.k_bias[i];
            for (size_t i = 0; i < lw.v_bias.size(); ++i) v[i] += lw.v_bias[i];
            for (int h = 0; h < c.n_heads; ++h) {
                if (!lw.q_norm.empty()) rms(&q[size_t(h * hs)], lw.q_norm, &q[size_t(h * hs)]);
                rotate(&q[size_t(h * hs)], int(pos), base);
            }
            for (int h = 0; h < c.n_kv_heads; ++h) {
                if (!lw.k_norm.empty()) rms(&k[size_t(h * hs)], lw.k_norm, &k[size_t(h * hs)]);
                rotate(&k[size_t(h * hs)], int(pos), base);
            }
            keys[size_t(l)].push_back(k);
            values[size_t(l)].push_back(v);
            std::vector<double> attended(size_t(c.q_dim()), 0.0);
            for (int h = 0; h < c.n_heads; ++h) {
                const int kv = h / (c.n_heads / c.n_kv_heads);
                std::vector<double> scores(pos + 1, 0.0);
                double top = -1e300, sum = 0.0;
                for (size_t s = first; s <= pos; ++s) {
                    double dot = 0.0;
                    for (int i = 0; i < hs; ++i) dot += q[size_t(h * hs + i)] * keys[size_t(l)][s][size_t(kv * hs + i)];
                    scores[s] = dot * scale;
                    top = std::max(top, scores[s]);
                }
                for (size_t s = first; s <= pos; ++s) sum += (scores[s] = std::exp(scores[s] - top));
                for (size_t s = first; s <= pos; ++s)
                    for (int i = 0; i < hs; ++i)
                        attended[size_t(h * hs + i)] += scores[s] / sum * values[size_t(l)][s][size_t(kv * hs + i)];
            }
            std::vector<double> out = times(lw.wo, attended);
            if (!lw.post_attention_norm.empty()) rms(out.data(), lw.post_attention_norm, out.data());
            for (int i = 0; i < c.dim; ++i) x[size_t(i)] += out[size_t(i)];
            rms(x.data(), lw.ffn_norm, xb.data());
            std::vector<double> gate = times(lw.w1, xb);
            const std::vector<double> up = times(lw.w3, xb);
            const bool gelu = c.ffn_activation == llama::Config::FfnActivation::GeGlu;
            const double sqrt_2_over_pi = std::sqrt(2.0 / 3.14159265358979323846);
            for (size_t i = 0; i < gate.size(); ++i) {
                const double g = gate[i];
                gate[i] = (gelu ? 0.5 * g * (1.0 + std::tanh(sqrt_2_over_pi * (g + 0.044715 * g * g * g)))
                                : g / (1.0 + std::exp(-g))) *
                          up[i];
            }
            std::vector<double> down = times(lw.w2, gate);
            if (!lw.post_ffn_norm.empty()) rms(down.data(), lw.post_ffn_norm, down.data());
            for (int i = 0; i < c.dim; ++i) x[size_t(i)] += down[size_t(i)];
        }
        rms(x.data(), w.final_norm, xb.data());
        const std::vector<double> out = times(w.classifier, xb);
        logits.insert(logits.end(), out.begin(), out.end());
    }
    return logits;
}

void expect_refused(const std::function<void()>& load_it, const std::string& needle) {
    try {
        load_it();
        ADD_FAILURE() << "accepted; expected an error naming '" << needle << "'";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what() << "\nexpected: " << needle;
    }
}

TEST(LlamaDense, BackendMatchesRunCsLoopBitForBit) {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    const int64_t n = 75, k = 37, m = 6;  // odd sizes: partial tiles of rows and outputs
    std::vector<float> w(size_t(n * k)), x(size_t(m * k));
    for (float& v : w) v = normal(rng);
    for (float& v : x) v = normal(rng);
    llama::DenseMaker dense;
    const auto linear = dense.make_linear(llama::LoadedMatrix::dense("w", n, k, w));
    std::vector<float> y(size_t(m * n));
    linear->forward(x.data(), m, y.data());
    for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) {
            float sum = 0.0f;
            for (int64_t i = 0; i < k; ++i) sum += w[size_t(j * k + i)] * x[size_t(r * k + i)];
            ASSERT_EQ(y[size_t(r * n + j)], sum) << "row " << r << " output " << j;
        }
}

// The stories260K checkpoint written as a GGUF file of F32 tensors reads back as the same model:
// every logit of a sequence equal, bit for bit.
TEST(LlamaGguf, StoriesCheckpointAsGgufGivesTheSameLogits) {
    const std::string checkpoint_path = kModelsDir + "/stories260K/stories260K.bin";
    if (!std::filesystem::exists(checkpoint_path)) GTEST_SKIP() << checkpoint_path << " is missing";
    const auto checkpoint = qjit_models::llama2::load_checkpoint(checkpoint_path);
    const LoadedGguf gguf = load(llama_gguf(*checkpoint));
    EXPECT_TRUE(gguf.weights->tied_classifier);
    EXPECT_EQ(gguf.weights->config.head_size, checkpoint->config.head_size);

    const std::vector<int> tokens = {1, 403, 407, 261, 378, 425, 280, 370, 453, 312, 268};
    llama::DenseMaker dense;
    llama::Model from_checkpoint(checkpoint, dense), from_gguf(gguf.weights, dense);
    const std::span<const float> a = from_checkpoint.forward_sequence(tokens);
    const std::vector<float> expected(a.begin(), a.end());
    const std::span<const float> b = from_gguf.forward_sequence(tokens);
    ASSERT_EQ(b.size(), expected.size());
    EXPECT_EQ(std::memcmp(b.data(), expected.data(), expected.size() * sizeof(float)), 0);
}

// The prompt benchmark times `repeats` whole-prompt forwards after its warm-up, leaves the cache
// empty, and changes nothing a later forward computes.
TEST(LlamaModel, PromptTimingLeavesTheModelAsItFoundIt) {
    const std::string checkpoint_path = kModelsDir + "/stories260K/stories260K.bin";
    if (!std::filesystem::exists(checkpoint_path)) GTEST_SKIP() << checkpoint_path << " is missing";
    const auto checkpoint = qjit_models::llama2::load_checkpoint(checkpoint_path);
    llama::DenseMaker dense;
    llama::Model model(checkpoint, dense);
    std::vector<int> tokens(100);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int(1 + (i * 13) % 500);
    const std::span<const float> before = model.forward_sequence(tokens);
    const std::vector<float> expected(before.begin(), before.end());

    const std::vector<double> seconds = llama::time_prompts(model, tokens, 3);
    ASSERT_EQ(seconds.size(), 3u);
    for (double s : seconds) EXPECT_GT(s, 0.0);
    EXPECT_EQ(model.cached_positions(), 0);
    const std::span<const float> after = model.forward(tokens, 0);
    ASSERT_EQ(after.size(), expected.size());
    EXPECT_EQ(std::memcmp(after.data(), expected.data(), expected.size() * sizeof(float)), 0);
    EXPECT_THROW(model.reserve(checkpoint->config.seq_len + 1), std::runtime_error);
}

// The loops between the layers on a context's threads, and a forward that computes the last row's
// logits only, change no logit: stories260K over 300 positions (long enough that norms, RoPE,
// attention, SwiGLU and the residual adds all split into ranges), bit for bit.
TEST(LlamaModel, ThreadsAndLastRowLogitsChangeNoLogit) {
    const std::string checkpoint_path = kModelsDir + "/stories260K/stories260K.bin";
    if (!std::filesystem::exists(checkpoint_path)) GTEST_SKIP() << checkpoint_path << " is missing";
    const auto checkpoint = qjit_models::llama2::load_checkpoint(checkpoint_path);
    std::vector<int> tokens(300);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int(1 + (i * 37) % 500);
    llama::DenseMaker dense;
    llama::Model serial(checkpoint, dense), threaded(checkpoint, dense);
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.num_threads = 2;
    qjit_context* raw = nullptr;
    ASSERT_EQ(qjit_context_create(&options, &raw), QJIT_OK) << qjit_last_error();
    threaded.share_threads(std::shared_ptr<qjit_context>(raw, qjit_context_destroy));

    const std::span<const float> a = serial.forward_sequence(tokens);
    const std::vector<float> expected(a.begin(), a.end());
    const std::span<const float> b = threaded.forward_sequence(tokens);
    ASSERT_EQ(b.size(), expected.size());
    EXPECT_EQ(std::memcmp(b.data(), expected.data(), expected.size() * sizeof(float)), 0);

    threaded.reset();
    const std::span<const float> last = threaded.forward(tokens, 0, llama::Model::Logits::Last);
    const size_t vocab = size_t(checkpoint->config.vocab_size);
    ASSERT_EQ(last.size(), vocab);
    EXPECT_EQ(std::memcmp(last.data(), expected.data() + expected.size() - vocab, vocab * sizeof(float)), 0);
}

TEST(LlamaGguf, TinyModelLoadsAndRuns) {
    const LoadedGguf gguf = load(llama_gguf(tiny_weights()));
    llama::DenseMaker dense;
    llama::Model model(gguf.weights, dense);
    const std::vector<int> tokens = {0, 5, 2, 3};
    for (const float logit : model.forward_sequence(tokens)) EXPECT_TRUE(std::isfinite(logit));
    const llama::Generation generation = llama::greedy_decode(model, tokens, 4);
    EXPECT_EQ(generation.tokens.size(), 8u);
    EXPECT_EQ(generation.step_seconds.size(), 4u);
}

// With a profile, greedy decoding adds each decode step's forward steps to it: every step the dense
// model runs is timed, and no more time than the steps took in all.
TEST(LlamaModel, StepProfileTimesTheDecodeStepsForwards) {
    const LoadedGguf gguf = load(llama_gguf(tiny_weights()));
    llama::DenseMaker dense;
    llama::Model model(gguf.weights, dense);
    llama::StepProfile profile;
    const llama::Generation generation = llama::greedy_decode(model, std::vector<int>{0, 5, 2}, 3, &profile);
    for (const llama::Step step : {llama::Step::Embed, llama::Step::Norms, llama::Step::QkvProjections,
                                   llama::Step::Rope, llama::Step::KvStore, llama::Step::Attention,
                                   llama::Step::OutputProjection, llama::Step::Residuals, llama::Step::Classifier})
        EXPECT_GT(profile.seconds[size_t(step)], 0.0) << llama::kStepNames[int(step)];
    double steps = 0;
    for (const double seconds : generation.step_seconds) steps += seconds;
    EXPECT_LE(profile.total(), steps);
    const llama::StepProfile after = profile;
    model.forward_sequence(std::vector<int>{1, 2});  // the profile is detached after decoding
    EXPECT_EQ(profile.seconds, after.seconds);
}

// An fp16 or int8 KV cache: logits within the cache's rounding of the fp32 cache's (fp16: 2^-11
// relative per key and value; int8: half a step, 1/254 of each head's largest), and a prompt and
// its tokens one by one still agree bit for bit.
TEST(LlamaModel, RoundedCachesKeepTheLogitsAndTheirPromise) {
    const LoadedGguf gguf = load(llama_gguf(tiny_weights()));
    llama::DenseMaker dense;
    llama::Model model(gguf.weights, dense);
    const std::vector<int> tokens = {0, 5, 2, 3, 4, 1};
    const std::span<const float> f32_logits = model.forward_sequence(tokens);
    const std::vector<float> f32(f32_logits.begin(), f32_logits.end());
    for (const auto& [type, bound] : {std::pair{QJIT_KV_F16, 1e-2f}, {QJIT_KV_INT8, 5e-2f}}) {
        SCOPED_TRACE(int(type));
        model.set_kv_type(type);
        EXPECT_EQ(model.kv_type(), type);
        const std::span<const float> rounded_logits = model.forward_sequence(tokens);
        const std::vector<float> rounded(rounded_logits.begin(), rounded_logits.end());
        ASSERT_EQ(rounded.size(), f32.size());
        float worst = 0, largest = 0;
        for (size_t i = 0; i < f32.size(); ++i) {
            worst = std::max(worst, std::fabs(rounded[i] - f32[i]));
            largest = std::max(largest, std::fabs(f32[i]));
        }
        EXPECT_GT(worst, 0.0f);  // the cache rounds
        EXPECT_LT(worst, bound * std::max(1.0f, largest));
        model.reset();
        const size_t vocab = size_t(gguf.weights->config.vocab_size);
        for (size_t t = 0; t < tokens.size(); ++t) {
            const std::span<const float> step = model.step(tokens[t]);
            EXPECT_EQ(std::memcmp(step.data(), rounded.data() + t * vocab, vocab * sizeof(float)), 0) << "position " << t;
        }
    }
    expect_refused([&] { model.set_kv_type(qjit_kv_type(9)); }, "not a qjit_kv_type");
}

// A model built without its FFN linears runs its FFNs through an override (a flash FFN in qjit-run):
// here one computing them with another model's linears, which gives that model's logits; without an
// override, or asked for the missing matrices, it refuses by name.
TEST(LlamaModel, FfnsFromAnOverrideNeedNoLinearsOfTheirOwn) {
    const LoadedGguf gguf = load(llama_gguf(tiny_weights()));
    llama::DenseMaker dense;
    llama::Model full(gguf.weights, dense);
    llama::Model attention_only(gguf.weights, dense, nullptr, /*ffn_linears=*/false);
    const int layers = gguf.weights->config.n_layers;
    EXPECT_EQ(attention_only.linears().size(), size_t(4 * layers + 1));
    const std::vector<int> tokens = {0, 5, 2, 3};
    expect_refused([&] { attention_only.forward_sequence(tokens); }, "no FFN override");
    expect_refused([&] { attention_only.layer_linear(0, 5); }, "w2 of layer 0 was not built");

    class FullModelsFfn final : public llama::FfnOverride {
    public:
        explicit FullModelsFfn(const llama::Model& model) : model_(model) {}
        void forward(int layer, const float* x, int count, float* y) override {
            const llama::Linear &w1 = model_.layer_linear(layer, 4), &w2 = model_.layer_linear(layer, 5),
                                &w3 = model_.layer_linear(layer, 6);
            std::vector<float> gate(size_t(count * w1.out_features())), up(gate.size());
            w1.forward(x, count, gate.data());
            w3.forward(x, count, up.data());
            for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
            w2.forward(gate.data(), count, y);
        }

    private:
        const llama::Model& model_;
    } ffn(full);
    attention_only.reset();
    attention_only.set_ffn_override(&ffn);
    const std::span<const float> expected_span = full.forward_sequence(tokens);
    const std::vector<float> expected(expected_span.begin(), expected_span.end());
    const std::span<const float> logits = attention_only.forward_sequence(tokens);
    ASSERT_EQ(logits.size(), expected.size());
    for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(logits[i], expected[i], 1e-5f) << "logit " << i;
}

// The Llama, Qwen2 and Qwen3 forwards against the reference written from their definitions: every
// logit of a 12-token sequence within 1e-4 (fp32 against double), read back from GGUF files of each
// architecture.
TEST(LlamaGguf, EachArchitectureMatchesItsReferenceForward) {
    const std::vector<int> tokens = {0, 5, 2, 3, 3, 1, 4, 0, 2, 5, 1, 3};
    const std::pair<const char*, llama::Weights> cases[] = {{"llama", tiny_weights()},
                                                            {"qwen2", tiny_qwen_weights(false)},
                                                            {"qwen3", tiny_qwen_weights(true)},
                                                            {"gemma3", tiny_gemma_weights()}};
    for (const auto& [architecture, weights] : cases) {
        SCOPED_TRACE(architecture);
        const LoadedGguf gguf = load(llama_gguf(weights, {.architecture = architecture}));
        EXPECT_EQ(gguf.weights->config.rope_pairs, weights.config.rope_pairs);
        EXPECT_EQ(gguf.weights->config.head_size, weights.config.head_size);
        EXPECT_EQ(gguf.weights->layers[0].q_bias, weights.layers[0].q_bias);
        EXPECT_EQ(gguf.weights->layers[0].k_norm, weights.layers[0].k_norm);
        EXPECT_EQ(gguf.weights->layers[0].post_ffn_norm, weights.layers[0].post_ffn_norm);
        const llama::Config& read = gguf.weights->config;
        EXPECT_EQ(read.embedding_scale, weights.config.embedding_scale);
        EXPECT_EQ(read.ffn_activation, weights.config.ffn_activation);
        EXPECT_EQ(read.sliding_window, weights.config.sliding_window);
        EXPECT_EQ(read.swa_pattern, weights.config.swa_pattern);
        EXPECT_EQ(read.local_rope_base, weights.config.local_rope_base);
        llama::DenseMaker dense;
        llama::Model model(gguf.weights, dense);
        const std::span<const float> got = model.forward_sequence(tokens);
        const std::vector<double> expected = reference_logits(weights, tokens);
        ASSERT_EQ(got.size(), expected.size());
        for (size_t i = 0; i < expected.size(); ++i)
            ASSERT_NEAR(got[i], expected[i], 1e-4 * (1.0 + std::fabs(expected[i]))) << "logit " << i;
    }
}

// Each of Gemma 3's variations against the reference with it and without it: the model follows the
// reference either way, and the variation changes the logits (so the reference holds it to
// something). Then a prompt and its tokens one by one agree bit for bit across the window.
TEST(LlamaModel, EachGemmaVariationMatchesTheReference) {
    const std::vector<int> tokens = {0, 5, 2, 3, 3, 1, 4, 0, 2, 5, 1, 3};
    const llama::Weights gemma = tiny_gemma_weights();
    using Change = std::function<void(llama::Weights&)>;
    const std::pair<const char*, Change> variants[] = {
        {"as it is", [](llama::Weights&) {}},
        {"no sliding window", [](llama::Weights& w) { w.config.sliding_window = 0; }},
        {"every layer local", [](llama::Weights& w) { w.config.swa_pattern = 0; }},
        {"one local RoPE base", [](llama::Weights& w) { w.config.local_rope_base = w.config.rope_base; }},
        {"no post-attention norms", [](llama::Weights& w) { for (auto& l : w.layers) l.post_attention_norm.clear(); }},
        {"no post-FFN norms", [](llama::Weights& w) { for (auto& l : w.layers) l.post_ffn_norm.clear(); }},
        {"an unscaled embedding", [](llama::Weights& w) { w.config.embedding_scale = 1.0f; }},
        {"SwiGLU", [](llama::Weights& w) { w.config.ffn_activation = llama::Config::FfnActivation::SwiGlu; }},
        {"an attention scale of 0.2", [](llama::Weights& w) { w.config.attention_scale = 0.2f; }},
    };
    std::vector<float> as_it_is;
    for (const auto& [name, change] : variants) {
        SCOPED_TRACE(name);
        auto weights = std::make_shared<llama::Weights>(gemma);
        change(*weights);
        llama::DenseMaker dense;
        llama::Model model(weights, dense);
        const std::span<const float> got = model.forward_sequence(tokens);
        const std::vector<double> expected = reference_logits(*weights, tokens);
        ASSERT_EQ(got.size(), expected.size());
        for (size_t i = 0; i < expected.size(); ++i)
            ASSERT_NEAR(got[i], expected[i], 1e-4 * (1.0 + std::fabs(expected[i]))) << "logit " << i;
        if (as_it_is.empty()) {
            as_it_is.assign(got.begin(), got.end());
            model.reset();
            const size_t vocab = size_t(weights->config.vocab_size);
            for (size_t t = 0; t < tokens.size(); ++t) {
                const std::span<const float> step = model.step(tokens[t]);
                EXPECT_EQ(std::memcmp(step.data(), as_it_is.data() + t * vocab, vocab * sizeof(float)), 0)
                    << "position " << t;
            }
            continue;
        }
        double largest_change = 0;
        for (size_t i = 0; i < got.size(); ++i) largest_change = std::max(largest_change, double(std::fabs(got[i] - as_it_is[i])));
        EXPECT_GT(largest_change, 1e-3);
    }
}

// A Gemma model takes no FFN override (a flash FFN is SwiGLU), and a file with soft-capping is refused.
TEST(LlamaGguf, GemmaRefusesWhatItCannotRun) {
    const LoadedGguf gguf = load(llama_gguf(tiny_gemma_weights(), {.architecture = "gemma3"}));
    llama::DenseMaker dense;
    llama::Model model(gguf.weights, dense);
    class NoFfn final : public llama::FfnOverride {
        void forward(int, const float*, int, float*) override {}
    } ffn;
    expect_refused([&] { model.set_ffn_override(&ffn); }, "this model's FFNs are GELU-gated");
    expect_refused(
        [] {
            load(llama_gguf(tiny_gemma_weights(),
                            {.architecture = "gemma3", .extra_key = "gemma3.final_logit_softcapping", .extra_value = 30}));
        },
        "gemma3.final_logit_softcapping is 30: soft-capping is not supported");
    expect_refused([] { load(llama_gguf(tiny_qwen_weights(true), {.architecture = "gemma3"})); },
                   "tensor blk.0.post_attention_norm.weight is missing");
}

TEST(LlamaGguf, MalformedModelsAreRefusedByName) {
    const llama::Weights weights = tiny_weights();
    auto with = [&](FileDamage damage) { return [&weights, damage] { load(llama_gguf(weights, damage)); }; };
    expect_refused(with({.architecture = "gpt2"}), "general.architecture is 'gpt2'; qjit-run runs 'llama', 'qwen2', 'qwen3', 'gemma3'");
    // A Qwen2 file without its biases; a Llama file with one.
    expect_refused([] { load(llama_gguf(tiny_weights(), {.architecture = "qwen2"})); }, "tensor blk.0.attn_q.bias is missing");
    expect_refused([] { load(llama_gguf(tiny_qwen_weights(false))); },
                   "tensor blk.0.attn_q.bias is not part of the llama model");
    expect_refused([] { load(llama_gguf(tiny_weights(), {.architecture = "qwen3"})); },
                   "tensor blk.0.attn_q_norm.weight is missing");
    expect_refused(with({.reshaped = "blk.0.attn_k.weight", .reshaped_dims = {8, 5}}),
                   "tensor blk.0.attn_k.weight has dims [8, 5], but the metadata implies [8, 4]");
    expect_refused(with({.reshaped = "blk.0.ffn_norm.weight", .reshaped_dims = {7}}), "tensor blk.0.ffn_norm.weight");
    expect_refused(with({.left_out = "blk.0.ffn_up.weight"}), "tensor blk.0.ffn_up.weight is missing");
    expect_refused(with({.extra = "blk.0.attn_q.bias"}), "tensor blk.0.attn_q.bias is not part of the llama model");
    expect_refused(with({.extra = "rope_freqs.weight"}), "tensor rope_freqs.weight");
}

TEST(LlamaGguf, VocabularyInvertsGpt2ByteTable) {
    // Every byte's character maps back to it; printable ASCII stands for itself, space for U+0120.
    EXPECT_EQ(qjit_models::byte_to_unicode('a'), U'a');
    EXPECT_EQ(qjit_models::byte_to_unicode(' '), char32_t(0x120));
    EXPECT_EQ(qjit_models::byte_to_unicode('\n'), char32_t(0x10A));
    EXPECT_EQ(qjit_models::byte_to_unicode(0xAD), char32_t(0x143));
}

TEST(TokenSequences, FilesAreReadAndCheckedWhole) {
    const std::string path = ::testing::TempDir() + "qjit_test_tokens.seq.u32";
    auto write = [&](const std::vector<uint32_t>& values) {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * 4));
    };
    write({2, 3, 1, 10, 11, 12, 7});
    EXPECT_EQ(qjit_models::read_token_sequences(path), (qjit_models::TokenSequences{{10, 11, 12}, {7}}));
    EXPECT_THROW(qjit_models::check_tokens_in_vocabulary({{10, 11, 12}}, 12, "test"), std::runtime_error);
    write({2, 3, 2, 10, 11, 12, 7});
    expect_refused([&] { qjit_models::read_token_sequences(path); }, "lengths add up to 5 tokens, but 4 follow");
    write({9, 1});
    expect_refused([&] { qjit_models::read_token_sequences(path); }, "declares 9 sequences");
    write({});
    expect_refused([&] { qjit_models::read_token_sequences(path); }, "empty");
    std::filesystem::remove(path);
    EXPECT_EQ(qjit_models::parse_token_list("1,2, 3"), (std::vector<int>{1, 2, 3}));
    EXPECT_THROW(qjit_models::parse_token_list("1,,2"), std::runtime_error);
    EXPECT_THROW(qjit_models::parse_token_list("1,-2"), std::runtime_error);
}

// ---- the real SmolLM2-135M file ----

class SmolLM2 : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::filesystem::exists(qjit::test::smollm2_model_path()))
            GTEST_SKIP() << qjit::test::smollm2_model_path().string() << " is absent: run scripts/fetch_model.sh";
        if (!std::filesystem::exists(kSmolLM2Dir + "eval.seq.u32"))
            GTEST_SKIP() << kSmolLM2Dir << " is missing";
        file_ = qjit::GgufFile::open(qjit::test::smollm2_model_path().string());
        sequences_ = qjit_models::read_token_sequences(kSmolLM2Dir + "eval.seq.u32");
        sequences_.resize(10);
    }
    std::shared_ptr<const qjit::GgufFile> file_;
    qjit_models::TokenSequences sequences_;
};

// Exact import with fp32 activations reproduces the independent fp32 forward of the same weights.
TEST_F(SmolLM2, ExactImportMatchesFp32Reference) {
    std::ifstream in(kSmolLM2Dir + "eval_fp32_reference.json");
    const nlohmann::json reference = nlohmann::json::parse(in);
    const std::vector<double> expected = reference.at("per_sequence_nll_sum").get<std::vector<double>>();
    ASSERT_GE(expected.size(), sequences_.size());

    const auto weights = llama::load_gguf_llama(file_);
    EXPECT_EQ(weights->config.n_layers, 30);
    EXPECT_EQ(weights->config.rope_base, 100000.0f);
    EXPECT_TRUE(weights->tied_classifier);
    qjit_context_options options;
    qjit_context_options_init(&options);
    options.activations = QJIT_ACTIVATIONS_F32;
    llama::GgufImportMaker exact(&options);
    llama::Model model(weights, exact);
    const llama::NllResult nll = llama::evaluate_nll(model, sequences_);
    ASSERT_EQ(nll.sequence_nll.size(), sequences_.size());
    for (size_t s = 0; s < sequences_.size(); ++s)
        EXPECT_NEAR(nll.sequence_nll[s], expected[s], 1e-3) << "sequence " << s;
    std::printf("SmolLM2 exact import, f32 activations, 10 sequences: mean NLL %.6f over %lld tokens\n",
                nll.mean_nll, static_cast<long long>(nll.tokens));
}

// Through a pack file: the first model imports the layers and writes the pack, the second maps
// them from it, and both compute the exact import's logits bit for bit. A pack of a model file
// that changed since (its time), or one damaged on disk, is rebuilt, never used.
TEST_F(SmolLM2, PackedModelsComputeTheExactImportsLogits) {
    const std::filesystem::path directory =
        std::filesystem::temp_directory_path() / ("qjit_smollm2_pack_" + std::to_string(::getpid()));
    std::filesystem::create_directories(directory);
    const std::string gguf = (directory / "model.gguf").string(), pack = (directory / "model.qjitpack").string();
    std::filesystem::copy_file(qjit::test::smollm2_model_path(), gguf);
    const std::vector<int> tokens(sequences_[0].begin(), sequences_[0].begin() + 40);

    const auto logits = [&](llama::LayerMaker& maker) {
        llama::Model model(llama::load_gguf_llama(qjit::GgufFile::open(gguf)), maker);
        const std::span<const float> out = model.forward_sequence(tokens);
        return std::vector<float>(out.begin(), out.end());
    };
    llama::GgufImportMaker exact;
    const std::vector<float> expected = logits(exact);
    const auto packed = [&](const char* expected_reason) {
        llama::PackedGgufMaker maker(pack, gguf);
        const std::vector<float> got = logits(maker);
        maker.finish();
        EXPECT_EQ(maker.mapped(), expected_reason == nullptr);
        if (expected_reason) EXPECT_NE(maker.rebuild_reason().find(expected_reason), std::string::npos) << maker.rebuild_reason();
        EXPECT_EQ(got, expected);
    };
    packed("no pack file yet");
    packed(nullptr);
    std::filesystem::last_write_time(gguf, std::filesystem::last_write_time(gguf) + std::chrono::seconds(5));
    packed("stale");
    packed(nullptr);
    {
        std::fstream file(pack, std::ios::in | std::ios::out | std::ios::binary);
        file.seekg(4096 + 100);
        const char byte = char(file.get() ^ 0x5a);
        file.seekp(4096 + 100);
        file.put(byte);
    }
    packed("corrupt data");
    packed(nullptr);
    std::filesystem::remove_all(directory);
}

// The vocabulary turns the evaluation tokens back into the paragraphs they were made from.
TEST_F(SmolLM2, VocabularyDecodesTheEvaluationText) {
    std::ifstream in(kModelsDir + "/text/tinystories_val.txt", std::ios::binary);
    const std::vector<std::string> paragraphs =
        qjit_models::llama2::split_paragraphs({std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()});
    ASSERT_GE(paragraphs.size(), sequences_.size());
    const qjit_models::GgufVocabulary vocabulary(*file_);
    for (size_t s = 0; s < sequences_.size(); ++s) EXPECT_EQ(vocabulary.decode(sequences_[s]), paragraphs[s]);
    EXPECT_EQ(vocabulary.bos(), 1);
    EXPECT_EQ(vocabulary.piece(1), "");  // <|im_start|>, a control token
}

}  // namespace
