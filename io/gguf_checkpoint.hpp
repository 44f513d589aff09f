// A GGUF file opened as a checkpoint (qjit_checkpoint_open on a .gguf file): every weight tensor of a
// type qjit imports exactly (io/gguf_import.hpp) is a layer, listed with the format it imports to;
// tensors of other types (F32 and F16 norms and embeddings) are not layers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/weight_format.hpp"
#include "io/gguf_file.hpp"

namespace qjit {

struct GgufCheckpointLayer {
    std::string name;        // the tensor's, e.g. "blk.0.attn_q.weight"
    int64_t k = 0;           // input features: the tensor's dims[0]
    int64_t n = 0;           // output features: its dims[1]
    GgmlType type = GgmlType::F32;
    WeightFormat format;     // what it imports to
    std::string format_name; // format.name(), e.g. "q4g32_sym"
    const uint8_t* data = nullptr;  // its blocks, in the file's mapping
    size_t bytes = 0;
};

class GgufCheckpoint {
public:
    // Throws as GgufFile::open does (QJIT_ERROR_IO, QJIT_ERROR_CORRUPT_DATA naming the file), and
    // names the file and tensor when a tensor's shape is not one qjit imports.
    explicit GgufCheckpoint(const std::string& path);
    // The same over a file parsed already (the fuzz target's).
    GgufCheckpoint(std::shared_ptr<const GgufFile> file, std::string path);

    const std::string& path() const { return path_; }
    // In natural order of their names (blk.2 before blk.10).
    const std::vector<GgufCheckpointLayer>& layers() const { return layers_; }
    // Null when there is no such layer.
    const GgufCheckpointLayer* find(const std::string& name) const;

private:
    std::string path_;
    std::shared_ptr<const GgufFile> file_;  // keeps the layers' blocks mapped
    std::vector<GgufCheckpointLayer> layers_;
};

}  // namespace qjit
