#include "models/tensor_names.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>

namespace qjit_models {

namespace {

using Split = TensorParallelSplit;

constexpr BlockMatrixNames kBlockMatrixNames[] = {
    {BlockMatrix::q, "attn_q", "self_attn.q_proj", "wq", Split::column},
    {BlockMatrix::k, "attn_k", "self_attn.k_proj", "wk", Split::column},
    {BlockMatrix::v, "attn_v", "self_attn.v_proj", "wv", Split::column},
    {BlockMatrix::o, "attn_output", "self_attn.o_proj", "wo", Split::row},
    {BlockMatrix::gate, "ffn_gate", "mlp.gate_proj", "w1", Split::column},
    {BlockMatrix::down, "ffn_down", "mlp.down_proj", "w2", Split::row},
    {BlockMatrix::up, "ffn_up", "mlp.up_proj", "w3", Split::column},
};

// Config names that are not a Llama block's: GPTBigCode's MLP as Granite's config names it, and
// the classifier.
struct OtherLayer {
    std::string_view name;
    Split split;
};
constexpr OtherLayer kOtherLayers[] = {{"mlp_up", Split::column}, {"mlp_down", Split::row}, {"classifier", Split::column}};

// `name` is `entry` or ends in "_" + entry.
bool names(std::string_view name, std::string_view entry) {
    return name == entry ||
           (name.size() > entry.size() && name.ends_with(entry) && name[name.size() - entry.size() - 1] == '_');
}

// "q_proj" of "self_attn.q_proj".
std::string_view short_name(std::string_view hf) { return hf.substr(hf.find('.') + 1); }

}  // namespace

const BlockMatrixNames& names_of(BlockMatrix matrix) {
    const auto found = std::find_if(std::begin(kBlockMatrixNames), std::end(kBlockMatrixNames),
                                    [&](const BlockMatrixNames& n) { return n.matrix == matrix; });
    if (found == std::end(kBlockMatrixNames)) throw std::logic_error("names_of: not a block matrix");
    return *found;
}

std::string gguf_block_tensor(int layer, const char* part) {
    return "blk." + std::to_string(layer) + "." + part + ".weight";
}

std::string gguf_block_tensor(int layer, BlockMatrix matrix) { return gguf_block_tensor(layer, names_of(matrix).gguf); }

std::string gguf_block_bias(int layer, BlockMatrix matrix) {
    return "blk." + std::to_string(layer) + "." + names_of(matrix).gguf + ".bias";
}

std::string hf_block_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

std::string hf_block_tensor(int layer, BlockMatrix matrix) { return hf_block_prefix(layer) + names_of(matrix).hf; }

std::string llama2c_block_tensor(int layer, BlockMatrix matrix) {
    return "layer " + std::to_string(layer) + " " + names_of(matrix).llama2c;
}

TensorParallelSplit tensor_parallel_split(std::string_view layer_name) {
    for (const BlockMatrixNames& n : kBlockMatrixNames)
        if (names(layer_name, short_name(n.hf)) || names(layer_name, n.llama2c)) return n.split;
    for (const OtherLayer& other : kOtherLayers)
        if (names(layer_name, other.name)) return other.split;
    throw std::runtime_error("layer '" + std::string(layer_name) +
                             "': no tensor-parallel split is known for this name (models/tensor_names.cpp lists them)");
}

}  // namespace qjit_models
