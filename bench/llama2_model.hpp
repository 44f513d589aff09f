// A small llama2.c ("legacy" v0 checkpoint) transformer whose linear layers are pluggable, so the same
// forward pass runs on dense fp32 weights or on qjit quantized layers. The forward pass follows
// karpathy's run.c: RMSNorm (eps 1e-5), RoPE on adjacent pairs, grouped-query attention, SwiGLU FFN,
// and a classifier that shares the token embedding.
//
// Errors (bad files, bad arguments, failing qjit calls) are reported by throwing std::runtime_error.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qjit/qjit.h"

namespace llama2 {

inline constexpr int kBosToken = 1;

struct Config {
    int dim = 0;         // width of the residual stream
    int hidden_dim = 0;  // FFN width
    int n_layers = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int vocab_size = 0;
    int seq_len = 0;  // longest sequence the model (and its KV cache) supports

    int head_size() const { return dim / n_heads; }
    int kv_dim() const { return head_size() * n_kv_heads; }
};

// The weights of a checkpoint, as stored in the file. Matrices are row-major [out][in] (N x K).
struct Checkpoint {
    Config config;
    std::vector<float> token_embedding;  // [vocab][dim]
    std::vector<float> rms_att;          // [layers][dim]
    std::vector<float> wq;               // [layers][dim][dim]
    std::vector<float> wk;               // [layers][kv_dim][dim]
    std::vector<float> wv;               // [layers][kv_dim][dim]
    std::vector<float> wo;               // [layers][dim][dim]
    std::vector<float> rms_ffn;          // [layers][dim]
    std::vector<float> w1;               // [layers][hidden][dim]  (gate)
    std::vector<float> w2;               // [layers][dim][hidden]  (down)
    std::vector<float> w3;               // [layers][hidden][dim]  (up)
    std::vector<float> rms_final;        // [dim]
    std::vector<float> classifier;       // [vocab][dim]; a copy of token_embedding when shared
    bool shared_classifier = true;
};

// Reads and validates a legacy v0 checkpoint (header values and exact file size).
Checkpoint load_checkpoint(const std::string& path);

// ---- linear layers ----

// y (m x n) = x (m x k) * W^T for a weight matrix W of n rows by k columns.
class Linear {
public:
    virtual ~Linear() = default;
    virtual void forward(const float* x, int64_t m, float* y) const = 0;
    virtual int64_t in_features() const = 0;   // k
    virtual int64_t out_features() const = 0;  // n
    virtual int64_t weight_bytes() const = 0;  // bytes one forward streams
    virtual int64_t stored_bytes() const = 0;  // bytes the format stores (qjit_linear_info.stored_bytes)
    virtual int64_t low_rank_bytes() const { return 0; }  // of those, a compensator's
    virtual std::string describe() const = 0;
    // A qjit layer's info (false for a layer that is not one).
    virtual bool qjit_info(qjit_linear_info* /*info*/) const { return false; }
};

// What a calibrated quantizer learns of a matrix's inputs: a qjit_calibration (H = sum of x^T x).
class Calibration {
public:
    explicit Calibration(int64_t k);
    void add(const float* x, int64_t m);  // m rows of K inputs
    int64_t rows() const;
    const qjit_calibration* get() const { return calibration_.get(); }

private:
    struct Deleter {
        void operator()(qjit_calibration* c) const { qjit_calibration_destroy(c); }
    };
    std::unique_ptr<qjit_calibration, Deleter> calibration_;
};

// Makes a Linear from a dense fp32 matrix stored [n][k] (the weights are copied).
class LinearBackend {
public:
    virtual ~LinearBackend() = default;
    virtual std::unique_ptr<Linear> make_linear(const float* weights_n_by_k, int64_t n, int64_t k) = 0;
    virtual std::string name() const = 0;
};

// Plain fp32 loops with fp32 accumulation, as in run.c's matmul: the baseline.
class DenseBackend final : public LinearBackend {
public:
    std::unique_ptr<Linear> make_linear(const float* weights_n_by_k, int64_t n, int64_t k) override;
    std::string name() const override { return "fp32 dense"; }
};

// One qjit layer per matrix, quantized with `config`. The backend owns a qjit context that each
// layer it makes keeps alive, so layers may outlive the backend.
class QjitBackend final : public LinearBackend {
public:
    // options may be NULL for the library defaults.
    explicit QjitBackend(const qjit_quant_config& config, const qjit_context_options* options = nullptr);
    std::unique_ptr<Linear> make_linear(const float* weights_n_by_k, int64_t n, int64_t k) override;
    // With a calibration of the matrix's inputs (qjit_linear_create_calibrated); NULL: none.
    std::unique_ptr<Linear> make_calibrated_linear(const float* weights_n_by_k, int64_t n, int64_t k,
                                                   const Calibration* calibration);
    std::string name() const override;
    const qjit_quant_config& config() const { return config_; }
    // MiLo ranks per matrix, in the order the model makes them (model_matrices): each make_linear
    // takes the next as config.rank (a rank of 0 makes that matrix HQQ alone).
    void set_ranks(std::vector<int> ranks);

private:
    qjit_quant_config config_;
    std::vector<int> ranks_;
    size_t next_rank_ = 0;
    std::shared_ptr<qjit_context> context_;
};

// A matrix the model makes a Linear of, in the order Model's constructor makes them (wq wk wv wo
// w1 w2 w3 of each layer, then the classifier).
struct MatrixView {
    const float* weights_n_by_k;
    int64_t n, k;
    qjit_matrix_role role;  // attention for wq..wo; dense for the FFN and the classifier
};
std::vector<MatrixView> model_matrices(const Checkpoint& checkpoint, bool with_classifier);

// A quantization config with qjit's defaults (f16 scales) and the given bits, group and symmetry.
qjit_quant_config make_quant_config(int bits, int group_size, bool symmetric);
std::string describe_quant_config(const qjit_quant_config& config);  // e.g. "int4 g32 asym f16"

// ---- the model ----

// Where a model's matrix reads its inputs: matrix `which` (0..6 = wq wk wv wo w1 w2 w3) of `layer`,
// or the classifier's when layer == n_layers. wq, wk and wv read the same inputs, as do w1 and w3.
struct InputSite {
    int layer = 0;
    int which = 0;
};

class Model {
public:
    // Builds every linear layer (wq, wk, wv, wo, w1, w2, w3 of each layer) with `backend` and the
    // classifier with `classifier_backend` (`backend` when NULL).
    Model(std::shared_ptr<const Checkpoint> checkpoint, LinearBackend& backend,
          LinearBackend* classifier_backend = nullptr);

