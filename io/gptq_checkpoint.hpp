// A GPTQ checkpoint directory as AutoGPTQ, GPTQModel and the Hugging Face tools write it:
//
//   config.json              with a "quantization_config" object, or
//   quantize_config.json     the same object on its own (older AutoGPTQ);
//                            read: bits, group_size, desc_act, sym, checkpoint_format (or format),
//                            quant_method (when present it must be "gptq")
//   model.safetensors        the tensors, or shards listed by model.safetensors.index.json
//                            ("weight_map": tensor name -> shard file), or one *.safetensors file
//
// A quantized linear layer is every tensor prefix P with P.qweight, P.qzeros, P.scales and,
// optionally, P.g_idx (format/gptq_import.hpp describes them). The files are memory-mapped and
// every header is checked against its file when the checkpoint is opened; a layer's tensors are
// checked against the config and each other when it is listed, so a listed layer can be imported.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.hpp"
#include "io/safetensors.hpp"
#include "qjit/qjit.h"

namespace qjit {

struct CheckpointConfig {
    std::string file;  // where it was read: ".../config.json" or ".../quantize_config.json"
    int bits = 4;
    int group_size = 128;  // as written: rows per group, or -1 for one group per column
    bool desc_act = false;
    bool sym = true;
    qjit_gptq_format checkpoint_format = QJIT_GPTQ_V1;
};

// Reads the quantization config of `directory`. Throws QJIT_ERROR_IO when there is none,
// QJIT_ERROR_CORRUPT_DATA when it is malformed, QJIT_ERROR_UNSUPPORTED for a method, width,
// group size or checkpoint format qjit cannot import.
CheckpointConfig read_gptq_config(const std::string& directory);

// One quantized linear layer of a checkpoint.
struct CheckpointLayer {
    std::string name;        // the tensor prefix, e.g. "model.layers.0.self_attn.q_proj"
    int64_t k = 0;           // input features
    int64_t n = 0;           // output features
    bool act_order = false;  // a g_idx that is not row / group_size
    qjit_dtype scale_dtype = QJIT_DTYPE_F16;
    std::string format;      // qjit's name of the format it imports to, e.g. "q4g128_asym"
    int64_t bytes = 0;       // of its tensors in the checkpoint
    const SafetensorsTensor* qweight = nullptr;
    const SafetensorsTensor* qzeros = nullptr;
    const SafetensorsTensor* scales = nullptr;
    const SafetensorsTensor* g_idx = nullptr;  // null when absent
};

// A layer's tensors ready for import_gptq: pointers into the mapping, or into copies where a
// tensor's bytes are not aligned for its type in the file (safetensors does not promise it).
// The copies' buffers keep their addresses when the struct is moved.
struct CheckpointTensors {
    qjit_gptq_tensors view{};
    std::vector<std::vector<uint32_t>> aligned_copies;
};

class GptqCheckpoint {
public:
    // Throws as read_gptq_config does, QJIT_ERROR_IO for a missing or unreadable tensor file, and
    // QJIT_ERROR_CORRUPT_DATA naming the file or layer for anything malformed.
    explicit GptqCheckpoint(const std::string& directory);

    const std::string& directory() const { return directory_; }
    const CheckpointConfig& config() const { return config_; }
    // In natural order of their names (layers.2 before layers.10).
    const std::vector<CheckpointLayer>& layers() const { return layers_; }
    // Null when there is no such layer.
    const CheckpointLayer* find(const std::string& name) const;
    CheckpointTensors tensors(const CheckpointLayer& layer) const;

private:
    void map_tensor_files();
    void find_layers();

    std::string directory_;
    CheckpointConfig config_;
    std::vector<std::unique_ptr<MappedFile>> files_;
    std::map<std::string, SafetensorsTensor> tensors_;  // of every file
    std::vector<CheckpointLayer> layers_;
};

}  // namespace qjit
