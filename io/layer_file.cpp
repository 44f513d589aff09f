#include "io/layer_file.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "io/framed_file.hpp"
#include "io/layer_sections.hpp"

namespace qjit {

namespace {

constexpr FileKind kLayerFile{"QJITLAYR", "layer", kPlainLayerFileVersion, kLayerFileVersion};

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

std::string serialize_layer(const QuantParams& params, const PackedCodes& codes, const LowRankFactors& compensator) {
    LayerWriting writing{params, codes, compensator, {}};
    for (const FeatureCodec* feature : feature_codecs())
        if (feature->in_layer(writing)) writing.features.push_back(feature);
    const uint32_t version = file_version(writing.features);
    nlohmann::json header = nlohmann::json::object();
    for (const FeatureCodec* feature : feature_codecs())
        if (feature->since() <= version) feature->write_header(writing, header);
    SectionWriter sections(header);
    for (const FeatureCodec* feature : writing.features) feature->write(writing, sections);
    return write_framed(kLayerFile, version, header, [&](std::string& image) { sections.append_to(image); });
}

LayerImage deserialize_layer(std::string_view image) {
    const Frame frame = read_framed(kLayerFile, image);
    return reading_contents([&] {
        LayerReading reading{frame.version, frame.header.root(), {}, 0, {}};
        read_features(reading);
        const nlohmann::json& sections = frame.header.root().at("sections");
        check_section_names(reading, sections);
        SectionReader in(image, frame.body_begin, frame.body_end, sections);
        for (const FeatureCodec* feature : reading.features) feature->read(in, reading);
        if (in.remaining() != 0) corrupt(concat(in.remaining(), " unexpected bytes after the last section"));
        for (const FeatureCodec* feature : reading.features) feature->check(reading);
        return std::move(reading.layer);
    });
}

}  // namespace qjit
