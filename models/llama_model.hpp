// A Llama-architecture transformer whose linear layers are pluggable, so the same forward pass runs
// on dense fp32 weights, on qjit layers quantized from them, or on qjit layers imported exactly from
// a GGUF file. The forward pass is llama2.c's run.c, generalized: RMSNorm (eps from the config), RoPE
// with the config's base rotating pairs of each head (adjacent pairs (2i, 2i+1) as run.c and
// llama.cpp's "llama" models, or the halves' pairs (i, i + head_size / 2) as its NeoX-style
// models), grouped-query attention, SwiGLU FFN, and a classifier that is the token embedding (tied)
// or a matrix of its own. Two variations of the attention block are weights of their own: biases
// added to q, k and v (Qwen2), and an RMSNorm of each head of q and k before RoPE (Qwen3). Gemma 3
// adds the config's variations (a scaled embedding, GELU-gated FFNs, sliding-window layers with a
// RoPE base of their own) and RMSNorms of the attention's and the FFN's outputs.
//
// The model's weights come from a loader: llama2.c checkpoints (models/llama2_checkpoint.hpp) or GGUF
// files (models/gguf_llama.hpp). Each matrix is a LoadedMatrix, and each maker takes from it what it
// builds from (models/llama_linear.hpp).
//
// Errors (bad arguments, failing qjit calls) are reported by throwing std::runtime_error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/llama_linear.hpp"
#include "models/loaded_matrix.hpp"
#include "models/step_profile.hpp"
#include "qjit/qjit.h"
#include "qjit/qjit_ffn.h"
#include "qjit/qjit_ops.h"

namespace qjit_models::llama {

struct Config {
    int dim = 0;         // width of the residual stream
    int hidden_dim = 0;  // FFN width
    int n_layers = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int head_size = 0;   // values per attention head (even: RoPE rotates pairs)
    int vocab_size = 0;
    int seq_len = 0;     // longest sequence the model supports (the KV cache grows up to it)
    float rope_base = 10000.0f;
    float rms_eps = 1e-5f;
    // Which values of a head RoPE rotates together.
    enum class RopePairs { Adjacent, Halves };
    RopePairs rope_pairs = RopePairs::Adjacent;

    // Gemma 3's variations (llama.cpp's gemma3 graph); the defaults are Llama's.
    float embedding_scale = 1.0f;  // each token's embedding row is multiplied by it (Gemma: sqrt(dim))
    // The FFN's activation of gate and up: silu(gate) * up, or gelu(gate) * up (GELU's tanh form).
    enum class FfnActivation { SwiGlu, GeGlu };
    FfnActivation ffn_activation = FfnActivation::SwiGlu;
    // Sliding-window attention (0: none): a local layer's query at position p sees positions
    // p - sliding_window < s <= p, and RoPE rotates it with local_rope_base. Layer l is local unless
    // it is the last of each swa_pattern layers (l % swa_pattern == swa_pattern - 1; 0: all local),
    // as llama.cpp's set_swa_pattern.
    int sliding_window = 0;
    int swa_pattern = 0;
    float local_rope_base = 10000.0f;
    // What scores q . k are multiplied by; 0: 1 / sqrt(head_size).
    float attention_scale = 0.0f;

    int q_dim() const { return n_heads * head_size; }
    int kv_dim() const { return n_kv_heads * head_size; }
    qjit_attention_shape attention_shape() const { return {head_size, n_heads, n_kv_heads}; }
    bool local_layer(int layer) const {
        return sliding_window > 0 && (swa_pattern == 0 || layer % swa_pattern < swa_pattern - 1);
    }
    // Throws naming the first field that is out of range or does not fit the others.
    void validate() const;
};

struct LayerWeights {
    std::vector<float> attention_norm;  // [dim]
    LoadedMatrix wq;                    // [q_dim][dim]
    LoadedMatrix wk, wv;                // [kv_dim][dim]
    LoadedMatrix wo;                    // [dim][q_dim]
    std::vector<float> ffn_norm;        // [dim]
    LoadedMatrix w1;                    // [hidden][dim] (gate)
    LoadedMatrix w2;                    // [dim][hidden] (down)
    LoadedMatrix w3;                    // [hidden][dim] (up)
    // [q_dim], [kv_dim], [kv_dim] added to wq's, wk's and wv's outputs; empty: none.
    std::vector<float> q_bias = {}, k_bias = {}, v_bias = {};
    // [head_size]: each head of q and of k RMS-normed with these weights before RoPE; empty: none.
    std::vector<float> q_norm = {}, k_norm = {};
    // [dim]: the attention's output (after wo) and the FFN's output RMS-normed with these weights
    // before their residual adds (Gemma's "sandwich" norms); empty: none.
    std::vector<float> post_attention_norm = {}, post_ffn_norm = {};
};

struct Weights {
    Config config;
    LoadedMatrix token_embedding;  // [vocab][dim], read a row per token
    std::vector<LayerWeights> layers;
    std::vector<float> final_norm;  // [dim]
    LoadedMatrix classifier;        // [vocab][dim]; the token embedding itself when tied
    bool tied_classifier = true;

