#include "io/gptq_checkpoint.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <set>

#include "base/directory.hpp"
#include "base/error.hpp"
#include "io/json_document.hpp"
#include "io/json_integer.hpp"
#include "io/natural_order.hpp"
#include "format/weight_format.hpp"

namespace qjit {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

template <typename... Parts>
[[noreturn]] void corrupt(Parts&&... parts) {
    fail(QJIT_ERROR_CORRUPT_DATA, std::forward<Parts>(parts)...);
}

JsonDocument read_json_file(const std::string& path) {
    const MappedFile file(path);
    return JsonDocument(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), "'" + path + "'");
}


// ---- the quantization config ----

const json* find_quantization_config(const std::string& directory, JsonDocument* storage, std::string* file) {
    const std::string config_json = directory + "/config.json";
    if (fs::exists(config_json)) {
        *storage = read_json_file(config_json);
        if (storage->root().is_object() && storage->root().contains("quantization_config")) {
            *file = config_json;
            return &storage->root().at("quantization_config");
        }
    }
    const std::string quantize_config = directory + "/quantize_config.json";
    if (fs::exists(quantize_config)) {
        *storage = read_json_file(quantize_config);
        *file = quantize_config;
        return &storage->root();
    }
    fail(QJIT_ERROR_IO, "checkpoint '", directory,
         "' has neither a config.json with \"quantization_config\" nor a quantize_config.json");
}

int integer_field(const json& config, const char* key, const std::string& file) {
    const auto value = config.find(key);
    if (value == config.end()) corrupt("'", file, "' has no \"", key, "\"");
    const std::optional<int64_t> integer = json_integer(*value, INT32_MIN, INT32_MAX);
    if (!integer) corrupt("'", file, "': \"", key, "\" is ", value->dump(), "; expected an integer");
    return int(*integer);
}

bool bool_field(const json& config, const char* key, bool absent, const std::string& file) {
    const auto value = config.find(key);
    if (value == config.end() || value->is_null()) return absent;
    if (!value->is_boolean()) corrupt("'", file, "': \"", key, "\" is ", value->dump(), "; expected true or false");
    return value->get<bool>();
}

// The value of the first of `keys` present, or `absent`.
std::string string_field(const json& config, std::initializer_list<const char*> keys, const std::string& absent,
                         const std::string& file) {
    for (const char* key : keys) {
        const auto value = config.find(key);
        if (value == config.end() || value->is_null()) continue;
        if (!value->is_string()) corrupt("'", file, "': \"", key, "\" is ", value->dump(), "; expected a string");
        return value->get<std::string>();
    }
    return absent;
}

// ---- the tensor files ----

// A shard named by the index: a plain file name beside the index, never a path elsewhere.
std::string shard_path(const std::string& directory, const std::string& name, const std::string& index) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
        corrupt("'", index, "' names the shard \"", name, "\"; expected a file name in the checkpoint directory");
    return directory + "/" + name;
}

std::vector<std::string> safetensors_in(const std::string& directory) {
    std::vector<std::string> found;
    const std::optional<std::vector<std::string>> names = list_directory(directory);
    if (!names) fail(QJIT_ERROR_IO, "cannot list checkpoint '", directory, "': ", std::strerror(errno));
    for (const std::string& name : *names)
        if (fs::path(name).extension() == ".safetensors") found.push_back(directory + "/" + name);
    std::sort(found.begin(), found.end());
    return found;
}

// ---- a layer's tensors against the config ----

const SafetensorsTensor& layer_tensor(const std::map<std::string, SafetensorsTensor>& tensors,
                                      const std::string& layer, const char* suffix) {
    const auto found = tensors.find(layer + suffix);
    if (found == tensors.end()) corrupt("layer '", layer, "' has a qweight but no '", layer, suffix, "' tensor");
    return found->second;
}

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string text = "[";
    for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

