#include "llama2_model.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace llama2 {

static_assert(std::endian::native == std::endian::little, "the checkpoint files are little-endian");

namespace {

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
    std::ostringstream message;
    (message << ... << parts);
    throw std::runtime_error(message.str());
}

std::vector<char> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) fail("cannot open '", path, "'");
    const std::streamoff size = in.tellg();
    if (size < 0) fail("cannot determine the size of '", path, "'");
    std::vector<char> bytes(static_cast<size_t>(size));
    in.seekg(0);
    if (!in.read(bytes.data(), size)) fail("cannot read '", path, "'");
    return bytes;
}

template <typename T>
std::vector<T> read_array_file(const std::string& path) {
    const std::vector<char> bytes = read_file(path);
    if (bytes.size() % sizeof(T) != 0) {
        fail("'", path, "' is ", bytes.size(), " bytes, not a whole number of ", sizeof(T), "-byte values");
    }
    std::vector<T> values(bytes.size() / sizeof(T));
    std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
}

void check_qjit(qjit_status status, const char* call) {
    if (status != QJIT_OK) {
        fail(call, " failed: ", qjit_status_string(status), ": ", qjit_last_error());
    }
}

// ---- building blocks of the forward pass (run.c semantics, fp32 arithmetic) ----

// out[t] = weight * x[t] / rms(x[t]) for each of `rows` rows of `size` values.
void rmsnorm(float* out, const float* x, const float* weight, int rows, int size) {
    for (int r = 0; r < rows; ++r) {
        const float* xr = x + size_t(r) * size;
        float* outr = out + size_t(r) * size;
        float ss = 0.0f;
        for (int j = 0; j < size; ++j) ss += xr[j] * xr[j];
        ss /= float(size);
        ss += 1e-5f;
        ss = 1.0f / std::sqrt(ss);
        for (int j = 0; j < size; ++j) outr[j] = weight[j] * (ss * xr[j]);
    }
}

// Rotates the adjacent pairs (2i, 2i+1) of every head in `vec` (`size` values) for position `pos`.
void rope(float* vec, int size, int head_size, int pos) {
    for (int i = 0; i < size; i += 2) {
        const int head_dim = i % head_size;
        const float freq = 1.0f / std::pow(10000.0f, float(head_dim) / float(head_size));
        const float angle = float(pos) * freq;
        const float fcr = std::cos(angle);
        const float fci = std::sin(angle);
        const float v0 = vec[i];
        const float v1 = vec[i + 1];
        vec[i] = v0 * fcr - v1 * fci;
        vec[i + 1] = v0 * fci + v1 * fcr;
    }
}

void softmax(float* x, int size) {
    const float max_val = *std::max_element(x, x + size);
    float sum = 0.0f;
    for (int i = 0; i < size; ++i) {
        x[i] = std::exp(x[i] - max_val);
        sum += x[i];
    }
    for (int i = 0; i < size; ++i) x[i] /= sum;
}

void add_in_place(float* x, const float* delta, size_t count) {
    for (size_t i = 0; i < count; ++i) x[i] += delta[i];
}

// ---- linear layer implementations ----

class DenseLinear final : public Linear {
public:
    DenseLinear(const float* weights_n_by_k, int64_t n, int64_t k)
        : n_(n), k_(k), weights_(weights_n_by_k, weights_n_by_k + n * k) {}

    void forward(const float* x, int64_t m, float* y) const override {
        for (int64_t row = 0; row < m; ++row) {
            const float* xr = x + row * k_;
            float* yr = y + row * n_;
            for (int64_t out = 0; out < n_; ++out) {
                const float* w = weights_.data() + out * k_;
                float sum = 0.0f;
                for (int64_t in = 0; in < k_; ++in) sum += w[in] * xr[in];
                yr[out] = sum;
            }
        }
    }
    int64_t in_features() const override { return k_; }
    int64_t out_features() const override { return n_; }
    int64_t weight_bytes() const override { return n_ * k_ * int64_t(sizeof(float)); }
    int64_t stored_bytes() const override { return weight_bytes(); }
    std::string describe() const override { return "fp32 dense loops"; }

private:
    int64_t n_, k_;
    std::vector<float> weights_;
};

