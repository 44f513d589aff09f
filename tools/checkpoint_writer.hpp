// Writes GPTQ checkpoint directories the way AutoGPTQ and GPTQModel lay them out (config,
// safetensors, optional shards and index), for qjit's tests and benchmarks: the loader is tested
// against checkpoints whose contents are known, and timed on Llama-shaped ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qjit/qjit.h"

namespace qjit_tools {

// One tensor of a safetensors file: `bytes` bytes at `data` (copied when written).
struct SafetensorsEntry {
    std::string name;
    std::string dtype;  // "I32", "F16", "BF16", "F32", ...
    std::vector<int64_t> shape;
    const void* data = nullptr;
    size_t bytes = 0;
};

// A safetensors file holding `entries` in the given order, back to back; the header is padded
// with spaces to a multiple of 8 bytes, as the reference writer does.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries);

// A layer to write: its GPTQ tensors with v2 zero points (the zero points themselves); the writer
// applies the v1 rule when the checkpoint is v1. g_idx may be NULL (then no g_idx tensor).
struct CheckpointLayerTensors {
    std::string name;  // tensor prefix, e.g. "model.layers.0.mlp.up_proj"
    int64_t k = 0;
    int64_t n = 0;
    qjit_gptq_tensors tensors{};
};

struct CheckpointOptions {
    qjit_gptq_format format = QJIT_GPTQ_V2;
    bool quantize_config_json = false;  // true: quantize_config.json (older AutoGPTQ); false: config.json
    int shards = 1;                     // > 1: model-0000i-of-0000S.safetensors and an index
    bool desc_act = false;
    bool sym = false;
};

// Writes `layers` (all of one bits and group size, taken from the first) into `directory`, which
// must exist. Throws std::runtime_error when a file cannot be written.
void write_gptq_checkpoint(const std::string& directory, const std::vector<CheckpointLayerTensors>& layers,
                           const CheckpointOptions& options);

// The qzeros words a v1 writer stores for v2 words [groups][ceil(n*bits/32)]: for 2, 4 and 8 bits a
// 1 in every field subtracted from each whole word (borrows crossing fields), for 3 bits 1
// subtracted per field, modulo 8 (as GPTQModel writes v1).
std::vector<int32_t> gptq_v1_qzeros(const int32_t* v2_qzeros, int64_t groups, int64_t n, int bits);

}  // namespace qjit_tools