void expect_tensor(const SafetensorsTensor& tensor, const std::string& name, std::initializer_list<const char*> dtypes,
                   const std::vector<int64_t>& shape, const std::string& why) {
    if (std::none_of(dtypes.begin(), dtypes.end(), [&](const char* dtype) { return tensor.dtype == dtype; })) {
        std::string expected;
        for (const char* dtype : dtypes) expected += std::string(expected.empty() ? "" : " or ") + dtype;
        corrupt("tensor '", name, "' has dtype ", tensor.dtype, "; expected ", expected);
    }
    if (tensor.shape != shape)
        corrupt("tensor '", name, "' has shape ", shape_text(tensor.shape), "; expected ", shape_text(shape), " (", why, ")");
}

int32_t read_int32(const uint8_t* data, int64_t index) {
    int32_t value;
    std::memcpy(&value, data + index * 4, 4);
    return value;
}

qjit_dtype scale_dtype_of(const std::string& dtype) {
    return dtype == "F16" ? QJIT_DTYPE_F16 : dtype == "BF16" ? QJIT_DTYPE_BF16 : QJIT_DTYPE_F32;
}

CheckpointLayer describe_layer(const std::string& name, const std::map<std::string, SafetensorsTensor>& tensors,
                               const CheckpointConfig& config) {
    CheckpointLayer layer;
    layer.name = name;
    layer.qweight = &layer_tensor(tensors, name, ".qweight");
    layer.qzeros = &layer_tensor(tensors, name, ".qzeros");
    layer.scales = &layer_tensor(tensors, name, ".scales");
    const auto g_idx = tensors.find(name + ".g_idx");
    layer.g_idx = g_idx == tensors.end() ? nullptr : &g_idx->second;

    const int bits = config.bits;
    const SafetensorsTensor& qweight = *layer.qweight;
    if (qweight.shape.size() != 2 || qweight.dtype != "I32")
        corrupt("tensor '", name, ".qweight' has dtype ", qweight.dtype, " and shape ", shape_text(qweight.shape),
                "; expected I32 [K*bits/32][N]");
    const int64_t packed_rows = qweight.shape[0];
    layer.n = qweight.shape[1];
    if (layer.g_idx != nullptr) {
        if (layer.g_idx->shape.size() != 1)
            corrupt("tensor '", name, ".g_idx' has shape ", shape_text(layer.g_idx->shape), "; expected [K]");
        layer.k = layer.g_idx->shape[0];
    } else {
        if (packed_rows * 32 % bits != 0)
            corrupt("tensor '", name, ".qweight' has ", packed_rows, " rows, which hold no whole number of ", bits,
                    "-bit rows; without a g_idx K cannot be known");
        layer.k = packed_rows * 32 / bits;
    }
    if (layer.k < 1 || layer.k >= kMaxDimension || layer.n < 1 || layer.n >= kMaxDimension ||
        layer.k > kMaxWeights / layer.n)
        corrupt("layer '", name, "' is ", layer.k, " x ", layer.n, "; K and N must be 1 .. 2^31 - 1 and K x N at most 2^36");
    if (layer.g_idx != nullptr)
        expect_tensor(*layer.g_idx, name + ".g_idx", {"I32"}, {layer.k}, "one group index per input row");
    expect_tensor(qweight, name + ".qweight", {"I32"}, {(layer.k * bits + 31) / 32, layer.n},
                  concat("K = ", layer.k, " rows of ", bits, " bits packed in int32 words"));
    const int64_t rows_per_group = config.group_size == QJIT_GROUP_PER_COLUMN ? layer.k : config.group_size;
    const int64_t groups = (layer.k + rows_per_group - 1) / rows_per_group;
    const std::string grouping = concat("K = ", layer.k, " in groups of ", rows_per_group, " rows");
    expect_tensor(*layer.scales, name + ".scales", {"F16", "BF16", "F32"}, {groups, layer.n}, grouping);
    expect_tensor(*layer.qzeros, name + ".qzeros", {"I32"}, {groups, (layer.n * bits + 31) / 32},
                  grouping + concat(", N = ", layer.n, " zero points of ", bits, " bits packed in int32 words"));

    if (layer.g_idx != nullptr)
        for (int64_t row = 0; row < layer.k && !layer.act_order; ++row)
            layer.act_order = read_int32(layer.g_idx->data, row) != row / rows_per_group;
    layer.scale_dtype = scale_dtype_of(layer.scales->dtype);
    layer.bytes = int64_t(qweight.bytes + layer.qzeros->bytes + layer.scales->bytes +
                          (layer.g_idx != nullptr ? layer.g_idx->bytes : 0));
    WeightFormat format;
    format.k = layer.k;
    format.n = layer.n;
    format.bits = bits;
    format.group_size = rows_per_group;
    format.symmetric = config.sym;
    format.scale_type = scale_type_of(layer.scale_dtype);
    format.act_order = layer.act_order;
    layer.format = format.name();
    return layer;
}

