#include "models/gguf_llama.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "io/gguf_dequantize.hpp"
#include "io/gguf_import.hpp"
#include "models/tensor_names.hpp"

namespace qjit_models::llama {

namespace {

constexpr int kLimit = 1 << 20;  // Config's range: far above any model this runs

// The architectures qjit-run runs: the Llama forward and how each differs from it. Their metadata
// keys start with the name ("qwen2.block_count").
struct Architecture {
    const char* name;
    Config::RopePairs rope_pairs;
    bool qkv_bias;  // blk.N.attn_{q,k,v}.bias
    bool qk_norm;   // blk.N.attn_{q,k}_norm.weight
    // Gemma 3's: the embedding times sqrt(dim); blk.N.{post_attention_norm, post_ffw_norm}.weight;
    // GELU-gated FFNs.
    bool scaled_embedding = false;
    bool post_norms = false;
    Config::FfnActivation ffn_activation = Config::FfnActivation::SwiGlu;
    // With ARCH.attention.sliding_window: the default of ARCH.attention.sliding_window_pattern (every
    // swa_pattern-th layer global, the others local); 0: the architecture has no sliding window.
    int swa_pattern = 0;
};
constexpr Architecture kArchitectures[] = {
    {"llama", Config::RopePairs::Adjacent, false, false},
    {"qwen2", Config::RopePairs::Halves, true, false},
    {"qwen3", Config::RopePairs::Halves, false, true},
    {"gemma3", Config::RopePairs::Halves, false, true, true, true, Config::FfnActivation::GeGlu, 6},
};

std::string architecture_names() {
    std::string names;
    for (const Architecture& a : kArchitectures) names += std::string(names.empty() ? "'" : ", '") + a.name + "'";
    return names;
}

std::string dims_text(const std::vector<int64_t>& dims) {
    std::string text = "[";
    for (size_t i = 0; i < dims.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(dims[i]);
    return text + "]";
}

// Reads one file's metadata and tensors, every error naming the file.
class LlamaGgufReader {
public:
    explicit LlamaGgufReader(std::shared_ptr<const qjit::GgufFile> file) : file_(std::move(file)) {}

    template <typename... Parts>
    [[noreturn]] void fail(const Parts&... parts) const {
        std::ostringstream message;
        message << "'" << file_->file_name() << "': ";
        (message << ... << parts);
        throw std::runtime_error(message.str());
    }

    // A count or size in [1, kLimit]: the value of `key`, or `fallback` when the key is absent.
    int count(const std::string& key, std::optional<int> fallback = std::nullopt) const {
        if (!file_->has(key)) {
            if (!fallback) fail("metadata key ", key, " is missing");
            return *fallback;
        }
        const uint64_t value = file_->get_uint(key);
        if (value < 1 || value > uint64_t(kLimit)) fail(key, " = ", value, " is out of range [1, ", kLimit, "]");
        return int(value);
    }

    float number(const std::string& key, std::optional<double> fallback = std::nullopt) const {
        if (!file_->has(key)) {
            if (!fallback) fail("metadata key ", key, " is missing");
            return float(*fallback);
        }
        const double value = file_->get_float(key);
        if (!std::isfinite(value)) fail(key, " = ", value, " is not finite");
        return float(value);
    }

    // The tensor `name`, checked to have `dims` (innermost first) and a type the model can read.
    const qjit::GgufTensor& tensor(const std::string& name, const std::vector<int64_t>& dims) const {
        const qjit::GgufTensor* tensor = file_->find(name);
        if (!tensor) fail("tensor ", name, " is missing");
        if (tensor->dims != dims)
            fail("tensor ", name, " has dims ", dims_text(tensor->dims), ", but the metadata implies ",
                 dims_text(dims));
        return *tensor;
    }

    // A weight matrix [n][k] (GGUF dims [k, n]), left in the file as its ggml blocks.
    LoadedMatrix matrix(const std::string& name, int64_t n, int64_t k) const {
        const qjit::GgufTensor& t = tensor(name, {k, n});
        const size_t row_bytes = t.bytes / size_t(n);
        const uint8_t* data = t.data;
        const qjit::GgmlType type = t.type;
        const std::string where = "'" + file_->file_name() + "': tensor " + name;
        auto decode_row = [where, data, type, row_bytes, k](int64_t row, float* out) {
            if (!qjit::gguf_dequantize_supported(type))
                throw std::runtime_error(where + " is " + qjit::ggml_type_name(type) +
                                         ", which qjit cannot dequantize to fp32");
            qjit::dequantize_gguf_row(type, data + size_t(row) * row_bytes, k, out);
        };
        auto release = [file = file_, &t] { file->release(t); };
        return LoadedMatrix::ggml(name, n, k, {uint32_t(t.type), t.data, t.bytes}, std::move(decode_row), file_,
                                  std::move(release));
    }

    std::vector<float> norm(const std::string& name, int dim) const {
        const qjit::GgufTensor& t = tensor(name, {dim});
        if (!qjit::gguf_dequantize_supported(t.type))
            fail("tensor ", name, " is ", qjit::ggml_type_name(t.type), ", which qjit cannot read as fp32");
        return qjit::dequantize_gguf(t);
    }

    const qjit::GgufFile& file() const { return *file_; }

private:
    std::shared_ptr<const qjit::GgufFile> file_;
};

const Architecture& read_architecture(const LlamaGgufReader& reader) {
    const qjit::GgufFile& file = reader.file();
    if (!file.has("general.architecture")) reader.fail("metadata key general.architecture is missing");
    const std::string& architecture = file.get_string("general.architecture");
    for (const Architecture& a : kArchitectures)
        if (architecture == a.name) return a;
    reader.fail("general.architecture is '", architecture, "'; qjit-run runs ", architecture_names(), " models");
}

// Gemma 3's variations, as llama.cpp's gemma3 model reads them (src/models/gemma3.cpp).
void read_gemma_config(const LlamaGgufReader& reader, const Architecture& architecture, Config& c) {
    const qjit::GgufFile& file = reader.file();
    const std::string arch = std::string(architecture.name) + ".";
    if (architecture.scaled_embedding) c.embedding_scale = std::sqrt(float(c.dim));
    c.ffn_activation = architecture.ffn_activation;
    const std::string window = arch + "attention.sliding_window";
    if (architecture.swa_pattern > 0 && file.has(window) && file.get_uint(window) > 0) {
        c.sliding_window = reader.count(window);
        const std::string pattern = arch + "attention.sliding_window_pattern";
        if (file.has(pattern)) {
            try {
                c.swa_pattern = int(std::min<uint64_t>(file.get_uint(pattern), kLimit));
            } catch (const std::exception&) {
                reader.fail(pattern, " is not one number: per-layer sliding-window flags are not supported");
            }
        } else {
            c.swa_pattern = architecture.swa_pattern;
        }
        c.local_rope_base = reader.number(arch + "rope.freq_base_swa", 10000.0);
    }
    // llama.cpp scales Gemma 3 27B's (62 layers') scores by its width per head, not its head size
    // (query_pre_attn_scalar in Google's config).
    if (architecture.scaled_embedding && c.n_layers == 62) c.attention_scale = 1.0f / std::sqrt(float(c.dim / c.n_heads));
}

Config read_config(const LlamaGgufReader& reader, const Architecture& architecture) {
    const qjit::GgufFile& file = reader.file();
    const std::string arch = std::string(architecture.name) + ".";
    if (file.has(arch + "expert_count") && file.get_uint(arch + "expert_count") > 0)
        reader.fail(arch, "expert_count is ", file.get_uint(arch + "expert_count"),
                    ": mixture-of-experts models are not supported");
    if (file.has(arch + "rope.scaling.type") && file.get_string(arch + "rope.scaling.type") != "none")
        reader.fail(arch, "rope.scaling.type is '", file.get_string(arch + "rope.scaling.type"),
                    "': RoPE scaling is not supported");
    for (const char* capping : {"final_logit_softcapping", "attn_logit_softcapping"})
        if (file.has(arch + capping) && reader.number(arch + capping) != 0.0f)
            reader.fail(arch, capping, " is ", reader.number(arch + capping), ": soft-capping is not supported");

    Config c;
    c.rope_pairs = architecture.rope_pairs;
    c.n_layers = reader.count(arch + "block_count");
    c.dim = reader.count(arch + "embedding_length");
    c.hidden_dim = reader.count(arch + "feed_forward_length");
    c.n_heads = reader.count(arch + "attention.head_count");
    c.n_kv_heads = reader.count(arch + "attention.head_count_kv", c.n_heads);
    c.seq_len = reader.count(arch + "context_length");
    c.rope_base = reader.number(arch + "rope.freq_base", 10000.0);
    c.rms_eps = reader.number(arch + "attention.layer_norm_rms_epsilon");
    read_gemma_config(reader, architecture, c);
    if (!file.has(arch + "attention.key_length") && c.dim % c.n_heads != 0)
        reader.fail(arch, "embedding_length ", c.dim, " does not split into ", c.n_heads, " heads");
    c.head_size = reader.count(arch + "attention.key_length", c.dim / c.n_heads);
    if (reader.count(arch + "attention.value_length", c.head_size) != c.head_size)
        reader.fail(arch, "attention.value_length differs from the key length ", c.head_size);
    if (reader.count(arch + "rope.dimension_count", c.head_size) != c.head_size)
        reader.fail(arch, "rope.dimension_count ", file.get_uint(arch + "rope.dimension_count"),
                    " is not the head size ", c.head_size, ": partial RoPE is not supported");

    if (!file.has("tokenizer.ggml.tokens")) reader.fail("metadata key tokenizer.ggml.tokens is missing");
    const size_t vocab = file.get_string_array("tokenizer.ggml.tokens").size();
    if (vocab < 1 || vocab > size_t(kLimit))
        reader.fail("tokenizer.ggml.tokens has ", vocab, " tokens, outside [1, ", kLimit, "]");
    c.vocab_size = int(vocab);
    if (reader.count(arch + "vocab_size", c.vocab_size) != c.vocab_size)
        reader.fail(arch, "vocab_size ", file.get_uint(arch + "vocab_size"), " differs from the ", c.vocab_size,
                    " tokens of tokenizer.ggml.tokens");
    try {
        c.validate();
    } catch (const std::exception& e) {
        reader.fail(e.what());
    }
    return c;
}

// Every tensor must be one the model runs: a file with biases, RoPE factors or anything else that
// would change the results is refused rather than run without it.
void check_no_other_tensors(const LlamaGgufReader& reader, const Architecture& architecture, int n_layers) {
    std::set<std::string> known = {kGgufTokenEmbedding, kGgufOutputNorm, kGgufClassifier};
    for (int l = 0; l < n_layers; ++l) {
        for (const char* norm : {kGgufAttentionNorm, kGgufFfnNorm}) known.insert(gguf_block_tensor(l, norm));
        for (const BlockMatrix matrix : kBlockMatrices) known.insert(gguf_block_tensor(l, matrix));
        if (architecture.qkv_bias)
            for (const BlockMatrix matrix : {BlockMatrix::q, BlockMatrix::k, BlockMatrix::v})
                known.insert(gguf_block_bias(l, matrix));
        if (architecture.qk_norm)
            for (const char* norm : {kGgufQNorm, kGgufKNorm}) known.insert(gguf_block_tensor(l, norm));
        if (architecture.post_norms)
            for (const char* norm : {kGgufPostAttentionNorm, kGgufPostFfnNorm}) known.insert(gguf_block_tensor(l, norm));
    }
    for (const qjit::GgufTensor& tensor : reader.file().tensors())
        if (!known.count(tensor.name))
            reader.fail("tensor ", tensor.name, " is not part of the ", architecture.name, " model qjit-run runs");
}

// A matrix of the model as --gguf tunes it.
GgmlLinear ggml_linear(const LoadedMatrix& matrix) {
    const GgmlMatrix* ggml = matrix.ggml();
    const auto type = qjit::GgmlType(ggml->type);
    return {matrix.name(), matrix.k(), matrix.n(), ggml->type, qjit::ggml_type_name(type),
            qjit::gguf_import_supported(type), ggml->data, ggml->bytes};
}

}  // namespace

GgmlLinears gguf_linear_weights(const std::string& path) {
    const std::shared_ptr<const Weights> weights = load_gguf_llama(qjit::GgufFile::open(path));
    GgmlLinears linears;
    for (const LayerWeights& layer : weights->layers)
        for (const LoadedMatrix* m : {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w1, &layer.w2, &layer.w3})
            linears.linears.push_back(ggml_linear(*m));
    linears.linears.push_back(ggml_linear(weights->classifier));
    linears.owner = weights;
    return linears;
}

std::shared_ptr<const Weights> load_gguf_llama(std::shared_ptr<const qjit::GgufFile> file) {
    if (!file) throw std::runtime_error("load_gguf_llama: the file is NULL");
    const LlamaGgufReader reader(std::move(file));
    auto weights = std::make_shared<Weights>();
    const Architecture& architecture = read_architecture(reader);
    weights->config = read_config(reader, architecture);
    const Config& c = weights->config;
    check_no_other_tensors(reader, architecture, c.n_layers);

    weights->token_embedding = reader.matrix(kGgufTokenEmbedding, c.vocab_size, c.dim);
    const qjit::GgmlType embedding_type = reader.file().tensor(kGgufTokenEmbedding).type;
    if (!qjit::gguf_dequantize_supported(embedding_type))
        reader.fail("tensor token_embd.weight is ", qjit::ggml_type_name(embedding_type),
                    ", which qjit cannot dequantize to fp32");
    for (int l = 0; l < c.n_layers; ++l) {
        const auto matrix = [&](BlockMatrix m, int n, int k) { return reader.matrix(gguf_block_tensor(l, m), n, k); };
        weights->layers.push_back({
            reader.norm(gguf_block_tensor(l, kGgufAttentionNorm), c.dim),
            matrix(BlockMatrix::q, c.q_dim(), c.dim),
            matrix(BlockMatrix::k, c.kv_dim(), c.dim),
            matrix(BlockMatrix::v, c.kv_dim(), c.dim),
            matrix(BlockMatrix::o, c.dim, c.q_dim()),
            reader.norm(gguf_block_tensor(l, kGgufFfnNorm), c.dim),
            matrix(BlockMatrix::gate, c.hidden_dim, c.dim),
            matrix(BlockMatrix::down, c.dim, c.hidden_dim),
            matrix(BlockMatrix::up, c.hidden_dim, c.dim),
        });
        LayerWeights& layer = weights->layers.back();
        if (architecture.qkv_bias) {
            layer.q_bias = reader.norm(gguf_block_bias(l, BlockMatrix::q), c.q_dim());
            layer.k_bias = reader.norm(gguf_block_bias(l, BlockMatrix::k), c.kv_dim());
            layer.v_bias = reader.norm(gguf_block_bias(l, BlockMatrix::v), c.kv_dim());
        }
        if (architecture.qk_norm) {
            layer.q_norm = reader.norm(gguf_block_tensor(l, kGgufQNorm), c.head_size);
            layer.k_norm = reader.norm(gguf_block_tensor(l, kGgufKNorm), c.head_size);
        }
        if (architecture.post_norms) {
            layer.post_attention_norm = reader.norm(gguf_block_tensor(l, kGgufPostAttentionNorm), c.dim);
            layer.post_ffn_norm = reader.norm(gguf_block_tensor(l, kGgufPostFfnNorm), c.dim);
        }
    }
    weights->final_norm = reader.norm(kGgufOutputNorm, c.dim);
    weights->tied_classifier = reader.file().find(kGgufClassifier) == nullptr;
    weights->classifier =
        weights->tied_classifier ? weights->token_embedding : reader.matrix(kGgufClassifier, c.vocab_size, c.dim);
    try {
        weights->validate();
    } catch (const std::exception& e) {
        reader.fail(e.what());
    }
    return weights;
}

}  // namespace qjit_models::llama
