#include "runtime/layer_file.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/crc32.hpp"
#include "base/error.hpp"
#include "base/mapped_file.hpp"
#include "base/replace_file.hpp"
#include "runtime/layer_sections.hpp"

namespace qjit {

namespace {

constexpr char kMagic[8] = {'Q', 'J', 'I', 'T', 'L', 'A', 'Y', 'R'};
constexpr size_t kPreambleBytes = sizeof kMagic + 2 * sizeof(uint32_t);

void append_u32(std::string& out, uint32_t value) { out.append(reinterpret_cast<const char*>(&value), sizeof value); }

uint32_t read_u32(std::string_view image, size_t offset) {
    uint32_t value;
    std::memcpy(&value, image.data() + offset, sizeof value);
    return value;
}

// The features the header names, from its version and fields: a feature newer than the file's
// version is refused if the header names it anyway, and the version must be the oldest that holds
// the features named.
void read_features(LayerReading& reading) {
    const uint32_t version = reading.version;
    for (const FeatureCodec* feature : feature_codecs()) {
        if (version < feature->since()) {
            if (feature->mentioned(reading))
                corrupt(concat("a version ", version, " file with ", feature->header_name(), " (version ",
                               feature->since(), " only)"));
        } else if (feature->read_header(reading)) {
            reading.features.push_back(feature);
        }
    }
    if (version != file_version(reading.features)) {
        std::vector<std::string> names;
        for (const FeatureCodec* feature : feature_codecs())
            if (feature->since() == version) names.push_back(feature->header_name());
        corrupt(concat("a version ", version, " file without ", one_of(names)));
    }
    // A newer header holds no field its version's features do not own (a misnamed one is also
    // missing above).
    if (version >= kClosedHeaderVersion)
        for (const auto& item : reading.header.items()) {
            const auto owns = [&](const FeatureCodec* feature) {
                const std::vector<std::string> fields = feature->header_fields();
                return feature->since() <= version &&
                       std::find(fields.begin(), fields.end(), item.key()) != fields.end();
            };
            if (std::none_of(feature_codecs().begin(), feature_codecs().end(), owns))
                corrupt(concat("header field '", item.key(), "' is not one a version ", version, " file has"));
        }
}

// The header names exactly the sections of the features it names.
void check_section_names(const LayerReading& reading, const nlohmann::json& sections) {
    std::vector<std::string> expected, labels;
    for (const FeatureCodec* feature : reading.features) {
        feature->section_names(reading, expected);
        if (std::string label = feature->label(reading); !label.empty()) labels.push_back(std::move(label));
    }
    std::string features;
    for (const std::string& label : labels) features += (features.empty() ? " (" : ", ") + label;
    const std::string layer_text =
        concat("a version ", reading.version, " layer", features, features.empty() ? "" : ")");
    for (const std::string& name : expected)
        if (!sections.contains(name)) corrupt(concat("section '", name, "' is missing from the header of ", layer_text));
    for (const auto& item : sections.items())
        if (std::find(expected.begin(), expected.end(), item.key()) == expected.end())
            corrupt(concat("section '", item.key(), "' is not one ", layer_text, " has"));
}

}  // namespace

std::string serialize_layer(const qjit_linear& layer) {
    const LowRankFactors compensator = unpack_low_rank(layer);
    LayerWriting writing{layer.params, layer.codes, compensator, {}};
    for (const FeatureCodec* feature : feature_codecs())
        if (feature->in_layer(writing)) writing.features.push_back(feature);
    const uint32_t version = file_version(writing.features);
    nlohmann::json header = nlohmann::json::object();
    for (const FeatureCodec* feature : feature_codecs())
        if (feature->since() <= version) feature->write_header(writing, header);
    SectionWriter sections(header);
    for (const FeatureCodec* feature : writing.features) feature->write(writing, sections);
    const std::string header_text = header.dump();

    std::string image(kMagic, sizeof kMagic);
    append_u32(image, version);
    append_u32(image, uint32_t(header_text.size()));
    image += header_text;
    sections.append_to(image);
    append_u32(image, crc32(image.data(), image.size()));
    return image;
}

LayerImage deserialize_layer(std::string_view image) {
    if (image.size() < kPreambleBytes + sizeof(uint32_t))
        corrupt(concat("file is ", image.size(), " bytes, too short for a qjit layer (truncated?)"));
    if (std::memcmp(image.data(), kMagic, sizeof kMagic) != 0) corrupt("not a qjit layer file (bad magic)");
    const uint32_t version = read_u32(image, sizeof kMagic);
    if (version < kPlainLayerFileVersion || version > kLayerFileVersion)
        fail(QJIT_ERROR_UNSUPPORTED, "layer file format version ", version, "; this qjit reads versions ",
             kPlainLayerFileVersion, " to ", kLayerFileVersion);
    const size_t end = image.size() - sizeof(uint32_t);
    const uint32_t stored_crc = read_u32(image, end), actual_crc = crc32(image.data(), end);
    if (stored_crc != actual_crc) corrupt("checksum mismatch: the file is corrupt or truncated");

    const uint32_t header_bytes = read_u32(image, sizeof kMagic + sizeof(uint32_t));
    if (header_bytes > end - kPreambleBytes) corrupt("header length runs past the end of the file");
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(image.substr(kPreambleBytes, header_bytes));
    } catch (const nlohmann::json::exception& e) {
        corrupt(concat("header is not valid JSON: ", e.what()));
    }

    try {
        if (!header.is_object()) corrupt("header is not a JSON object");
        LayerReading reading{version, header, {}, 0, {}};
        read_features(reading);
        const nlohmann::json& sections = header.at("sections");
        check_section_names(reading, sections);
        SectionReader in(image, kPreambleBytes + header_bytes, end, sections);
        for (const FeatureCodec* feature : reading.features) feature->read(in, reading);
        if (in.remaining() != 0) corrupt(concat(in.remaining(), " unexpected bytes after the last section"));
        for (const FeatureCodec* feature : reading.features) feature->check(reading);
        return std::move(reading.layer);
    } catch (const nlohmann::json::exception& e) {
        corrupt(concat("header is missing a field or has a wrong type: ", e.what()));
    } catch (const Error& e) {
        if (e.status() != QJIT_ERROR_INVALID_ARGUMENT) throw;
        corrupt(concat("inconsistent contents: ", e.what()));
    }
}

void save_layer(const qjit_linear& layer, const std::string& path) { replace_file(path, serialize_layer(layer)); }

std::unique_ptr<qjit_linear> load_layer(qjit_context* context, const std::string& path) {
    // Mapped, not read: nothing is allocated for the file itself, and a directory or a device
    // (/dev/zero) is refused as not a regular file before a byte is read.
    const MappedFile file(path);
    try {
        LayerImage loaded = deserialize_layer(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()));
        return make_linear(context, std::move(loaded.params), std::move(loaded.codes), std::move(loaded.compensator));
    } catch (const Error& e) {
        fail(e.status(), "'", path, "': ", e.what());
    }
}

}  // namespace qjit