// The tensor's bytes where int32 or fp32 reads of them are aligned: in place when the file has
// them aligned, else copied into `copies`.
const void* aligned_data(const SafetensorsTensor& tensor, std::vector<std::vector<uint32_t>>* copies) {
    // An empty tensor is returned as it is: an empty copy's data() may be null, which memcpy may not take.
    if (tensor.bytes == 0 || reinterpret_cast<uintptr_t>(tensor.data) % alignof(uint32_t) == 0) return tensor.data;
    copies->emplace_back((tensor.bytes + 3) / 4);
    std::memcpy(copies->back().data(), tensor.data, tensor.bytes);
    return copies->back().data();
}

}  // namespace

CheckpointConfig read_gptq_config(const std::string& directory) {
    JsonDocument storage;
    CheckpointConfig config;
    const json* fields = find_quantization_config(directory, &storage, &config.file);
    const std::string& file = config.file;
    if (!fields->is_object()) corrupt("'", file, "': the quantization config is not a JSON object");
    const std::string method = string_field(*fields, {"quant_method"}, "gptq", file);
    if (method != "gptq")
        fail(QJIT_ERROR_UNSUPPORTED, "'", file, "': quant_method is \"", method, "\"; qjit imports \"gptq\" checkpoints");
    config.bits = integer_field(*fields, "bits", file);
    if (config.bits != 2 && config.bits != 3 && config.bits != 4 && config.bits != 8)
        fail(QJIT_ERROR_UNSUPPORTED, "'", file, "': bits is ", config.bits, "; qjit supports 2, 3, 4 and 8");
    config.group_size = integer_field(*fields, "group_size", file);
    const int g = config.group_size;
    if (g != QJIT_GROUP_PER_COLUMN && g != 16 && g != 32 && g != 64 && g != 128 && g != 256)
        fail(QJIT_ERROR_UNSUPPORTED, "'", file, "': group_size is ", g, "; qjit supports 16, 32, 64, 128, 256 and -1");
    config.desc_act = bool_field(*fields, "desc_act", false, file);
    config.sym = bool_field(*fields, "sym", true, file);
    const std::string format = string_field(*fields, {"checkpoint_format", "format"}, "gptq", file);
    if (format == "gptq")
        config.checkpoint_format = QJIT_GPTQ_V1;
    else if (format == "gptq_v2")
        config.checkpoint_format = QJIT_GPTQ_V2;
    else
        fail(QJIT_ERROR_UNSUPPORTED, "'", file, "': checkpoint_format is \"", format,
             "\"; qjit imports \"gptq\" (v1) and \"gptq_v2\"");
    return config;
}

GptqCheckpoint::GptqCheckpoint(const std::string& directory) : directory_(directory) {
    std::error_code error;
    if (!fs::is_directory(directory, error))
        fail(QJIT_ERROR_IO, "checkpoint '", directory, "' is not a directory", error ? ": " + error.message() : "");
    config_ = read_gptq_config(directory);
    map_tensor_files();
    find_layers();
}