class QjitLinear final : public Linear {
public:
    // calibration NULL: qjit_linear_create_from_f32.
    QjitLinear(std::shared_ptr<qjit_context> context, const qjit_quant_config& config, const float* weights_n_by_k,
               int64_t n, int64_t k, const qjit_calibration* calibration = nullptr)
        : context_(std::move(context)), n_(n), k_(k) {
        if (calibration) {
            check_qjit(qjit_linear_create_calibrated(context_.get(), &config, calibration, k, n, weights_n_by_k,
                                                     QJIT_LAYOUT_N_BY_K, &layer_),
                       "qjit_linear_create_calibrated");
        } else {
            check_qjit(qjit_linear_create_from_f32(context_.get(), &config, k, n, weights_n_by_k, QJIT_LAYOUT_N_BY_K,
                                                   &layer_),
                       "qjit_linear_create_from_f32");
        }
    }
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

private:
    qjit_linear_info info() const {
        qjit_linear_info info{};
        check_qjit(qjit_linear_get_info(layer_, &info), "qjit_linear_get_info");
        return info;
    }

    std::shared_ptr<qjit_context> context_;  // declared first: outlives layer_
    qjit_linear* layer_ = nullptr;
    int64_t n_, k_;
};

}  // namespace

// ---- checkpoint ----

Checkpoint load_checkpoint(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) fail("cannot open checkpoint '", path, "'");
    const int64_t file_size = in.tellg();
    in.seekg(0);

    int32_t header[7];
    if (file_size < int64_t(sizeof header) || !in.read(reinterpret_cast<char*>(header), sizeof header)) {
        fail("checkpoint '", path, "' is ", file_size, " bytes, too short for the 28-byte header");
    }
    Checkpoint ck;
    Config& c = ck.config;
    c.dim = header[0];
    c.hidden_dim = header[1];
    c.n_layers = header[2];
    c.n_heads = header[3];
    c.n_kv_heads = header[4];
    c.vocab_size = header[5];
    c.seq_len = header[6];
    // A negative vocab_size marks a separate classifier matrix after the RoPE tables.
    ck.shared_classifier = c.vocab_size > 0;
    if (c.vocab_size < 0 && c.vocab_size != INT32_MIN) c.vocab_size = -c.vocab_size;

    constexpr int kLimit = 1 << 20;  // far above any llama2.c model; keeps the size arithmetic exact
    const std::pair<const char*, int> fields[] = {
        {"dim", c.dim},         {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers},
        {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"vocab_size", c.vocab_size},
        {"seq_len", c.seq_len}};
    for (const auto& [name, value] : fields) {
        if (value < 1 || value > kLimit) {
            fail("checkpoint '", path, "': header field ", name, " = ", value, " is out of range [1, ", kLimit, "]");
        }
    }
    if (c.dim % c.n_heads != 0 || c.head_size() % 2 != 0) {
        fail("checkpoint '", path, "': dim ", c.dim, " does not split into ", c.n_heads, " heads of an even size");
    }
    if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0) {
        fail("checkpoint '", path, "': n_heads ", c.n_heads, " is not a multiple of n_kv_heads ", c.n_kv_heads);
    }

    const int64_t dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers, vocab = c.vocab_size;
    const int64_t kv_dim = c.kv_dim(), head_size = c.head_size();
    struct Tensor {
        std::vector<float>* dest;  // NULL: read and dropped (run.c ignores the RoPE tables)
        int64_t floats;
    };
    const Tensor tensors[] = {
        {&ck.token_embedding, vocab * dim},
        {&ck.rms_att, layers * dim},
        {&ck.wq, layers * dim * dim},
        {&ck.wk, layers * kv_dim * dim},
        {&ck.wv, layers * kv_dim * dim},
        {&ck.wo, layers * dim * dim},
        {&ck.rms_ffn, layers * dim},
        {&ck.w1, layers * hidden * dim},
        {&ck.w2, layers * dim * hidden},
        {&ck.w3, layers * hidden * dim},
        {&ck.rms_final, dim},
        {nullptr, c.seq_len * head_size / 2},  // freq_cis_real
        {nullptr, c.seq_len * head_size / 2},  // freq_cis_imag
        {ck.shared_classifier ? nullptr : &ck.classifier, ck.shared_classifier ? 0 : vocab * dim},
    };
    int64_t expected = sizeof header;
    for (const Tensor& t : tensors) expected += t.floats * int64_t(sizeof(float));
    if (file_size != expected) {
        fail("checkpoint '", path, "' is ", file_size, " bytes, but its header (dim ", c.dim, ", hidden ", c.hidden_dim,
             ", layers ", c.n_layers, ", heads ", c.n_heads, "/", c.n_kv_heads, ", vocab ", c.vocab_size, ", seq_len ",
             c.seq_len, ") implies ", expected, " bytes");
    }

    std::vector<float> skipped;
    for (const Tensor& t : tensors) {
        std::vector<float>& dest = t.dest ? *t.dest : skipped;
        dest.resize(size_t(t.floats));
        if (!in.read(reinterpret_cast<char*>(dest.data()), std::streamsize(t.floats * sizeof(float)))) {
            fail("cannot read checkpoint '", path, "'");
        }
    }
    for (const Tensor& t : tensors) {
        if (!t.dest) continue;
        for (float v : *t.dest) {
            if (!std::isfinite(v)) fail("checkpoint '", path, "' holds a weight that is not finite");
        }
    }
    if (ck.shared_classifier) ck.classifier = ck.token_embedding;
    return ck;
}