    const Config& config() const { return checkpoint_->config; }
    const Checkpoint& checkpoint() const { return *checkpoint_; }

    // Runs tokens[0..T) at positions pos0..pos0+T-1, attending causally to the KV cache of positions
    // < pos0 and to each other; every linear layer is called once with m = T. Returns the T x vocab
    // logits, valid until the next call. pos0 must equal the number of positions already cached.
    std::span<const float> forward(std::span<const int> tokens, int pos0);

    // Logits for every position of a whole sequence at once (restarts the KV cache).
    std::span<const float> forward_sequence(std::span<const int> tokens);

    // Single-token step (m = 1) at the next position of the KV cache; reset() starts over.
    std::span<const float> step(int token);
    void reset() { cached_positions_ = 0; }
    int cached_positions() const { return cached_positions_; }

    // Runs a whole sequence from position 0 up to the matrix at `site` and hands its inputs (T x K,
    // row-major) to `sink` instead of running it and what follows.
    void capture_inputs(std::span<const int> tokens, InputSite site,
                        const std::function<void(const float* x, int64_t rows)>& sink);
    // Replaces matrix `which` (0..6) of `layer`, or the classifier at layer == n_layers, by a Linear of
    // the same shape.
    void replace_linear(InputSite site, std::unique_ptr<Linear> linear);

    // Total bytes of the weights the linear layers stream per forward (classifier included).
    int64_t linear_weight_bytes() const;
    // Their stored bytes (Linear::stored_bytes), the compensators' share, and their weights (K N).
    int64_t linear_stored_bytes() const;
    int64_t linear_low_rank_bytes() const;
    int64_t linear_weight_count() const;
    const Linear& layer_linear(int layer, int which) const;  // which: 0..6 = wq wk wv wo w1 w2 w3
    const Linear& classifier() const { return *classifier_; }
    std::vector<const Linear*> linears() const;  // every layer's seven, then the classifier

private:
    struct Layer {
        std::unique_ptr<Linear> wq, wk, wv, wo, w1, w2, w3;
    };