void GptqCheckpoint::map_tensor_files() {
    // Every file's tensors in one map: a layer's tensors may lie in different shards.
    std::map<std::string, std::string> file_of_tensor;
    auto add_file = [&](const std::string& path) {
        files_.push_back(std::make_unique<MappedFile>(path));
        const MappedFile& file = *files_.back();
        for (auto& [name, tensor] : parse_safetensors(file.data(), file.size(), path)) {
            if (!tensors_.emplace(name, tensor).second)
                corrupt("tensor '", name, "' is stored twice: in '", file_of_tensor[name], "' and in '", path, "'");
            file_of_tensor[name] = path;
        }
    };
    const std::string index_path = directory_ + "/model.safetensors.index.json";
    if (fs::exists(index_path)) {
        const JsonDocument document = read_json_file(index_path);
        const json& index = document.root();
        if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
            corrupt("'", index_path, "' has no \"weight_map\" object");
        std::set<std::string> shards;
        for (const auto& [tensor, shard] : index["weight_map"].items()) {
            if (!shard.is_string()) corrupt("'", index_path, "' maps tensor '", tensor, "' to ", shard.dump(), ", not a file name");
            shards.insert(shard.get<std::string>());
        }
        for (const std::string& shard : shards) add_file(shard_path(directory_, shard, index_path));
        for (const auto& [tensor, shard] : index["weight_map"].items())
            if (file_of_tensor[tensor] != shard_path(directory_, shard.get<std::string>(), index_path))
                corrupt("'", index_path, "' puts tensor '", tensor, "' in '", shard.get<std::string>(),
                        "', which does not hold it (a missing tensor or a truncated shard)");
        return;
    }
    std::vector<std::string> candidates;
    if (fs::exists(directory_ + "/model.safetensors")) candidates = {directory_ + "/model.safetensors"};
    else candidates = safetensors_in(directory_);
    if (candidates.empty()) fail(QJIT_ERROR_IO, "checkpoint '", directory_, "' has no .safetensors file");
    if (candidates.size() > 1)
        corrupt("checkpoint '", directory_, "' has ", candidates.size(),
                " .safetensors files but no model.safetensors.index.json to say which tensors each holds");
    add_file(candidates.front());
}

void GptqCheckpoint::find_layers() {
    static const std::string kSuffix = ".qweight";
    for (const auto& [name, tensor] : tensors_)
        if (name.size() > kSuffix.size() && name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0)
            layers_.push_back(describe_layer(name.substr(0, name.size() - kSuffix.size()), tensors_, config_));
    if (layers_.empty()) corrupt("checkpoint '", directory_, "' holds no GPTQ layer (no tensor named *.qweight)");
    sort_by_natural_name(layers_);
}

const CheckpointLayer* GptqCheckpoint::find(const std::string& name) const { return find_named(layers_, name); }

CheckpointTensors GptqCheckpoint::tensors(const CheckpointLayer& layer) const {
    CheckpointTensors out;
    qjit_gptq_tensors& view = out.view;
    view.bits = config_.bits;
    view.group_size = config_.group_size;
    view.qweight = static_cast<const int32_t*>(aligned_data(*layer.qweight, &out.aligned_copies));
    view.qzeros = static_cast<const int32_t*>(aligned_data(*layer.qzeros, &out.aligned_copies));
    view.scales = aligned_data(*layer.scales, &out.aligned_copies);
    view.scale_dtype = layer.scale_dtype;
    view.g_idx = layer.g_idx ? static_cast<const int32_t*>(aligned_data(*layer.g_idx, &out.aligned_copies)) : nullptr;
    view.checkpoint_format = config_.checkpoint_format;
    return out;
}

}  // namespace qjit