// ---- backends ----

std::unique_ptr<Linear> DenseBackend::make_linear(const float* weights_n_by_k, int64_t n, int64_t k) {
    return std::make_unique<DenseLinear>(weights_n_by_k, n, k);
}

QjitBackend::QjitBackend(const qjit_quant_config& config, const qjit_context_options* options) : config_(config) {
    qjit_context* context = nullptr;
    check_qjit(qjit_context_create(options, &context), "qjit_context_create");
    context_.reset(context, [](qjit_context* c) { qjit_context_destroy(c); });
}

std::unique_ptr<Linear> QjitBackend::make_linear(const float* weights_n_by_k, int64_t n, int64_t k) {
    if (ranks_.empty()) return std::make_unique<QjitLinear>(context_, config_, weights_n_by_k, n, k);
    if (next_rank_ >= ranks_.size()) fail("QjitBackend: more matrices than the ", ranks_.size(), " ranks set");
    qjit_quant_config config = config_;
    config.rank = ranks_[next_rank_++];
    if (config.rank == 0) config.method = QJIT_QUANT_HQQ;
    return std::make_unique<QjitLinear>(context_, config, weights_n_by_k, n, k);
}

std::unique_ptr<Linear> QjitBackend::make_calibrated_linear(const float* weights_n_by_k, int64_t n, int64_t k,
                                                            const Calibration* calibration) {
    return std::make_unique<QjitLinear>(context_, config_, weights_n_by_k, n, k,
                                        calibration ? calibration->get() : nullptr);
}

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

void QjitBackend::set_ranks(std::vector<int> ranks) {
    ranks_ = std::move(ranks);
    next_rank_ = 0;
}