    // Validates the config, then throws naming the first matrix or norm whose shape differs from the
    // config's, or a norm weight that is not finite.
    void validate() const;
};

// The seven matrices of a layer, in the order the model makes and names them.
inline constexpr int kLayerMatrices = 7;
inline constexpr const char* kLayerMatrixNames[kLayerMatrices] = {"wq", "wk", "wv", "wo", "w1", "w2", "w3"};

// A matrix the model makes a Linear of, in the order Model's constructor makes them (wq wk wv wo
// w1 w2 w3 of each layer, then the classifier).
struct ModelMatrix {
    const LoadedMatrix* source;
    qjit_matrix_role role;  // attention for wq..wo; dense for the FFN and the classifier
};
std::vector<ModelMatrix> model_matrices(const Weights& weights, bool with_classifier);
// The matrices of one calibration each, in the order GPTQ's true-sequential mode quantizes them:
// wq wk wv (one input), wo, w1 w3 (one input), w2.
inline const std::vector<std::vector<int>> kSequentialGroups = {{0, 1, 2}, {3}, {4, 6}, {5}};

// Where a model's matrix reads its inputs: matrix `which` (0..6 = wq wk wv wo w1 w2 w3) of `layer`,
// or the classifier's when layer == n_layers. wq, wk and wv read the same inputs, as do w1 and w3.
struct InputSite {
    int layer = 0;
    int which = 0;
};
// The matrix at `site` (the classifier at layer == n_layers) among model_matrices(weights, true).
const LoadedMatrix& site_matrix(const std::vector<ModelMatrix>& matrices, InputSite site, int n_layers);

// A layer's SwiGLU FFN run by something else than its three linear layers (a flash FFN served from
// a neuron file): y (count x dim) = FFN(x), x the FFN's normed inputs (count x dim).
class FfnOverride {
public:
    virtual ~FfnOverride() = default;
    virtual void forward(int layer, const float* x, int count, float* y) = 0;
};

// FFN activations zeroed by a magnitude threshold, and all of them, since the threshold was set.
struct FfnSparsity {
    int64_t zeroed = 0;
    int64_t total = 0;
    double fraction() const { return total > 0 ? double(zeroed) / double(total) : 0.0; }
};

class Model {
public:
    // Builds every linear layer (wq, wk, wv, wo, w1, w2, w3 of each layer) with `maker` and the
    // classifier with `classifier_maker` (`maker` when NULL). Without ffn_linears, w1, w2 and w3 are
    // not built: the FFNs must then come from an FfnOverride (set_ffn_override) before a forward.
    Model(std::shared_ptr<const Weights> weights, LayerMaker& maker, LayerMaker* classifier_maker = nullptr,
          bool ffn_linears = true);

    const Config& config() const { return weights_->config; }

    // The qjit context whose threads run the forward's loops between the linear layers (norms, RoPE,
    // attention, SwiGLU): the maker's at construction; null runs them on the calling thread. The
    // results do not depend on it: each loop's iterations are independent and computed alike.
    void share_threads(std::shared_ptr<qjit_context> context) { threads_ = std::move(context); }
    const Weights& weights() const { return *weights_; }
    const std::shared_ptr<const Weights>& shared_weights() const { return weights_; }

    // Which rows of logits a forward computes: every position's (scoring), or the last one's (a
    // prompt before decoding: the classifier runs on one row).
    enum class Logits { All, Last };

    // Runs tokens[0..T) at positions pos0..pos0+T-1, attending causally to the KV cache of positions
    // < pos0 and to each other; every linear layer is called once with m = T. Returns the T x vocab
    // logits (1 x vocab, the last position's, for Logits::Last), valid until the next call. pos0 must
    // equal the number of positions already cached.
    std::span<const float> forward(std::span<const int> tokens, int pos0, Logits logits = Logits::All);

    // Logits for every position of a whole sequence at once (restarts the KV cache).
    std::span<const float> forward_sequence(std::span<const int> tokens);

