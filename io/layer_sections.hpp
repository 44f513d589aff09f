// A layer file's sections, by the format feature that owns them (runtime/layer_file.hpp has the
// file's layout). Each feature's codec writes its header fields and sections, reads them back and
// checks them, as packed weights that describe themselves: a file is a header naming its features
// and their sections in file order, so that writing and reading are loops over the features.
//
// Which features a header names follows from its version and fields, as files of versions 1 to 3
// were written: the base (codes, scales, zero points) and the row order are in every file; a
// feature is in a file of its version (FeatureCodec::since) or newer, and its header fields are in
// every such file; a file is written at the oldest version that holds its features. A new feature
// with sections of its own is a codec in layer_sections.cpp, in feature_codecs(), with a new version
// (kLayerFileVersion in layer_file.hpp) so that older readers refuse its files; a scale type stored
// as fp32 scales needs only its scale_dtype name there.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/layer_file.hpp"

namespace qjit {

class FeatureCodec;
// The features of one file, in file order.
using FeatureList = std::vector<const FeatureCodec*>;

// The oldest file version that holds the features: the newest FeatureCodec::since() among them.
uint32_t file_version(const FeatureList& features);

// Whether the base stores the layer's fp32 scales ("scales_f32"): unless a feature of the file
// stores them its own way.
bool base_stores_scales(const FeatureList& features);

// A layer being written.
struct LayerWriting {
    const QuantParams& params;
    const PackedCodes& codes;
    const LowRankFactors& compensator;  // rank 0: none
    FeatureList features;               // the features it has
};

// The sections of a file as they are written: each one's count goes into the header's "sections",
// its bytes after the header, in the order written.
class SectionWriter {
public:
    explicit SectionWriter(nlohmann::json& header) : sections_(header["sections"]) {}

    template <typename Values>
    void section(const char* name, const Values& values) {
        sections_[name] = values.size();
        if (!values.empty())
            pieces_.push_back({reinterpret_cast<const char*>(values.data()), values.size() * sizeof values[0]});
    }
    // A buffer for values converted for the file, kept until the file is written.
    std::vector<uint16_t>& converted() { return converted_.emplace_back(); }
    // The sections' bytes, appended.
    void append_to(std::string& image) const;

private:
    struct Piece {
        const char* data;
        size_t bytes;
    };
    nlohmann::json& sections_;
    std::vector<Piece> pieces_;
    std::deque<std::vector<uint16_t>> converted_;
};

// A layer being read: what its header said so far and what its sections filled in.
struct LayerReading {
    uint32_t version;
    const nlohmann::json& header;
    LayerImage layer;
    uint64_t code_words = 0;  // the codes' count, read with the rest of the base's header
    FeatureList features;     // the features the header names
};

// The sections of a file as they are read, in file order, each against the bytes that remain.
class SectionReader {
public:
    SectionReader(std::string_view image, size_t offset, size_t end, const nlohmann::json& sections)
        : image_(image), offset_(offset), end_(end), sections_(sections) {}

    // `count` elements of T at the current offset (`label` names the section in messages).
    template <typename T, typename Vector = std::vector<T>>
    Vector read(const char* label, uint64_t count);
    // A section of the count the header gives it (what the layer needs is checked after).
    template <typename T, typename Vector = std::vector<T>>
    Vector section(const char* name, const char* label) {
        return read<T, Vector>(label, header_count(name));
    }
    template <typename T>
    std::vector<T> section(const char* name) {
        return section<T>(name, name);
    }
    // A section whose count the header's other fields fix: `expected`, as `what` needs.
    template <typename T>
    std::vector<T> sized_section(const char* name, uint64_t expected, const char* what) {
        const uint64_t count = header_count(name);
        if (count != expected) count_mismatch(name, count, expected, what);
        return read<T>(name, count);
    }
    size_t remaining() const { return end_ - offset_; }

private:
    uint64_t header_count(const char* name) const;
    [[noreturn]] static void count_mismatch(const char* name, uint64_t count, uint64_t expected, const char* what);
    [[noreturn]] static void too_short(const char* label, uint64_t bytes, size_t remaining);

    std::string_view image_;
    size_t offset_;
    size_t end_;
    const nlohmann::json& sections_;
};

template <typename T, typename Vector>
Vector SectionReader::read(const char* label, uint64_t count) {
    if (count > remaining() / sizeof(T)) too_short(label, count * sizeof(T), remaining());
    Vector values(static_cast<size_t>(count));
    if (count > 0) std::memcpy(values.data(), image_.data() + offset_, size_t(count * sizeof(T)));
    offset_ += size_t(count * sizeof(T));
    return values;
}

// The header fields, sections and checks one format feature owns in a layer file.
class FeatureCodec {
public:
    virtual ~FeatureCodec() = default;

    // The oldest file version that holds the feature.
    virtual uint32_t since() const { return kPlainLayerFileVersion; }
    // How a header names it, in messages ("mixed_bits", "a \"low_rank\" compensator").
    virtual const char* header_name() const { return ""; }
    // The header fields it owns (beside the sections): a header of kClosedHeaderVersion or newer
    // holds no others.
    virtual std::vector<std::string> header_fields() const { return {}; }
    // Whether it stores the layer's scales in its own sections, in place of the base's.
    virtual bool stores_scales() const { return false; }

    // Writing: whether the layer has it; its header fields, into a file of version since() or newer
    // whether the layer has it or not; its sections, when the layer has it.
    virtual bool in_layer(const LayerWriting& layer) const = 0;
    virtual void write_header(const LayerWriting&, nlohmann::json&) const {}
    virtual void write(const LayerWriting& layer, SectionWriter& out) const = 0;

    // Reading: whether a file older than since() names it all the same (it is refused); from a
    // file of version since() or newer, its header fields, and whether the header names it.
    virtual bool mentioned(const LayerReading&) const { return false; }
    virtual bool read_header(LayerReading& reading) const = 0;
    // What it adds to the text that names a layer in messages ("mixed widths"); empty: nothing.
    virtual std::string label(const LayerReading&) const { return {}; }
    // Its sections' names, in file order, and the sections read and checked as far as what reads
    // them next needs.
    virtual void section_names(const LayerReading& reading, std::vector<std::string>& names) const = 0;
    virtual void read(SectionReader& in, LayerReading& reading) const = 0;
    // The layer as a whole, once every section is read.
    virtual void check(LayerReading&) const {}
};

// From this version on a header holds only the fields of the features its version has.
inline constexpr uint32_t kClosedHeaderVersion = 3;

// Every feature, in file order: the base (codes, scales, zero points), the row order of act-order
// layers, mixed widths, second-order scales, sparse outliers, the low-rank compensator, permuted
// output columns.
std::span<const FeatureCodec* const> feature_codecs();

// QJIT_ERROR_CORRUPT_DATA with `why`.
[[noreturn]] void corrupt(const std::string& why);

// "a", "a or b", "a, b or c".
std::string one_of(const std::vector<std::string>& names);

}  // namespace qjit