std::vector<MatrixView> model_matrices(const Checkpoint& ck, bool with_classifier) {
    const Config& c = ck.config;
    const int64_t dim = c.dim, kv_dim = c.kv_dim(), hidden = c.hidden_dim;
    std::vector<MatrixView> views;
    for (int64_t l = 0; l < c.n_layers; ++l) {
        views.push_back({ck.wq.data() + l * dim * dim, dim, dim, QJIT_ROLE_ATTENTION});
        views.push_back({ck.wk.data() + l * kv_dim * dim, kv_dim, dim, QJIT_ROLE_ATTENTION});
        views.push_back({ck.wv.data() + l * kv_dim * dim, kv_dim, dim, QJIT_ROLE_ATTENTION});
        views.push_back({ck.wo.data() + l * dim * dim, dim, dim, QJIT_ROLE_ATTENTION});
        views.push_back({ck.w1.data() + l * hidden * dim, hidden, dim, QJIT_ROLE_DENSE});
        views.push_back({ck.w2.data() + l * dim * hidden, dim, hidden, QJIT_ROLE_DENSE});
        views.push_back({ck.w3.data() + l * hidden * dim, hidden, dim, QJIT_ROLE_DENSE});
    }
    if (with_classifier) views.push_back({ck.classifier.data(), c.vocab_size, dim, QJIT_ROLE_DENSE});
    return views;
}

std::string QjitBackend::name() const { return "qjit " + describe_quant_config(config_); }

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
    if (mixed) {
        out << " alpha " << config.mixed_alpha << " outliers " << config.outlier_fraction
            << (config.second_order_scales ? " sq4" : " f16");
    } else {
        out << (config.symmetric ? " sym" : " asym") << (config.scale_dtype == QJIT_DTYPE_F16 ? " f16" : " f32");
    }
    if ((config.method == QJIT_QUANT_GPTQ || mixed) && config.act_order) out << " act-order";
    return out.str();
}

// ---- model ----

Model::Model(std::shared_ptr<const Checkpoint> checkpoint, LinearBackend& backend, LinearBackend* classifier_backend)
    : checkpoint_(std::move(checkpoint)) {
    if (!checkpoint_) fail("Model: checkpoint is NULL");
    const Checkpoint& ck = *checkpoint_;
    const Config& c = ck.config;
    const int64_t kv_dim = c.kv_dim();

    // model_matrices lists them in this order: each layer's wq wk wv wo w1 w2 w3, the classifier.
    const std::vector<MatrixView> matrices = model_matrices(ck, true);
    auto make = [&](LinearBackend& with, size_t index) {
        const MatrixView& m = matrices[index];
        return with.make_linear(m.weights_n_by_k, m.n, m.k);
    };
    layers_.resize(size_t(c.n_layers));
    size_t next = 0;
    for (Layer& layer : layers_)
        for (auto* linear : {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w1, &layer.w2, &layer.w3})
            *linear = make(backend, next++);
    classifier_ = make(classifier_backend ? *classifier_backend : backend, next);

    const size_t cache_size = size_t(c.n_layers) * size_t(c.seq_len) * size_t(kv_dim);
    key_cache_.assign(cache_size, 0.0f);
    value_cache_.assign(cache_size, 0.0f);
    scores_.assign(size_t(c.seq_len), 0.0f);
}

void Model::ensure_capacity(int tokens) {
    if (tokens <= capacity_) return;
    const Config& c = config();
    const size_t t = size_t(tokens);
    x_.resize(t * size_t(c.dim));
    xb_.resize(t * size_t(c.dim));
    q_.resize(t * size_t(c.dim));
    att_out_.resize(t * size_t(c.dim));
    delta_.resize(t * size_t(c.dim));
    hb_.resize(t * size_t(c.hidden_dim));
    hb2_.resize(t * size_t(c.hidden_dim));
    logits_.resize(t * size_t(c.vocab_size));
    capacity_ = tokens;
}