    void ensure_capacity(int tokens);
    std::unique_ptr<Linear>& linear_at(InputSite site);
    // Runs matrix `which` of `layer` (layer == n_layers: the classifier) on `count` rows, or, at the
    // capture site, hands x to the capture's sink and returns false: the forward stops there.
    bool run_linear(int layer, int which, const float* x, int count, float* y);
    int64_t sum_over_linears(int64_t (*count)(const Linear&)) const;
    void attention(int layer, int pos0, int count);

    std::shared_ptr<const Checkpoint> checkpoint_;
    std::vector<Layer> layers_;
    std::unique_ptr<Linear> classifier_;
    int cached_positions_ = 0;

    // KV cache, [layers][seq_len][kv_dim] each.
    std::vector<float> key_cache_, value_cache_;
    // Activations for up to `capacity_` tokens, row-major [token][features].
    int capacity_ = 0;
    std::vector<float> x_, xb_, q_, att_out_, delta_, hb_, hb2_, logits_;
    std::vector<float> scores_;  // [seq_len]
    struct Capture {
        InputSite site;
        const std::function<void(const float*, int64_t)>* sink;
    };
    const Capture* capture_ = nullptr;  // during capture_inputs only
};

// Sequential calibrated quantization, in GPTQ's order: layer by layer, the inputs of its matrices
// are captured from `sequences` run through the model as quantized so far (wq wk wv together, then
// wo, then w1 w3 together, then w2, each group with the ones before it already quantized), and
// those matrices are quantized with `backend` on that calibration; the classifier last when
// `classifier` is true. The model may start from any backend (the runner's is fp32 dense).
// Returns the calibration rows each matrix saw (the same for every matrix: one per token).
int64_t quantize_with_calibration(Model& model, QjitBackend& backend, const std::vector<std::vector<int>>& sequences,
                                  bool classifier);

// ---- evaluation ----

struct NllResult {
    double mean_nll = 0.0;             // nats per predicted token
    int64_t tokens = 0;                // predicted tokens (every token after each BOS)
    std::vector<double> sequence_nll;  // NLL sum of each sequence
};

// Splits `tokens` into sequences at each BOS and sums the NLL of every token after BOS predicted from
// its prefix, one batched forward_sequence per sequence.
NllResult evaluate_nll(Model& model, std::span<const uint16_t> tokens);

// BOS followed by `steps` argmax tokens (KV-cache steps with m = 1).
std::vector<int> greedy_decode(Model& model, int steps);

int argmax(std::span<const float> values);  // first index of the maximum, as in run.c

// ---- tokenizer (llama2.c tok*.bin) ----

class Tokenizer {
public:
    Tokenizer(const std::string& path, int vocab_size);

    // The bytes run.c prints for `token` after `previous`: the leading space after BOS dropped,
    // <0xXX> mapped to its byte, unprintable single bytes suppressed.
    std::string piece(int previous, int token) const;
    // The text run.c prints for a generated sequence (tokens[0] is the prompt BOS); stops at a BOS.
    std::string decode(std::span<const int> tokens) const;
    // run.c's encode(): a dummy-prefix " " token, each UTF-8 character's token (its bytes + 3 when
    // the vocabulary lacks it), then the adjacent pair of highest score merged until none merges.
    // No BOS or EOS.
    std::vector<int> encode(const std::string& text) const;

private:
    int lookup(const std::string& piece) const;  // -1 when absent

    std::vector<std::string> vocab_;
    std::vector<float> scores_;
    std::vector<std::pair<std::string, int>> sorted_;  // (piece, id) sorted by piece, as run.c searches
};

// The text's paragraphs as the reference tokens were made: split at blank lines ("\n\n"),
// surrounding whitespace stripped, empty ones skipped.
std::vector<std::string> split_paragraphs(const std::string& text);

// ---- file helpers ----

std::vector<uint16_t> read_u16_file(const std::string& path);
std::vector<int32_t> read_i32_file(const std::string& path);
std::vector<float> read_f32_file(const std::string& path);

}  // namespace llama2