    // Single-token step (m = 1) at the next position of the KV cache; reset() starts over.
    std::span<const float> step(int token);
    // The first index of the largest of `logits` (one row), on the forward's threads (qjit_argmax):
    // the greedy token; nullopt where qjit_argmax refuses the row (a NaN: qjit_last_error() says
    // where).
    std::optional<int> greedy_token(std::span<const float> logits) const;
    void reset() { cached_positions_ = 0; }
    // Allocates (and touches) the activations and the KV cache for `tokens` positions ahead of a
    // forward, so that the forward does not pay for fresh memory.
    void reserve(int tokens);
    int cached_positions() const { return cached_positions_; }

    // One layer at a time, for sequential calibration. A residual stream is a whole sequence's
    // activations between layers (T x dim, positions from 0): the embedding of its tokens, then each
    // layer applied to it in place. capture_inputs runs a stream (at the input of layer site.layer,
    // or of the final norm when site.layer == n_layers) up to the matrix at `site` and hands its
    // inputs (T x K, row-major) to `sink` instead of running it. These calls leave the KV cache empty.
    std::vector<float> embed_sequence(std::span<const int> tokens);
    void run_layer(int layer, std::vector<float>& stream);
    void capture_inputs(const std::vector<float>& stream, InputSite site,
                        const std::function<void(const float* x, int64_t rows)>& sink);
    // The logits of every position of a stream at the final norm's input (T x vocab), valid until the
    // next call.
    std::span<const float> stream_logits(const std::vector<float>& stream);
    // Replaces matrix `which` (0..6) of `layer`, or the classifier at layer == n_layers, by a Linear of
    // the same shape; returns the one it held.
    std::unique_ptr<Linear> replace_linear(InputSite site, std::unique_ptr<Linear> linear);

    // The FFN of every layer from `ffn` (null: the layer's own linear layers again). An override
    // runs SwiGLU FFNs: a model of another activation refuses one.
    void set_ffn_override(FfnOverride* ffn);
    // Zeroes each FFN activation act(x w1) * (x w3) of magnitude below `threshold` (0: none) before
    // w2, as a sparse FFN that skips those neurons would; counts them.
    void set_ffn_threshold(float threshold) {
        ffn_threshold_ = threshold;
        ffn_sparsity_ = {};
    }
    const FfnSparsity& ffn_sparsity() const { return ffn_sparsity_; }

    // How the key/value cache stores keys and values (qjit_kv_type; QJIT_KV_F32 unless set). The
    // positions already cached are dropped, as by reset().
    void set_kv_type(qjit_kv_type type);
    qjit_kv_type kv_type() const { return kv_type_; }

    // Adds each forward step's wall time to `profile` from now on (null: none, the default).
    void set_step_profile(StepProfile* profile) { profile_ = profile; }

    // Total bytes of the weights the linear layers stream per forward (classifier included).
    int64_t linear_weight_bytes() const;
    // Their stored bytes (Linear::stored_bytes), the compensators' share, and their weights (K N).
    int64_t linear_stored_bytes() const;
    int64_t linear_low_rank_bytes() const;
    int64_t linear_weight_count() const;
    const Linear& layer_linear(int layer, int which) const;  // which: 0..6 = wq wk wv wo w1 w2 w3
    const Linear& classifier() const { return *classifier_; }
    std::vector<const Linear*> linears() const;  // every layer's seven (those built), then the classifier

private:
    struct FfnDeleter {
        void operator()(qjit_ffn* ffn) const { qjit_ffn_destroy(ffn); }
    };
    struct Layer {
        std::unique_ptr<Linear> wq, wk, wv, wo, w1, w2, w3;
        // w1 (gate), w3 (up) and w2 (down) as one dense FFN, when all three are qjit layers of one
        // context; null otherwise (the forward then runs them one by one).
        std::unique_ptr<qjit_ffn, FfnDeleter> ffn;
    };

    void ensure_capacity(int tokens);
    void ensure_cache(int positions);
    void choose_attention();
    // The forward's steps on x_ (count rows at positions pos0..): the token embedding, one layer, the
    // final norm and classifier (into logits_). The last two return false where a capture stopped them.
    void embed(std::span<const int> tokens, int pos0);
    bool run_layer(int layer, int pos0, int count);
    bool run_classifier(int first, int count);  // rows first..first+count-1 of x_, logits from row 0
    void load_stream(const std::vector<float>& stream);  // into x_, the cache sized for it
    std::unique_ptr<Linear>& linear_at(InputSite site);
    void compose_ffn(Layer& layer);  // (re)makes layer.ffn from its FFN linears
    // Runs matrix `which` of `layer` (layer == n_layers: the classifier) on `count` rows, or, at the
    // capture site, hands x to the capture's sink and returns false: the forward stops there.
    bool run_linear(int layer, int which, const float* x, int count, float* y);
    int64_t sum_over_linears(int64_t (*count)(const Linear&)) const;
    void attention(int layer, int pos0, int count);
    qjit_kv_cache layer_cache(int layer);
    // The loops between the layers, on the context's threads: xb_ = RMSNorm(x_) with `weight`
    // (count rows), x_ += delta_ (count values).
    void normalize(const std::vector<float>& weight, int count);  // xb_ = the norm of x_'s rows
    // out = RMSNorm of `rows` rows of `size` values of x with `weight` (qjit_rms_norm); out may be x.
    void rms_norm(const float* x, const std::vector<float>& weight, int rows, int size, float* out);
    void add_delta(size_t count);
    // x_ += delta_ (count rows), delta_ RMS-normed first with `post_norm` when it is not empty.
    void add_block_output(const std::vector<float>& post_norm, int count);
    // hb2_ = the FFN's activation of hb_ (gate) and hb2_ (up), `count` values.
    void ffn_activation(size_t count);