// Causal multi-head attention of `count` queries (positions pos0..) over the cached keys and values.
void Model::attention(int layer, int pos0, int count) {
    const Config& c = config();
    const int head_size = c.head_size(), kv_dim = c.kv_dim();
    const int kv_mul = c.n_heads / c.n_kv_heads;  // query heads per key/value head
    const float inv_sqrt = 1.0f / std::sqrt(float(head_size));
    const float* keys = key_cache_.data() + size_t(layer) * size_t(c.seq_len) * size_t(kv_dim);
    const float* values = value_cache_.data() + size_t(layer) * size_t(c.seq_len) * size_t(kv_dim);

    for (int t = 0; t < count; ++t) {
        const int pos = pos0 + t;
        for (int h = 0; h < c.n_heads; ++h) {
            const float* q = q_.data() + size_t(t) * size_t(c.dim) + size_t(h) * size_t(head_size);
            const size_t kv_offset = size_t(h / kv_mul) * size_t(head_size);
            for (int s = 0; s <= pos; ++s) {
                const float* k = keys + size_t(s) * size_t(kv_dim) + kv_offset;
                float score = 0.0f;
                for (int i = 0; i < head_size; ++i) score += q[i] * k[i];
                scores_[size_t(s)] = score * inv_sqrt;
            }
            softmax(scores_.data(), pos + 1);
            float* out = att_out_.data() + size_t(t) * size_t(c.dim) + size_t(h) * size_t(head_size);
            std::fill(out, out + head_size, 0.0f);
            for (int s = 0; s <= pos; ++s) {
                const float* v = values + size_t(s) * size_t(kv_dim) + kv_offset;
                const float a = scores_[size_t(s)];
                for (int i = 0; i < head_size; ++i) out[i] += a * v[i];
            }
        }
    }
}

std::span<const float> Model::forward(std::span<const int> tokens, int pos0) {
    const Config& c = config();
    const Checkpoint& ck = *checkpoint_;
    const int count = int(tokens.size());
    if (count < 1) fail("Model::forward: no tokens");
    if (pos0 != cached_positions_) {
        fail("Model::forward: pos0 ", pos0, " does not follow the ", cached_positions_, " cached positions");
    }
    if (int64_t(pos0) + count > c.seq_len) {
        fail("Model::forward: positions ", pos0, "..", int64_t(pos0) + count - 1, " exceed seq_len ", c.seq_len);
    }
    for (int token : tokens) {
        if (token < 0 || token >= c.vocab_size) fail("Model::forward: token ", token, " is outside the vocabulary");
    }
    ensure_capacity(count);

    const size_t dim = size_t(c.dim), kv_dim = size_t(c.kv_dim()), hidden = size_t(c.hidden_dim);
    const size_t rows = size_t(count);
    for (size_t t = 0; t < rows; ++t) {
        const float* row = ck.token_embedding.data() + size_t(tokens[t]) * dim;
        std::copy(row, row + dim, x_.data() + t * dim);
    }

    for (int l = 0; l < c.n_layers; ++l) {
        const Layer& layer = layers_[size_t(l)];
        const size_t cache_row = (size_t(l) * size_t(c.seq_len) + size_t(pos0)) * kv_dim;
        float* k = key_cache_.data() + cache_row;  // keys and values go straight into the cache
        float* v = value_cache_.data() + cache_row;

        // attention block
        rmsnorm(xb_.data(), x_.data(), ck.rms_att.data() + size_t(l) * dim, count, c.dim);
        if (!run_linear(l, 0, xb_.data(), count, q_.data())) return {};
        layer.wk->forward(xb_.data(), count, k);
        layer.wv->forward(xb_.data(), count, v);
        for (size_t t = 0; t < rows; ++t) {
            rope(q_.data() + t * dim, c.dim, c.head_size(), pos0 + int(t));
            rope(k + t * kv_dim, c.kv_dim(), c.head_size(), pos0 + int(t));
        }
        attention(l, pos0, count);
        if (!run_linear(l, 3, att_out_.data(), count, delta_.data())) return {};
        add_in_place(x_.data(), delta_.data(), rows * dim);

        // SwiGLU feed-forward block
        rmsnorm(xb_.data(), x_.data(), ck.rms_ffn.data() + size_t(l) * dim, count, c.dim);
        if (!run_linear(l, 4, xb_.data(), count, hb_.data())) return {};
        layer.w3->forward(xb_.data(), count, hb2_.data());
        for (size_t i = 0; i < rows * hidden; ++i) {
            float gate = hb_[i];
            gate *= 1.0f / (1.0f + std::exp(-gate));
            hb_[i] = gate * hb2_[i];
        }
        if (!run_linear(l, 5, hb_.data(), count, delta_.data())) return {};
        add_in_place(x_.data(), delta_.data(), rows * dim);
    }

    rmsnorm(xb_.data(), x_.data(), ck.rms_final.data(), count, c.dim);
    if (!run_linear(c.n_layers, 0, xb_.data(), count, logits_.data())) return {};
    cached_positions_ = pos0 + count;
    return {logits_.data(), rows * size_t(c.vocab_size)};
}

