#include "models/llama2_checkpoint.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "models/fail.hpp"
#include "models/tensor_names.hpp"

namespace qjit_models::llama2 {

static_assert(std::endian::native == std::endian::little, "the checkpoint files are little-endian");

namespace {

using qjit_models::llama::Config;
using qjit_models::llama::LoadedMatrix;
using qjit_models::llama::Weights;

using qjit_models::fail;

// Layer l's part of a tensor stored [layers][rows][cols].
std::vector<float> layer_slice(const std::vector<float>& tensor, int64_t layer, int64_t values) {
    const auto first = tensor.begin() + std::ptrdiff_t(layer * values);
    return {first, first + std::ptrdiff_t(values)};
}

}  // namespace

std::shared_ptr<const Weights> load_checkpoint(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) fail("cannot open checkpoint '", path, "'");
    const int64_t file_size = in.tellg();
    in.seekg(0);

    int32_t header[7];
    if (file_size < int64_t(sizeof header) || !in.read(reinterpret_cast<char*>(header), sizeof header)) {
        fail("checkpoint '", path, "' is ", file_size, " bytes, too short for the 28-byte header");
    }
    Config c;
    c.dim = header[0];
    c.hidden_dim = header[1];
    c.n_layers = header[2];
    c.n_heads = header[3];
    c.n_kv_heads = header[4];
    c.vocab_size = header[5];
    c.seq_len = header[6];
    // A negative vocab_size marks a separate classifier matrix after the RoPE tables.
    const bool shared_classifier = c.vocab_size > 0;
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
    c.head_size = c.dim / c.n_heads;
    if (c.dim % c.n_heads != 0 || c.head_size % 2 != 0) {
        fail("checkpoint '", path, "': dim ", c.dim, " does not split into ", c.n_heads, " heads of an even size");
    }
    if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0) {
        fail("checkpoint '", path, "': n_heads ", c.n_heads, " is not a multiple of n_kv_heads ", c.n_kv_heads);
    }

    const int64_t dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers, vocab = c.vocab_size;
    const int64_t kv_dim = c.kv_dim(), head_size = c.head_size;
    std::vector<float> token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, classifier;
    struct Tensor {
        std::vector<float>* dest;  // NULL: read and dropped (run.c ignores the RoPE tables)
        int64_t floats;
    };
    const Tensor tensors[] = {
        {&token_embedding, vocab * dim},
        {&rms_att, layers * dim},
        {&wq, layers * dim * dim},
        {&wk, layers * kv_dim * dim},
        {&wv, layers * kv_dim * dim},
        {&wo, layers * dim * dim},
        {&rms_ffn, layers * dim},
        {&w1, layers * hidden * dim},
        {&w2, layers * dim * hidden},
        {&w3, layers * hidden * dim},
        {&rms_final, dim},
        {nullptr, c.seq_len * head_size / 2},  // freq_cis_real
        {nullptr, c.seq_len * head_size / 2},  // freq_cis_imag
        {shared_classifier ? nullptr : &classifier, shared_classifier ? 0 : vocab * dim},
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

    auto weights = std::make_shared<Weights>();
    weights->config = c;
    weights->token_embedding = LoadedMatrix::dense("token embedding", vocab, dim, std::move(token_embedding));
    for (int64_t l = 0; l < layers; ++l) {
        auto matrix = [&](BlockMatrix m, const std::vector<float>& tensor, int64_t n, int64_t k) {
            return LoadedMatrix::dense(llama2c_block_tensor(int(l), m), n, k, layer_slice(tensor, l, n * k));
        };
        weights->layers.push_back({layer_slice(rms_att, l, dim), matrix(BlockMatrix::q, wq, dim, dim),
                                   matrix(BlockMatrix::k, wk, kv_dim, dim), matrix(BlockMatrix::v, wv, kv_dim, dim),
                                   matrix(BlockMatrix::o, wo, dim, dim), layer_slice(rms_ffn, l, dim),
                                   matrix(BlockMatrix::gate, w1, hidden, dim), matrix(BlockMatrix::down, w2, dim, hidden),
                                   matrix(BlockMatrix::up, w3, hidden, dim)});
    }
    weights->final_norm = std::move(rms_final);
    weights->tied_classifier = shared_classifier;
    weights->classifier = shared_classifier ? weights->token_embedding
                                            : LoadedMatrix::dense("classifier", vocab, dim, std::move(classifier));
    weights->validate();
    return weights;
}

}  // namespace qjit_models::llama2