    std::shared_ptr<const Weights> weights_;
    std::shared_ptr<qjit_context> threads_;
    std::vector<Layer> layers_;
    std::unique_ptr<Linear> classifier_;
    int cached_positions_ = 0;

    // KV cache per layer in qjit_kv_cache's blocked layout, grown as positions are added.
    int cache_positions_ = 0;
    qjit_kv_type kv_type_ = QJIT_KV_F32;
    std::vector<std::vector<std::byte>> key_cache_, value_cache_;
    std::vector<float> rotations_;  // [position][head_size]: cos, sin of each pair's RoPE angle
    std::vector<float> local_rotations_;  // the same with local_rope_base, for sliding-window layers
    // Activations for up to `capacity_` tokens, row-major [token][features].
    int capacity_ = 0;
    std::vector<float> x_, xb_, q_, k_, v_, att_out_, delta_, hb_, hb2_, logits_;
    struct Capture {
        InputSite site;
        const std::function<void(const float*, int64_t)>* sink;
    };
    const Capture* capture_ = nullptr;  // during capture_inputs only
    FfnOverride* ffn_override_ = nullptr;
    float ffn_threshold_ = 0;
    StepProfile* profile_ = nullptr;
    FfnSparsity ffn_sparsity_;
};

// A choice per layer between a calibrated method and the layers the model already holds: a layer
// (or the classifier) keeps the method's matrices only when the model's NLL on the first
// `score_sequences` calibration sequences is no higher with them, the later layers as they are.
// Starting from a model built wholly with the fallback (say RTN), the result is never worse than it
// on those sequences.
struct LayerChoice {
    int score_sequences = 64;
};

struct CalibratedQuantization {
    int64_t rows = 0;                 // calibration rows each matrix saw (one per token)
    double calibration_seconds = 0;   // running the sequences and capturing the inputs
    double quantization_seconds = 0;  // the quantizer itself
    // With a LayerChoice: layers (the classifier counted as one) that kept the method, of all tried,
    // and the score NLL of the model as it started and as it ends.
    int layers_kept = 0, layers_tried = 0;
    double start_nll = 0, end_nll = 0;
};

// Sequential calibrated quantization, in GPTQ's order: layer by layer, the inputs of its matrices
// are captured from `sequences` run through the model as quantized so far (wq wk wv together, then
// wo, then w1 w3 together, then w2, each group with the ones before it already quantized), and
// those matrices are quantized with `maker` on that calibration; the classifier last when
// `classifier` is true. Each sequence's activations are kept between layers, so every layer runs
// once per group of its matrices, not the whole model up to it. The model may start from any
// maker (the runners' is fp32 dense; with `choice`, the fallback's layers).
CalibratedQuantization quantize_with_calibration(Model& model, QuantizingMaker& maker,
                                                 const std::vector<std::vector<int>>& sequences, bool classifier,
                                                 const LayerChoice* choice = nullptr);

// The mean NLL of the first `count` sequences from their residual streams at the input of layer
// `from` (n_layers: the final norm's), the model's layers from there on run as they are. The
// streams are left as they were.
double score_from_layer(Model& model, const std::vector<std::vector<float>>& streams,
                        const std::vector<std::vector<int>>& sequences, int from, int count);

// What the model's qjit layers store, summed (dense fp32 layers left out).
struct QjitStorage {
    int64_t weights = 0;       // sum of K N
    int64_t stored_bytes = 0;  // qjit_linear_info.stored_bytes
    int64_t low_rank_bytes = 0;
    int64_t groups = 0, wide_groups = 0, outliers = 0;
    bool second_order_scales = false;

    double bits_per_weight() const { return weights > 0 ? double(stored_bytes) * 8.0 / double(weights) : 32.0; }
};
QjitStorage qjit_storage(const Model& model);

}  // namespace qjit_models::llama