std::span<const float> Model::forward_sequence(std::span<const int> tokens) {
    reset();
    return forward(tokens, 0);
}

std::span<const float> Model::step(int token) { return forward(std::span<const int>(&token, 1), cached_positions_); }

std::unique_ptr<Linear>& Model::linear_at(InputSite site) {
    if (site.layer == config().n_layers) return classifier_;
    if (site.layer < 0 || site.layer > config().n_layers) fail("Model: no layer ", site.layer);
    if (site.which < 0 || site.which >= 7) fail("Model: no matrix ", site.which);
    Layer& l = layers_[size_t(site.layer)];
    std::unique_ptr<Linear>* linears[] = {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3};
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

void Model::capture_inputs(std::span<const int> tokens, InputSite site,
                           const std::function<void(const float* x, int64_t rows)>& sink) {
    linear_at(site);  // checks the site
    // wk and wv read wq's inputs, w3 reads w1's: the forward meets wq and w1 first.
    const int which = site.which == 1 || site.which == 2 ? 0 : site.which == 6 ? 4 : site.which;
    const Capture capture{{site.layer, which}, &sink};
    capture_ = &capture;
    try {
        forward_sequence(tokens);
    } catch (...) {
        capture_ = nullptr;
        throw;
    }
    capture_ = nullptr;
    reset();  // the cache holds a partial forward
}

void Model::replace_linear(InputSite site, std::unique_ptr<Linear> linear) {
    std::unique_ptr<Linear>& slot = linear_at(site);
    if (!linear || linear->in_features() != slot->in_features() || linear->out_features() != slot->out_features())
        fail("Model::replace_linear: the new matrix's shape differs from layer ", site.layer, " matrix ", site.which,
             "'s");
    slot = std::move(linear);
}

std::vector<const Linear*> Model::linears() const {
    std::vector<const Linear*> all;
    for (const Layer& layer : layers_)
        for (const auto* linear : {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w1, &layer.w2, &layer.w3})
            all.push_back(linear->get());
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

int64_t quantize_with_calibration(Model& model, QjitBackend& backend, const std::vector<std::vector<int>>& sequences,
                                  bool classifier) {
    const Config& c = model.config();
    // The matrices of one calibration each, in the order GPTQ's true-sequential mode quantizes them.
    const std::vector<std::vector<int>> groups = {{0, 1, 2}, {3}, {4, 6}, {5}};
    const std::vector<MatrixView> matrices = model_matrices(model.checkpoint(), true);
    int64_t rows = 0;
    auto view_of = [&](int layer, int which) -> const MatrixView& {  // the classifier follows the layers'
        return matrices[size_t(layer * 7 + (layer == c.n_layers ? 0 : which))];
    };
    auto quantize_group = [&](int layer, const std::vector<int>& which) {
        Calibration calibration(view_of(layer, which[0]).k);
        for (const std::vector<int>& tokens : sequences)
            model.capture_inputs(tokens, {layer, which[0]}, [&](const float* x, int64_t m) { calibration.add(x, m); });
        rows = calibration.rows();
        for (int w : which) {
            const MatrixView& view = view_of(layer, w);
            model.replace_linear({layer, w}, backend.make_calibrated_linear(view.weights_n_by_k, view.n, view.k,
                                                                            &calibration));
        }
    };
    for (int layer = 0; layer < c.n_layers; ++layer)
        for (const std::vector<int>& which : groups) quantize_group(layer, which);
    if (classifier) quantize_group(c.n_layers, {0});
    return rows;
}

const Linear& Model::layer_linear(int layer, int which) const {
    if (layer < 0 || layer >= int(layers_.size())) fail("Model::layer_linear: no layer ", layer);
    const Layer& l = layers_[size_t(layer)];
    const std::unique_ptr<Linear>* linears[] = {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3};
    if (which < 0 || which >= 7) fail("Model::layer_linear: no matrix ", which);
    return **linears[which];
}

// ---- evaluation ----

int argmax(std::span<const float> values) {
    int best = 0;
    for (size_t i = 1; i < values.size(); ++i) {
        if (values[i] > values[size_t(best)]) best = int(i);
    }
    return best;
}

NllResult evaluate_nll(Model& model, std::span<const uint16_t> tokens) {
    const int vocab = model.config().vocab_size;
    if (tokens.empty() || tokens[0] != kBosToken) fail("evaluate_nll: the token stream must start with BOS");

    NllResult result;
    double total = 0.0;
    std::vector<int> inputs;
    size_t begin = 0;
    while (begin < tokens.size()) {
        size_t end = begin + 1;
        while (end < tokens.size() && tokens[end] != kBosToken) ++end;

        // Positions 0..len-2 predict tokens 1..len-1.
        inputs.assign(tokens.begin() + std::ptrdiff_t(begin), tokens.begin() + std::ptrdiff_t(end) - 1);
        double sequence_nll = 0.0;
        if (!inputs.empty()) {
            const std::span<const float> logits = model.forward_sequence(inputs);
            for (size_t t = 0; t < inputs.size(); ++t) {
                const float* row = logits.data() + t * size_t(vocab);
                const int target = tokens[begin + t + 1];
                if (target >= vocab) fail("evaluate_nll: token ", target, " is outside the vocabulary");
                const double max_logit = *std::max_element(row, row + vocab);
                double sum = 0.0;
                for (int i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - max_logit);
                sequence_nll += max_logit + std::log(sum) - double(row[target]);
            }
        }
        result.sequence_nll.push_back(sequence_nll);
        result.tokens += int64_t(inputs.size());
        total += sequence_nll;
        begin = end;
    }
    result.mean_nll = result.tokens > 0 ? total / double(result.tokens) : 0.0;
    return result;
}

std::vector<int> greedy_decode(Model& model, int steps) {
    if (steps < 0 || steps > model.config().seq_len) {
        fail("greedy_decode: steps ", steps, " is outside [0, seq_len ", model.config().seq_len, "]");
    }
    std::vector<int> tokens{kBosToken};
    model.reset();
    for (int i = 0; i < steps; ++i) tokens.push_back(argmax(model.step(tokens.back())));
    return tokens;
}

// ---- tokenizer ----

Tokenizer::Tokenizer(const std::string& path, int vocab_size) {
    const std::vector<char> bytes = read_file(path);
    size_t offset = 0;
    auto take = [&](void* dest, size_t size) {
        if (bytes.size() - offset < size) fail("tokenizer '", path, "' is truncated at byte ", offset);
        std::memcpy(dest, bytes.data() + offset, size);
        offset += size;
    };
    int32_t max_token_length = 0;
    take(&max_token_length, sizeof max_token_length);
    if (max_token_length < 1) fail("tokenizer '", path, "': max_token_length ", max_token_length, " is invalid");
    vocab_.resize(size_t(vocab_size));
    scores_.resize(size_t(vocab_size));
    for (size_t id = 0; id < vocab_.size(); ++id) {
        std::string& piece = vocab_[id];
        float& score = scores_[id];
        int32_t length = 0;
        take(&score, sizeof score);
        take(&length, sizeof length);
        if (length < 0 || length > max_token_length) {
            fail("tokenizer '", path, "': token length ", length, " at byte ", offset, " is outside [0, ",
                 max_token_length, "]");
        }
        piece.resize(size_t(length));
        take(piece.data(), piece.size());
        sorted_.emplace_back(piece, int(id));
    }
    std::stable_sort(sorted_.begin(), sorted_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
}

int Tokenizer::lookup(const std::string& piece) const {
    const auto it = std::lower_bound(sorted_.begin(), sorted_.end(), piece,
                                     [](const auto& entry, const std::string& key) { return entry.first < key; });
    return it != sorted_.end() && it->first == piece ? it->second : -1;
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
    std::vector<int> tokens;
    if (text.empty()) return tokens;
    const int space = lookup(" ");
    if (space < 0) fail("Tokenizer::encode: the vocabulary has no \" \" token for the dummy prefix");
    tokens.push_back(space);
    // One token per UTF-8 character (a lead byte and at most 3 continuation bytes), else its bytes.
    for (size_t at = 0; at < text.size();) {
        size_t end = at + 1;
        while (end < text.size() && end - at < 4 && (uint8_t(text[end]) & 0xC0) == 0x80) ++end;
        const int id = lookup(text.substr(at, end - at));
        if (id >= 0) {
            tokens.push_back(id);
        } else {
            for (size_t i = at; i < end; ++i) tokens.push_back(int(uint8_t(text[i])) + 3);
        }
        at = end;
    }
    // Merge the adjacent pair whose concatenation scores highest (the first of equals) until none does.
    for (;;) {
        float best_score = -1e10f;
        int best_id = -1;
        size_t best_at = 0;
        for (size_t i = 0; i + 1 < tokens.size(); ++i) {
            const int id = lookup(vocab_[size_t(tokens[i])] + vocab_[size_t(tokens[i + 1])]);
            if (id >= 0 && scores_[size_t(id)] > best_score) {
                best_score = scores_[size_t(id)];
                best_id = id;
                best_at = i;
            }
        }
        if (best_id < 0) break;
        tokens[best_at] = best_id;
        tokens.erase(tokens.begin() + std::ptrdiff_t(best_at) + 1);
    }
    return tokens;
}

std::vector<std::string> split_paragraphs(const std::string& text) {
    std::vector<std::string> paragraphs;
    auto is_space = [](char ch) { return std::isspace(uint8_t(ch)) != 0; };
    for (size_t begin = 0; begin <= text.size();) {
        size_t end = text.find("\n\n", begin);
        if (end == std::string::npos) end = text.size();
        size_t first = begin, last = end;
        while (first < last && is_space(text[first])) ++first;
        while (last > first && is_space(text[last - 1])) --last;
        if (last > first) paragraphs.push_back(text.substr(first, last - first));
        begin = end + 2;
    }
    return paragraphs;
}

std::string Tokenizer::piece(int previous, int token) const {
    if (token < 0 || token >= int(vocab_.size())) fail("Tokenizer: token ", token, " is outside the vocabulary");
    std::string text = vocab_[size_t(token)];
    if (previous == kBosToken && !text.empty() && text[0] == ' ') text.erase(0, 1);
    // Byte fallback tokens are spelled <0xXX>.
    if (text.size() == 6 && text.starts_with("<0x") && text[5] == '>' && std::isxdigit(uint8_t(text[3])) &&
        std::isxdigit(uint8_t(text[4]))) {
        text = std::string(1, char(std::stoi(text.substr(3, 2), nullptr, 16)));
    }
    // run.c's safe_printf: a lone byte that is neither printable nor whitespace is not printed.
    if (text.size() == 1 && !std::isprint(uint8_t(text[0])) && !std::isspace(uint8_t(text[0]))) return {};
    return text;
}

std::string Tokenizer::decode(std::span<const int> tokens) const {
    std::string text;
    for (size_t i = 1; i < tokens.size(); ++i) {
        if (tokens[i] == kBosToken) break;  // run.c stops generating at BOS
        text += piece(tokens[i - 1], tokens[i]);
    }
    return text;
}

// ---- file helpers ----

std::vector<uint16_t> read_u16_file(const std::string& path) { return read_array_file<uint16_t>(path); }
std::vector<int32_t> read_i32_file(const std::string& path) { return read_array_file<int32_t>(path); }
std::vector<float> read_f32_file(const std::string& path) { return read_array_file<float>(path); }

}  // namespace llama2
