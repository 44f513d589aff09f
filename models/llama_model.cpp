#include "models/llama_model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "models/llama_eval.hpp"
#include "models/fail.hpp"
#include "models/parallel_loop.hpp"
#include "qjit/qjit_ops.h"

namespace qjit_models::llama {

namespace {

// ---- building blocks of the forward pass: the library's ops (qjit/qjit_ops.h), plain loops here ----

void add_in_place(float* x, const float* delta, size_t count) {
    for (size_t i = 0; i < count; ++i) x[i] += delta[i];
}

// Adds `bias` (its size: a row's values) to each of `rows` rows; nothing when it is empty.
void add_bias(float* x, const std::vector<float>& bias, int rows) {
    for (int r = 0; r < rows; ++r) add_in_place(x + size_t(r) * bias.size(), bias.data(), bias.size());
}

void check_matrix(const LoadedMatrix& matrix, int64_t n, int64_t k, const std::string& what) {
    if (matrix.n() != n || matrix.k() != k)
        fail("weights: ", what, " (", matrix.name(), ") is ", matrix.n(), " x ", matrix.k(), " (out x in), expected ",
             n, " x ", k);
}

// The cos, sin of each pair's RoPE angle at positions from..to-1 into table ([position][head_size]),
// computed as run.c computes them.
void fill_rotations(std::vector<float>& table, float base, int head_size, int from, int to) {
    table.resize(size_t(to) * size_t(head_size));
    for (int pos = from; pos < to; ++pos) {
        float* rotation = table.data() + size_t(pos) * size_t(head_size);
        for (int i = 0; i < head_size; i += 2) {
            const float freq = 1.0f / std::pow(base, float(i) / float(head_size));
            const float angle = float(pos) * freq;
            rotation[i] = std::cos(angle);
            rotation[i + 1] = std::sin(angle);
        }
    }
}

void check_norm(const std::vector<float>& norm, int dim, const std::string& what) {
    if (norm.size() != size_t(dim)) fail("weights: ", what, " has ", norm.size(), " values, expected ", dim);
    for (float v : norm)
        if (!std::isfinite(v)) fail("weights: ", what, " holds a value that is not finite");
}

}  // namespace

// ---- config and weights ----

void Config::validate() const {
    constexpr int kLimit = 1 << 20;  // far above any model this runs; keeps the size arithmetic exact
    const std::pair<const char*, int> fields[] = {
        {"dim", dim},           {"hidden_dim", hidden_dim}, {"n_layers", n_layers},     {"n_heads", n_heads},
        {"n_kv_heads", n_kv_heads}, {"head_size", head_size}, {"vocab_size", vocab_size}, {"seq_len", seq_len}};
    for (const auto& [name, value] : fields)
        if (value < 1 || value > kLimit) fail("model config: ", name, " = ", value, " is out of range [1, ", kLimit, "]");
    if (head_size % 2 != 0) fail("model config: head_size ", head_size, " is odd (RoPE rotates pairs)");
    if (int64_t(n_heads) * head_size > kLimit) fail("model config: n_heads x head_size exceeds ", kLimit);
    if (n_kv_heads > n_heads || n_heads % n_kv_heads != 0)
        fail("model config: n_heads ", n_heads, " is not a multiple of n_kv_heads ", n_kv_heads);
    if (!(rope_base > 0.0f) || !std::isfinite(rope_base)) fail("model config: rope_base ", rope_base, " is not > 0");
    if (!(rms_eps >= 0.0f) || !std::isfinite(rms_eps)) fail("model config: rms_eps ", rms_eps, " is not >= 0");
    if (!(embedding_scale > 0.0f) || !std::isfinite(embedding_scale))
        fail("model config: embedding_scale ", embedding_scale, " is not > 0");
    if (sliding_window < 0 || swa_pattern < 0)
        fail("model config: sliding_window ", sliding_window, " or swa_pattern ", swa_pattern, " is negative");
    if (!(local_rope_base > 0.0f) || !std::isfinite(local_rope_base))
        fail("model config: local_rope_base ", local_rope_base, " is not > 0");
    if (!(attention_scale >= 0.0f) || !std::isfinite(attention_scale))
        fail("model config: attention_scale ", attention_scale, " is not >= 0");
}

void Weights::validate() const {
    config.validate();
    const Config& c = config;
    check_matrix(token_embedding, c.vocab_size, c.dim, "the token embedding");
    if (layers.size() != size_t(c.n_layers)) fail("weights: ", layers.size(), " layers, expected ", c.n_layers);
    for (size_t l = 0; l < layers.size(); ++l) {
        const LayerWeights& w = layers[l];
        const std::string layer = "layer " + std::to_string(l) + " ";
        check_norm(w.attention_norm, c.dim, layer + "attention norm");
        check_matrix(w.wq, c.q_dim(), c.dim, layer + "wq");
        check_matrix(w.wk, c.kv_dim(), c.dim, layer + "wk");
        check_matrix(w.wv, c.kv_dim(), c.dim, layer + "wv");
        check_matrix(w.wo, c.dim, c.q_dim(), layer + "wo");
        check_norm(w.ffn_norm, c.dim, layer + "FFN norm");
        check_matrix(w.w1, c.hidden_dim, c.dim, layer + "w1");
        check_matrix(w.w2, c.dim, c.hidden_dim, layer + "w2");
        check_matrix(w.w3, c.hidden_dim, c.dim, layer + "w3");
        const bool biased = !w.q_bias.empty() || !w.k_bias.empty() || !w.v_bias.empty();
        if (biased) {  // all three or none
            check_norm(w.q_bias, c.q_dim(), layer + "q bias");
            check_norm(w.k_bias, c.kv_dim(), layer + "k bias");
            check_norm(w.v_bias, c.kv_dim(), layer + "v bias");
        }
        if (!w.q_norm.empty() || !w.k_norm.empty()) {  // both or neither
            check_norm(w.q_norm, c.head_size, layer + "q norm");
            check_norm(w.k_norm, c.head_size, layer + "k norm");
        }
        if (!w.post_attention_norm.empty()) check_norm(w.post_attention_norm, c.dim, layer + "post-attention norm");
        if (!w.post_ffn_norm.empty()) check_norm(w.post_ffn_norm, c.dim, layer + "post-FFN norm");
    }
    check_norm(final_norm, c.dim, "the final norm");
    check_matrix(classifier, c.vocab_size, c.dim, "the classifier");
}

std::vector<ModelMatrix> model_matrices(const Weights& weights, bool with_classifier) {
    std::vector<ModelMatrix> matrices;
    for (const LayerWeights& w : weights.layers) {
        for (const LoadedMatrix* m : {&w.wq, &w.wk, &w.wv, &w.wo}) matrices.push_back({m, QJIT_ROLE_ATTENTION});
        for (const LoadedMatrix* m : {&w.w1, &w.w2, &w.w3}) matrices.push_back({m, QJIT_ROLE_DENSE});
    }
    if (with_classifier) matrices.push_back({&weights.classifier, QJIT_ROLE_DENSE});
    return matrices;
}

const LoadedMatrix& site_matrix(const std::vector<ModelMatrix>& matrices, InputSite site, int n_layers) {
    const size_t at = size_t(site.layer * kLayerMatrices + (site.layer == n_layers ? 0 : site.which));
    if (at >= matrices.size()) fail("site_matrix: no matrix ", site.which, " of layer ", site.layer);
    return *matrices[at].source;
}

// ---- model ----

Model::Model(std::shared_ptr<const Weights> weights, LayerMaker& maker, LayerMaker* classifier_maker, bool ffn_linears)
    : weights_(std::move(weights)), threads_(maker.context()) {
    if (!weights_) fail("Model: weights are NULL");
    if (!threads_) fail("Model: the layer maker has no qjit context for the forward's ops");
    weights_->validate();

    // model_matrices lists them in this order: each layer's wq wk wv wo w1 w2 w3, the classifier.
    const std::vector<ModelMatrix> matrices = model_matrices(*weights_, true);
    layers_.resize(size_t(config().n_layers));
    size_t next = 0;
    for (Layer& layer : layers_)
        for (auto* linear : {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w1, &layer.w2, &layer.w3}) {
            const bool ffn = linear == &layer.w1 || linear == &layer.w2 || linear == &layer.w3;
            const LoadedMatrix& matrix = *matrices[next++].source;
            if (ffn_linears || !ffn) *linear = maker.make_linear(matrix);
        }
    classifier_ = (classifier_maker ? *classifier_maker : maker).make_linear(*matrices[next].source);
    for (Layer& layer : layers_) compose_ffn(layer);
    key_cache_.resize(size_t(config().n_layers));
    value_cache_.resize(size_t(config().n_layers));
    choose_attention();
}

// The attention kernels for this model's heads and cache type, chosen (timed on a tuning database
// miss) now rather than inside the first forward.
void Model::choose_attention() {
    const qjit_attention_shape shape = config().attention_shape();
    check_qjit(qjit_attention_tune(threads_.get(), &shape, kv_type_, nullptr), "qjit_attention_tune");
}

void Model::ensure_capacity(int tokens) {
    if (tokens <= capacity_) return;
    const Config& c = config();
    const size_t t = size_t(tokens);
    x_.resize(t * size_t(c.dim));
    xb_.resize(t * size_t(c.dim));
    q_.resize(t * size_t(c.q_dim()));
    k_.resize(t * size_t(c.kv_dim()));
    v_.resize(t * size_t(c.kv_dim()));
    att_out_.resize(t * size_t(c.q_dim()));
    delta_.resize(t * size_t(c.dim));
    hb_.resize(t * size_t(c.hidden_dim));
    hb2_.resize(t * size_t(c.hidden_dim));
    capacity_ = tokens;
}

void Model::ensure_cache(int positions) {
    if (positions <= cache_positions_) return;
    const Config& c = config();
    // Grows geometrically, so a decode loop reallocates O(log n) times; never past seq_len rounded up
    // to whole key blocks (the attention reads keys a block at a time).
    constexpr int kBlock = QJIT_ATTENTION_KEY_BLOCK;
    const int most = (c.seq_len + kBlock - 1) / kBlock * kBlock;
    const int grown = std::min(most, (std::max({positions, 2 * cache_positions_, 64}) + kBlock - 1) / kBlock * kBlock);
    // Whole blocks of positions, each head's block one run (qjit_kv_cache): growing appends blocks.
    const qjit_attention_shape shape = c.attention_shape();
    const size_t bytes = qjit_kv_cache_bytes(&shape, grown, kv_type_);
    for (std::vector<std::byte>& cache : key_cache_) cache.resize(bytes);
    for (std::vector<std::byte>& cache : value_cache_) cache.resize(bytes);
    fill_rotations(rotations_, c.rope_base, c.head_size, cache_positions_, grown);
    if (c.sliding_window > 0) fill_rotations(local_rotations_, c.local_rope_base, c.head_size, cache_positions_, grown);
    cache_positions_ = grown;
}

qjit_kv_cache Model::layer_cache(int layer) {
    return {key_cache_[size_t(layer)].data(), value_cache_[size_t(layer)].data(), cache_positions_, kv_type_};
}

void Model::set_kv_type(qjit_kv_type type) {
    if (qjit_kv_element_bytes(type) == 0) fail("Model::set_kv_type: ", int(type), " is not a qjit_kv_type");
    kv_type_ = type;
    choose_attention();
    for (auto* caches : {&key_cache_, &value_cache_})
        for (std::vector<std::byte>& cache : *caches) cache = {};
    cache_positions_ = 0;
    rotations_.clear();
    local_rotations_.clear();
    reset();
}

// Causal multi-head attention of `count` queries (positions pos0..) over the cached keys and values,
// within the sliding window on a local layer.
void Model::attention(int layer, int pos0, int count) {
    const StepTimer timer(profile_, Step::Attention);
    const Config& c = config();
    const qjit_attention_shape shape = c.attention_shape();
    const qjit_kv_cache cache = layer_cache(layer);
    const int window = c.local_layer(layer) ? c.sliding_window : 0;
    check_qjit(qjit_attention_causal_window(threads_.get(), &shape, &cache, q_.data(), pos0, count, window,
                                            att_out_.data()),
               "qjit_attention_causal_window");
}

void Model::set_ffn_override(FfnOverride* ffn) {
    if (ffn != nullptr && config().ffn_activation != Config::FfnActivation::SwiGlu)
        fail("Model: an FFN override (a flash FFN) runs SwiGLU FFNs, but this model's FFNs are GELU-gated");
    ffn_override_ = ffn;
}

std::span<const float> Model::forward(std::span<const int> tokens, int pos0, Logits logits) {
    const Config& c = config();
    const int count = int(tokens.size());
    if (pos0 != cached_positions_) {
        fail("Model::forward: pos0 ", pos0, " does not follow the ", cached_positions_, " cached positions");
    }
    {
        const StepTimer timer(profile_, Step::Embed);
        embed(tokens, pos0);
    }
    for (int l = 0; l < c.n_layers; ++l) run_layer(l, pos0, count);
    const int rows = logits == Logits::Last ? 1 : count;
    run_classifier(count - rows, rows);
    cached_positions_ = pos0 + count;
    return {logits_.data(), size_t(rows) * size_t(c.vocab_size)};
}

void Model::embed(std::span<const int> tokens, int pos0) {
    const Config& c = config();
    const int count = int(tokens.size());
    if (count < 1) fail("Model::forward: no tokens");
    if (int64_t(pos0) + count > c.seq_len) {
        fail("Model::forward: positions ", pos0, "..", int64_t(pos0) + count - 1, " exceed seq_len ", c.seq_len);
    }
    for (int token : tokens) {
        if (token < 0 || token >= c.vocab_size) fail("Model::forward: token ", token, " is outside the vocabulary");
    }
    ensure_capacity(count);
    ensure_cache(pos0 + count);
    for (size_t t = 0; t < size_t(count); ++t) {
        float* row = x_.data() + t * size_t(c.dim);
        weights_->token_embedding.read_row(tokens[t], row);
        if (c.embedding_scale != 1.0f)
            for (int i = 0; i < c.dim; ++i) row[i] *= c.embedding_scale;
    }
}

bool Model::run_layer(int l, int pos0, int count) {
    const Config& c = config();
    const Layer& layer = layers_[size_t(l)];
    const LayerWeights& lw = weights_->layers[size_t(l)];
    const size_t hidden = size_t(c.hidden_dim), rows = size_t(count);
    float* k = k_.data();  // rotated, then stored in the cache with v
    float* v = v_.data();

    // attention block
    normalize(lw.attention_norm, count);
    if (capture_ == nullptr) {
        const StepTimer timer(profile_, Step::QkvProjections);
        forward_shared_input({layer.wq.get(), layer.wk.get(), layer.wv.get()}, xb_.data(), count, {q_.data(), k, v});
    } else {
        if (!run_linear(l, 0, xb_.data(), count, q_.data())) return false;
        layer.wk->forward(xb_.data(), count, k);
        layer.wv->forward(xb_.data(), count, v);
    }
    add_bias(q_.data(), lw.q_bias, count);
    add_bias(k, lw.k_bias, count);
    add_bias(v, lw.v_bias, count);
    if (!lw.q_norm.empty()) {  // per head
        rms_norm(q_.data(), lw.q_norm, count * c.n_heads, c.head_size, q_.data());
        rms_norm(k, lw.k_norm, count * c.n_kv_heads, c.head_size, k);
    }
    {
        const StepTimer timer(profile_, Step::Rope);
        const std::vector<float>& table = c.local_layer(l) ? local_rotations_ : rotations_;
        const float* rotation = table.data() + size_t(pos0) * size_t(c.head_size);
        const qjit_rope_pairs pairs =
            c.rope_pairs == Config::RopePairs::Adjacent ? QJIT_ROPE_ADJACENT : QJIT_ROPE_HALVES;
        check_qjit(qjit_rope(threads_.get(), q_.data(), count, c.q_dim(), c.head_size, rotation, pairs), "qjit_rope");
        check_qjit(qjit_rope(threads_.get(), k, count, c.kv_dim(), c.head_size, rotation, pairs), "qjit_rope");
        // The attention divides scores by sqrt(head_size); another scale goes into q.
        if (c.attention_scale != 0.0f) {
            const float factor = c.attention_scale * std::sqrt(float(c.head_size));
            for (size_t i = 0; i < rows * size_t(c.q_dim()); ++i) q_[i] *= factor;
        }
    }
    {
        const StepTimer timer(profile_, Step::KvStore);
        const qjit_attention_shape shape = c.attention_shape();
        const qjit_kv_cache cache = layer_cache(l);
        check_qjit(qjit_kv_cache_store(&shape, &cache, k, v, pos0, count), "qjit_kv_cache_store");
    }
    attention(l, pos0, count);
    {
        const StepTimer timer(profile_, Step::OutputProjection);
        if (!run_linear(l, 3, att_out_.data(), count, delta_.data())) return false;
    }
    add_block_output(lw.post_attention_norm, count);

    // feed-forward block
    normalize(lw.ffn_norm, count);
    if (!layer.w1 && ffn_override_ == nullptr)
        fail("Model: layer ", l, "'s FFN linears were not built and no FFN override is set");
    if (ffn_override_ != nullptr && capture_ == nullptr) {
        {
            const StepTimer timer(profile_, Step::Ffn);
            ffn_override_->forward(l, xb_.data(), count, delta_.data());
        }
        add_block_output(lw.post_ffn_norm, count);
        return true;
    }
    if (layer.ffn && capture_ == nullptr && ffn_threshold_ == 0) {
        {
            const StepTimer timer(profile_, Step::Ffn);
            check_qjit(qjit_ffn_forward(layer.ffn.get(), xb_.data(), count, delta_.data()), "qjit_ffn_forward");
        }
        add_block_output(lw.post_ffn_norm, count);
        return true;
    }
    // The same steps one by one: layers that are not qjit layers of one context, a GELU-gated FFN,
    // a capture that stops at w1 or w2, or a threshold on the activations. hb_ = x w1 (gate),
    // hb2_ = x w3 (up), then hb2_ = the activations.
    {
        const StepTimer timer(profile_, Step::Ffn);
        if (capture_ == nullptr) {
            forward_shared_input({layer.w1.get(), layer.w3.get()}, xb_.data(), count, {hb_.data(), hb2_.data()});
        } else {
            if (!run_linear(l, 4, xb_.data(), count, hb_.data())) return false;
            layer.w3->forward(xb_.data(), count, hb2_.data());
        }
        ffn_activation(rows * hidden);
        if (ffn_threshold_ > 0) {
            for (size_t i = 0; i < rows * hidden; ++i)
                if (std::fabs(hb2_[i]) < ffn_threshold_) {
                    hb2_[i] = 0.0f;
                    ++ffn_sparsity_.zeroed;
                }
            ffn_sparsity_.total += int64_t(rows * hidden);
        }
        if (!run_linear(l, 5, hb2_.data(), count, delta_.data())) return false;
    }
    add_block_output(lw.post_ffn_norm, count);
    return true;
}

void Model::ffn_activation(size_t count) {
    if (config().ffn_activation == Config::FfnActivation::SwiGlu)
        check_qjit(qjit_swiglu(threads_.get(), hb2_.data(), hb_.data(), int64_t(count)), "qjit_swiglu");
    else
        check_qjit(qjit_geglu(threads_.get(), hb2_.data(), hb_.data(), int64_t(count)), "qjit_geglu");
}

void Model::add_block_output(const std::vector<float>& post_norm, int count) {
    if (!post_norm.empty()) rms_norm(delta_.data(), post_norm, count, config().dim, delta_.data());
    add_delta(size_t(count) * size_t(config().dim));
}

void Model::normalize(const std::vector<float>& weight, int count) {
    rms_norm(x_.data(), weight, count, config().dim, xb_.data());
}

void Model::rms_norm(const float* x, const std::vector<float>& weight, int rows, int size, float* out) {
    const StepTimer timer(profile_, Step::Norms);
    check_qjit(qjit_rms_norm(threads_.get(), x, weight.data(), rows, size, config().rms_eps, out), "qjit_rms_norm");
}

void Model::add_delta(size_t count) {
    const StepTimer timer(profile_, Step::Residuals);
    parallel_loop(threads_.get(), int64_t(count), kParallelGrainWork, [&](int64_t begin, int64_t end) {
        add_in_place(x_.data() + begin, delta_.data() + begin, size_t(end - begin));
    });
}

bool Model::run_classifier(int first, int count) {
    const Config& c = config();
    // Sized for the rows asked for: a prompt's last row needs one row of logits, not the prompt's.
    if (logits_.size() < size_t(count) * size_t(c.vocab_size)) logits_.resize(size_t(count) * size_t(c.vocab_size));
    rms_norm(x_.data() + size_t(first) * size_t(c.dim), weights_->final_norm, count, c.dim, xb_.data());
    const StepTimer timer(profile_, Step::Classifier);
    return run_linear(c.n_layers, 0, xb_.data(), count, logits_.data());
}

std::span<const float> Model::forward_sequence(std::span<const int> tokens) {
    reset();
    return forward(tokens, 0);
}

void Model::reserve(int tokens) {
    if (tokens < 1 || tokens > config().seq_len)
        fail("Model::reserve: ", tokens, " positions are outside [1, seq_len ", config().seq_len, "]");
    ensure_capacity(tokens);
    ensure_cache(tokens);
}

std::optional<int> Model::greedy_token(std::span<const float> logits) const {
    int64_t token = 0;
    if (qjit_argmax(threads_.get(), logits.data(), 1, int64_t(logits.size()), &token) != QJIT_OK) return std::nullopt;
    return int(token);
}

std::span<const float> Model::step(int token) { return forward(std::span<const int>(&token, 1), cached_positions_); }

std::unique_ptr<Linear>& Model::linear_at(InputSite site) {
    if (site.layer == config().n_layers) return classifier_;
    if (site.layer < 0 || site.layer > config().n_layers) fail("Model: no layer ", site.layer);
    if (site.which < 0 || site.which >= kLayerMatrices) fail("Model: no matrix ", site.which);
    Layer& l = layers_[size_t(site.layer)];
    std::unique_ptr<Linear>* linears[] = {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3};
    if (!*linears[site.which])
        fail("Model: matrix ", kLayerMatrixNames[site.which], " of layer ", site.layer,
             " was not built (the model's FFNs come from an override)");
    return *linears[site.which];
}

bool Model::run_linear(int layer, int which, const float* x, int count, float* y) {
    if (capture_ && capture_->site.layer == layer && (layer == config().n_layers || capture_->site.which == which)) {
        (*capture_->sink)(x, count);
        return false;
    }
    linear_at({layer, which})->forward(x, count, y);
    return true;
}

std::vector<float> Model::embed_sequence(std::span<const int> tokens) {
    reset();
    embed(tokens, 0);
    return {x_.begin(), x_.begin() + std::ptrdiff_t(tokens.size() * size_t(config().dim))};
}

void Model::load_stream(const std::vector<float>& stream) {
    const size_t dim = size_t(config().dim);
    if (stream.empty() || stream.size() % dim != 0)
        fail("Model: a residual stream of ", stream.size(), " values is not whole rows of ", dim);
    const int count = int(stream.size() / dim);
    if (count > config().seq_len) fail("Model: a stream of ", count, " positions exceeds seq_len ", config().seq_len);
    reset();  // the cache is refilled, one layer at a time
    ensure_capacity(count);
    ensure_cache(count);
    std::copy(stream.begin(), stream.end(), x_.begin());
}

void Model::run_layer(int layer, std::vector<float>& stream) {
    if (layer < 0 || layer >= config().n_layers) fail("Model::run_layer: no layer ", layer);
    load_stream(stream);
    run_layer(layer, 0, int(stream.size() / size_t(config().dim)));
    std::copy(x_.begin(), x_.begin() + std::ptrdiff_t(stream.size()), stream.begin());
}

void Model::capture_inputs(const std::vector<float>& stream, InputSite site,
                           const std::function<void(const float* x, int64_t rows)>& sink) {
    linear_at(site);  // checks the site
    // wk and wv read wq's inputs, w3 reads w1's: the forward meets wq and w1 first.
    const int which = site.which == 1 || site.which == 2 ? 0 : site.which == 6 ? 4 : site.which;
    const Capture capture{{site.layer, which}, &sink};
    load_stream(stream);
    const int count = int(stream.size() / size_t(config().dim));
    capture_ = &capture;
    try {
        if (site.layer == config().n_layers) run_classifier(0, count);
        else run_layer(site.layer, 0, count);
    } catch (...) {
        capture_ = nullptr;
        throw;
    }
    capture_ = nullptr;
}

std::span<const float> Model::stream_logits(const std::vector<float>& stream) {
    load_stream(stream);
    const int count = int(stream.size() / size_t(config().dim));
    run_classifier(0, count);
    return {logits_.data(), size_t(count) * size_t(config().vocab_size)};
}

std::unique_ptr<Linear> Model::replace_linear(InputSite site, std::unique_ptr<Linear> linear) {
    std::unique_ptr<Linear>& slot = linear_at(site);
    if (!linear || linear->in_features() != slot->in_features() || linear->out_features() != slot->out_features())
        fail("Model::replace_linear: the new matrix's shape differs from layer ", site.layer, " matrix ", site.which,
             "'s");
    std::swap(slot, linear);
    if (site.layer < config().n_layers) compose_ffn(layers_[size_t(site.layer)]);
    return linear;
}

void Model::compose_ffn(Layer& layer) {
    layer.ffn.reset();
    // qjit_ffn's gated FFN is SwiGLU; a GELU-gated one runs its layers one by one.
    if (!layer.w1 || config().ffn_activation != Config::FfnActivation::SwiGlu) return;
    qjit_context* context = layer.w1->qjit_layer_context();
    for (const Linear* linear : {layer.w1.get(), layer.w2.get(), layer.w3.get()})
        if (!linear->qjit_layer() || linear->qjit_layer_context() != context) return;
    qjit_ffn* ffn = nullptr;
    check_qjit(qjit_ffn_create_dense(context, layer.w1->qjit_layer(), layer.w3->qjit_layer(), layer.w2->qjit_layer(),
                                     QJIT_FFN_SWIGLU, &ffn),
               "qjit_ffn_create_dense");
    layer.ffn.reset(ffn);
}

std::vector<const Linear*> Model::linears() const {
    std::vector<const Linear*> all;
    for (const Layer& layer : layers_)
        for (const auto* linear : {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w1, &layer.w2, &layer.w3})
            if (*linear) all.push_back(linear->get());
    all.push_back(classifier_.get());
    return all;
}

int64_t Model::sum_over_linears(int64_t (*count)(const Linear&)) const {
    int64_t total = 0;
    for (const Linear* linear : linears()) total += count(*linear);
    return total;
}

int64_t Model::linear_weight_bytes() const {
    return sum_over_linears([](const Linear& l) { return l.weight_bytes(); });
}

int64_t Model::linear_stored_bytes() const {
    return sum_over_linears([](const Linear& l) { return l.stored_bytes(); });
}

int64_t Model::linear_low_rank_bytes() const {
    return sum_over_linears([](const Linear& l) { return l.low_rank_bytes(); });
}

int64_t Model::linear_weight_count() const {
    return sum_over_linears([](const Linear& l) { return l.in_features() * l.out_features(); });
}

const Linear& Model::layer_linear(int layer, int which) const {
    if (layer < 0 || layer >= int(layers_.size())) fail("Model::layer_linear: no layer ", layer);
    const Layer& l = layers_[size_t(layer)];
    const std::unique_ptr<Linear>* linears[] = {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3};
    if (which < 0 || which >= kLayerMatrices) fail("Model::layer_linear: no matrix ", which);
    if (!*linears[which]) fail("Model::layer_linear: matrix ", kLayerMatrixNames[which], " of layer ", layer, " was not built");
    return **linears[which];
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double score_from_layer(Model& model, const std::vector<std::vector<float>>& streams,
                        const std::vector<std::vector<int>>& sequences, int from, int count) {
    double total = 0.0;
    int64_t tokens = 0;
    for (size_t i = 0; i < std::min(size_t(count), sequences.size()); ++i) {
        if (sequences[i].size() < 2) continue;
        std::vector<float> stream = streams[i];
        for (int layer = from; layer < model.config().n_layers; ++layer) model.run_layer(layer, stream);
        total += sequence_nll(model.stream_logits(stream), model.config().vocab_size, sequences[i]);
        tokens += int64_t(sequences[i].size()) - 1;
    }
    return tokens > 0 ? total / double(tokens) : 0.0;
}

CalibratedQuantization quantize_with_calibration(Model& model, QuantizingMaker& maker,
                                                 const std::vector<std::vector<int>>& sequences, bool classifier,
                                                 const LayerChoice* choice) {
    const Config& c = model.config();
    const std::vector<ModelMatrix> matrices = model_matrices(model.weights(), true);
    auto source_of = [&](int layer, int which) -> const LoadedMatrix& {
        return site_matrix(matrices, {layer, which}, c.n_layers);
    };
    CalibratedQuantization result;
    // Each sequence's residual stream at the input of the layer being quantized: a layer runs once
    // per group of its matrices and once more, quantized, to move the streams to the next layer.
    std::vector<std::vector<float>> streams;
    for (const std::vector<int>& tokens : sequences) streams.push_back(model.embed_sequence(tokens));
    if (choice) result.start_nll = result.end_nll = score_from_layer(model, streams, sequences, 0, choice->score_sequences);

    // Quantizes one layer's matrices (or the classifier's, layer == n_layers) group by group; with a
    // choice, puts the layers it held back when the method scores worse.
    auto quantize_layer = [&](int layer, const std::vector<std::vector<int>>& layer_groups) {
        std::vector<std::pair<int, std::unique_ptr<Linear>>> held;
        for (const std::vector<int>& which : layer_groups) {
            auto start = std::chrono::steady_clock::now();
            Calibration calibration(source_of(layer, which[0]).k());
            for (const std::vector<float>& stream : streams)
                model.capture_inputs(stream, {layer, which[0]}, [&](const float* x, int64_t m) { calibration.add(x, m); });
            result.rows = calibration.rows();
            result.calibration_seconds += seconds_since(start);
            start = std::chrono::steady_clock::now();
            for (int w : which)
                held.emplace_back(w, model.replace_linear({layer, w}, maker.make_calibrated_linear(source_of(layer, w),
                                                                                                   &calibration)));
            result.quantization_seconds += seconds_since(start);
        }
        if (!choice) return;
        const auto start = std::chrono::steady_clock::now();
        const double score = score_from_layer(model, streams, sequences, layer, choice->score_sequences);
        ++result.layers_tried;
        if (score <= result.end_nll) {
            result.end_nll = score;
            ++result.layers_kept;
        } else {
            for (auto& [w, linear] : held) model.replace_linear({layer, w}, std::move(linear));
        }
        result.calibration_seconds += seconds_since(start);
    };
    for (int layer = 0; layer < c.n_layers; ++layer) {
        quantize_layer(layer, kSequentialGroups);
        for (std::vector<float>& stream : streams) model.run_layer(layer, stream);
    }
    if (classifier) quantize_layer(c.n_layers, {{0}});
    model.reset();
    return result;
}

QjitStorage qjit_storage(const Model& model) {
    QjitStorage total;
    for (const Linear* linear : model.linears()) {
        qjit_linear_info info{};
        if (!linear->qjit_info(&info)) continue;
        total.weights += info.k * info.n;
        total.stored_bytes += info.stored_bytes;
        total.low_rank_bytes += info.low_rank_bytes;
        total.groups += (info.k + info.group_size - 1) / info.group_size;
        total.wide_groups += info.wide_groups;
        total.outliers += info.outliers;
        total.second_order_scales = total.second_order_scales || info.second_order_scales;
    }
    return total;
}

}  // namespace qjit_models::llama
