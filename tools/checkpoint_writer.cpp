#include "tools/checkpoint_writer.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace qjit_tools {

namespace {

using nlohmann::json;

void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out.flush()) throw std::runtime_error("cannot write '" + path + "'");
}

// Field `index` of a little-endian bitstream of `bits`-bit fields in uint32 words.
uint32_t get_field(const std::vector<uint32_t>& words, int bits, int64_t index) {
    uint32_t value = 0;
    for (int bit = 0; bit < bits; ++bit) {
        const int64_t at = index * bits + bit;
        value |= ((words[size_t(at / 32)] >> (at % 32)) & 1u) << bit;
    }
    return value;
}

void set_field(std::vector<uint32_t>& words, int bits, int64_t index, uint32_t value) {
    for (int bit = 0; bit < bits; ++bit) {
        const int64_t at = index * bits + bit;
        words[size_t(at / 32)] &= ~(1u << (at % 32));
        words[size_t(at / 32)] |= ((value >> bit) & 1u) << (at % 32);
    }
}

const char* dtype_name(qjit_dtype dtype) {
    return dtype == QJIT_DTYPE_F16 ? "F16" : dtype == QJIT_DTYPE_BF16 ? "BF16" : "F32";
}

// A layer's tensors as safetensors entries; v1 qzeros are kept alive in `storage`.
void add_layer_entries(const CheckpointLayerTensors& layer, qjit_gptq_format format,
                       std::vector<std::vector<int32_t>>* storage, std::vector<SafetensorsEntry>* entries) {
    const qjit_gptq_tensors& t = layer.tensors;
    const int64_t rows_per_group = t.group_size == QJIT_GROUP_PER_COLUMN ? layer.k : t.group_size;
    const int64_t groups = (layer.k + rows_per_group - 1) / rows_per_group;
    const int64_t qweight_rows = (layer.k * t.bits + 31) / 32;
    const int64_t qzeros_columns = (layer.n * t.bits + 31) / 32;
    const int32_t* qzeros = t.qzeros;
    if (format == QJIT_GPTQ_V1) {
        storage->push_back(gptq_v1_qzeros(t.qzeros, groups, layer.n, t.bits));
        qzeros = storage->back().data();
    }
    const size_t scale_bytes = t.scale_dtype == QJIT_DTYPE_F32 ? 4 : 2;
    entries->push_back({layer.name + ".qweight", "I32", {qweight_rows, layer.n}, t.qweight,
                        size_t(qweight_rows * layer.n) * 4});
    entries->push_back({layer.name + ".qzeros", "I32", {groups, qzeros_columns}, qzeros, size_t(groups * qzeros_columns) * 4});
    entries->push_back({layer.name + ".scales", dtype_name(t.scale_dtype), {groups, layer.n}, t.scales,
                        size_t(groups * layer.n) * scale_bytes});
    if (t.g_idx != nullptr) entries->push_back({layer.name + ".g_idx", "I32", {layer.k}, t.g_idx, size_t(layer.k) * 4});
}

std::string shard_name(int shard, int shards) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", shard + 1, shards);
    return name;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries) {
    json header = json::object();
    size_t offset = 0;
    for (const SafetensorsEntry& entry : entries) {
        header[entry.name] = {{"dtype", entry.dtype}, {"shape", entry.shape}, {"data_offsets", {offset, offset + entry.bytes}}};
        offset += entry.bytes;
    }
    std::string text = header.dump();
    text.resize((text.size() + 7) / 8 * 8, ' ');
    std::ofstream out(path, std::ios::binary);
    uint64_t length = text.size();
    for (int i = 0; i < 8; ++i) out.put(char(length >> (8 * i)));  // little-endian
    out << text;
    for (const SafetensorsEntry& entry : entries) out.write(static_cast<const char*>(entry.data), std::streamsize(entry.bytes));
    if (!out.flush()) throw std::runtime_error("cannot write '" + path + "'");
}

std::vector<int32_t> gptq_v1_qzeros(const int32_t* v2_qzeros, int64_t groups, int64_t n, int bits) {
    const int64_t row_words = (n * bits + 31) / 32;
    std::vector<int32_t> v1(v2_qzeros, v2_qzeros + groups * row_words);
    if (bits != 3) {
        const uint32_t one_per_field = bits == 2 ? 0x55555555u : bits == 4 ? 0x11111111u : 0x01010101u;
        for (int32_t& word : v1) word = int32_t(uint32_t(word) - one_per_field);
        return v1;
    }
    for (int64_t g = 0; g < groups; ++g) {
        std::vector<uint32_t> row(v1.begin() + g * row_words, v1.begin() + (g + 1) * row_words);
        for (int64_t c = 0; c < n; ++c) set_field(row, bits, c, (get_field(row, bits, c) - 1u) & 7u);
        std::copy(row.begin(), row.end(), v1.begin() + g * row_words);
    }
    return v1;
}

void write_gptq_checkpoint(const std::string& directory, const std::vector<CheckpointLayerTensors>& layers,
                           const CheckpointOptions& options) {
    if (layers.empty()) throw std::runtime_error("write_gptq_checkpoint: no layers");
    const qjit_gptq_tensors& first = layers.front().tensors;
    const json quantization = {{"quant_method", "gptq"}, {"bits", first.bits}, {"group_size", first.group_size},
                               {"desc_act", options.desc_act}, {"sym", options.sym},
                               {"checkpoint_format", options.format == QJIT_GPTQ_V1 ? "gptq" : "gptq_v2"}};
    if (options.quantize_config_json)
        write_file(directory + "/quantize_config.json", quantization.dump(2));
    else
        write_file(directory + "/config.json",
                   json{{"model_type", "llama"}, {"quantization_config", quantization}}.dump(2));

    // Layers go to shards in turn, in order; each shard holds a contiguous run of layers.
    const int shards = std::max(1, std::min<int>(options.shards, int(layers.size())));
    std::vector<std::vector<int32_t>> storage;
    storage.reserve(layers.size());
    json weight_map = json::object();
    for (int shard = 0; shard < shards; ++shard) {
        std::vector<SafetensorsEntry> entries;
        const size_t begin = layers.size() * size_t(shard) / size_t(shards);
        const size_t end = layers.size() * size_t(shard + 1) / size_t(shards);
        for (size_t i = begin; i < end; ++i) add_layer_entries(layers[i], options.format, &storage, &entries);
        const std::string file = shards == 1 ? "model.safetensors" : shard_name(shard, shards);
        write_safetensors(directory + "/" + file, entries);
        for (const SafetensorsEntry& entry : entries) weight_map[entry.name] = file;
    }
    if (shards > 1)
        write_file(directory + "/model.safetensors.index.json", json{{"metadata", json::object()}, {"weight_map", weight_map}}.dump(2));
}

}  // namespace qjit_tools
