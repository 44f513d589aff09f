#include "runtime/layer_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/crc32.hpp"
#include "base/error.hpp"
#include "base/half.hpp"
#include "base/mapped_file.hpp"
#include "format/json_integer.hpp"

namespace qjit {

namespace {

constexpr char kMagic[8] = {'Q', 'J', 'I', 'T', 'L', 'A', 'Y', 'R'};
constexpr size_t kPreambleBytes = sizeof kMagic + 2 * sizeof(uint32_t);

template <typename T>
void append_raw(std::string& out, const T* data, size_t count) {
    if (count > 0) out.append(reinterpret_cast<const char*>(data), count * sizeof(T));
}

void append_u32(std::string& out, uint32_t value) { append_raw(out, &value, 1); }

uint32_t read_u32(std::string_view image, size_t offset) {
    uint32_t value;
    std::memcpy(&value, image.data() + offset, sizeof value);
    return value;
}

[[noreturn]] void corrupt(const std::string& why) { fail(QJIT_ERROR_CORRUPT_DATA, why); }

// Reads the section of `count` elements at `offset`, advancing it, into the vector type the
// layer keeps it in (the codes: PackedCodes::Words).
template <typename T, typename Vector = std::vector<T>>
Vector read_section(std::string_view image, size_t& offset, size_t end, const char* name, uint64_t count) {
    const uint64_t bytes = count * sizeof(T);
    if (count > (end - offset) / sizeof(T)) corrupt(concat("section '", name, "' needs ", bytes, " bytes; ",
                                                           end - offset, " remain"));
    Vector values(static_cast<size_t>(count));
    if (count > 0) std::memcpy(values.data(), image.data() + offset, size_t(bytes));
    offset += size_t(bytes);
    return values;
}

// A header field that must be a JSON integer in [lo, hi]: a float such as 4.9e54 is refused
// before any conversion (converting an out-of-range float to an integer is undefined).
int64_t integer_field(const nlohmann::json& object, const char* key, int64_t lo, int64_t hi) {
    const nlohmann::json& value = object.at(key);
    const std::optional<int64_t> integer = json_integer(value, lo, hi);
    if (!integer) corrupt(concat("header field '", key, "' is ", value.dump(), "; expected an integer in ", lo, " .. ", hi));
    return *integer;
}

// A header field that must be true or false.
bool bool_field(const nlohmann::json& object, const char* key) {
    if (!object.contains(key)) corrupt(concat("header field '", key, "' is missing"));
    const nlohmann::json& value = object.at(key);
    if (!value.is_boolean()) corrupt(concat("header field '", key, "' is ", value.dump(), "; expected true or false"));
    return value.get<bool>();
}

// A section whose size the header's other fields fix: its count must be `expected`.
uint64_t sized_section(const nlohmann::json& sections, const char* name, uint64_t expected, const char* what) {
    constexpr int64_t kAnyCount = int64_t(1) << 62;
    const uint64_t count = uint64_t(integer_field(sections, name, 0, kAnyCount));
    if (count != expected)
        corrupt(concat("section '", name, "' holds ", count, " values; ", what, " needs ", expected));
    return count;
}

// Version 3's sections (format/quantized_matrix.hpp): group widths of a mixed layer, second-order
// scales, sparse outliers.
constexpr const char* kGroupBits = "group_bits_u8";
constexpr const char* kScale2Codes = "scale2_codes_u8";
constexpr const char* kScale2Scales = "scale2_scales_f16";
constexpr const char* kScale2Zeros = "scale2_zeros_f16";
constexpr const char* kOutlierStarts = "outlier_starts_i64";
constexpr const char* kOutlierRows = "outlier_rows_i32";
constexpr const char* kOutlierValues = "outlier_values_f16";

// Whether a layer needs version 3: mixed widths, second-order scales or sparse outliers.
bool has_version3_features(const WeightFormat& format) {
    return !format.uniform_bits() || format.second_order_scales() || format.outliers > 0;
}

const char* scale_dtype_name(ScaleType type) {
    switch (type) {
        case ScaleType::F16: return "f16";
        case ScaleType::F32: return "f32";
        case ScaleType::SecondOrder: return "second_order";
    }
    return "unknown";
}

// The names of the sections a layer stores, in file order: by its features (format/weight_format.hpp)
// and its compensator's bits (0: none).
std::vector<std::string> section_names(bool mixed, bool second_order, bool outliers, int low_rank_bits) {
    std::vector<std::string> names = {"codes_u32"};
    if (!second_order) names.push_back("scales_f32");
    names.insert(names.end(), {"zeros_u16", "row_order_i32"});
    if (mixed) names.push_back(kGroupBits);
    if (second_order) names.insert(names.end(), {kScale2Codes, kScale2Scales, kScale2Zeros});
    if (outliers) names.insert(names.end(), {kOutlierStarts, kOutlierRows, kOutlierValues});
    if (low_rank_bits == 16) names.insert(names.end(), {"u_f16", "vt_f16"});
    else if (low_rank_bits > 0) names.insert(names.end(), {"u_codes_u8", "u_scales_f32", "vt_codes_u8", "vt_scales_f32"});
    return names;
}

// The compensator's sections: each factor (dimension x rank) as codes and component scales, or
// fp16 values.
struct FactorSections {
    const char* codes;
    const char* scales;
    const char* halves;
};
constexpr FactorSections kUSections{"u_codes_u8", "u_scales_f32", "u_f16"};
constexpr FactorSections kVtSections{"vt_codes_u8", "vt_scales_f32", "vt_f16"};

void describe_factor(nlohmann::json& sections, const LowRankFactor& factor, int bits, const FactorSections& names) {
    if (bits == 16) {
        sections[names.halves] = factor.values.size();
    } else {
        sections[names.codes] = factor.codes.codes.size();
        sections[names.scales] = factor.codes.params.scales.size();
    }
}

void append_factor(std::string& image, const LowRankFactor& factor, int bits) {
    if (bits == 16) {
        std::vector<uint16_t> halves(factor.values.size());
        for (size_t i = 0; i < halves.size(); ++i) halves[i] = float_to_half(factor.values[i]);
        append_raw(image, halves.data(), halves.size());
    } else {
        append_raw(image, factor.codes.codes.data(), factor.codes.codes.size());
        append_raw(image, factor.codes.params.scales.data(), factor.codes.params.scales.size());
    }
}

// A factor of `rows` x rank back from its sections; validate(LowRankFactors) checks it after.
LowRankFactor read_factor(std::string_view image, size_t& offset, size_t end, const nlohmann::json& sections, int bits,
                          int64_t rows, int rank, const FactorSections& names) {
    constexpr int64_t kAnyCount = int64_t(1) << 62;
    LowRankFactor factor;
    if (bits == 16) {
        const std::vector<uint16_t> halves = read_section<uint16_t>(
            image, offset, end, names.halves, uint64_t(integer_field(sections, names.halves, 0, kAnyCount)));
        factor.values.resize(halves.size());
        for (size_t i = 0; i < halves.size(); ++i) factor.values[i] = half_to_float(halves[i]);
        return factor;
    }
    QuantParams& p = factor.codes.params;
    factor.codes.codes = read_section<uint8_t>(image, offset, end, names.codes,
                                               uint64_t(integer_field(sections, names.codes, 0, kAnyCount)));
    p.scales = read_section<float>(image, offset, end, names.scales,
                                   uint64_t(integer_field(sections, names.scales, 0, kAnyCount)));
    p.k = rows;
    p.n = rank;
    p.bits = bits;
    p.group_size = rows;
    p.symmetric = true;
    p.zeros.assign(p.scales.size(), uint16_t(1u << (bits - 1)));
    return factor;
}

}  // namespace

std::string serialize_layer(const qjit_linear& layer) {
    const QuantParams& p = layer.params;
    nlohmann::json header = {
        {"qjit_version", qjit_version()},
        {"layout", PackedCodes::kLayoutName},
        {"k", p.k},
        {"n", p.n},
        {"bits", p.bits},
        {"group_size", p.group_size},
        {"panel_columns", layer.codes.panel_columns},
        {"symmetric", p.symmetric},
        {"scale_dtype", scale_dtype_name(p.scale_type)},
        {"sections", {{"codes_u32", layer.codes.words.size()},
                      {"zeros_u16", p.zeros.size()},
                      {"row_order_i32", p.row_order.size()}}},
    };
    nlohmann::json& sections = header["sections"];
    // Second-order scales are stored as their codes, scales and zeros only: the fp32 scales are
    // what those give, computed again at load.
    if (!p.second_order_scales()) sections["scales_f32"] = p.scales.size();
    const bool version3 = has_version3_features(p);
    if (version3) {
        header["mixed_bits"] = !p.uniform_bits();
        header["outliers"] = p.outliers;
        if (!p.uniform_bits()) sections[kGroupBits] = p.group_bits.size();
        if (p.second_order_scales()) {
            sections[kScale2Codes] = p.second_order.codes.size();
            sections[kScale2Scales] = p.second_order.scales.size();
            sections[kScale2Zeros] = p.second_order.zeros.size();
        }
        if (p.outliers > 0) {
            sections[kOutlierStarts] = p.outliers_data.column_start.size();
            sections[kOutlierRows] = p.outliers_data.rows.size();
            sections[kOutlierValues] = p.outliers_data.values.size();
        }
    }
    const LowRankFactors compensator = unpack_low_rank(layer);
    if (compensator.rank > 0) {
        header["low_rank"] = {{"rank", compensator.rank}, {"bits", compensator.bits}};
        describe_factor(header["sections"], compensator.u, compensator.bits, kUSections);
        describe_factor(header["sections"], compensator.vt, compensator.bits, kVtSections);
    }
    const std::string header_text = header.dump();

    std::string image(kMagic, sizeof kMagic);
    append_u32(image, version3                ? kLayerFileVersion
                      : compensator.rank > 0 ? kCompensatedLayerFileVersion
                                             : kPlainLayerFileVersion);
    append_u32(image, uint32_t(header_text.size()));
    image += header_text;
    append_raw(image, layer.codes.words.data(), layer.codes.words.size());
    if (!p.second_order_scales()) append_raw(image, p.scales.data(), p.scales.size());
    append_raw(image, p.zeros.data(), p.zeros.size());
    append_raw(image, p.row_order.data(), p.row_order.size());
    append_raw(image, p.group_bits.data(), p.group_bits.size());
    append_raw(image, p.second_order.codes.data(), p.second_order.codes.size());
    append_raw(image, p.second_order.scales.data(), p.second_order.scales.size());
    append_raw(image, p.second_order.zeros.data(), p.second_order.zeros.size());
    append_raw(image, p.outliers_data.column_start.data(), p.outliers_data.column_start.size());
    append_raw(image, p.outliers_data.rows.data(), p.outliers_data.rows.size());
    append_raw(image, p.outliers_data.values.data(), p.outliers_data.values.size());
    if (compensator.rank > 0) {
        append_factor(image, compensator.u, compensator.bits);
        append_factor(image, compensator.vt, compensator.bits);
    }
    append_u32(image, crc32(image.data(), image.size()));
    return image;
}

LayerImage deserialize_layer(std::string_view image) {
    if (image.size() < kPreambleBytes + sizeof(uint32_t))
        corrupt(concat("file is ", image.size(), " bytes, too short for a qjit layer (truncated?)"));
    if (std::memcmp(image.data(), kMagic, sizeof kMagic) != 0) corrupt("not a qjit layer file (bad magic)");
    const uint32_t version = read_u32(image, sizeof kMagic);
    if (version != kPlainLayerFileVersion && version != kCompensatedLayerFileVersion && version != kLayerFileVersion)
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

    LayerImage layer;
    QuantParams& p = layer.params;
    uint64_t code_words = 0;
    try {
        if (!header.is_object()) corrupt("header is not a JSON object");
        const std::string layout = header.at("layout").get<std::string>();
        if (layout != PackedCodes::kLayoutName) corrupt(concat("layout '", layout, "' is not one this qjit reads"));
        p.k = integer_field(header, "k", 1, kMaxDimension - 1);
        p.n = integer_field(header, "n", 1, kMaxDimension - 1);
        p.bits = int(integer_field(header, "bits", 2, 8));
        p.group_size = integer_field(header, "group_size", 1, kMaxDimension - 1);
        const int panel_columns = int(integer_field(header, "panel_columns", 8, 4096));
        p.symmetric = header.at("symmetric").get<bool>();
        const std::string scale_dtype = header.at("scale_dtype").get<std::string>();
        if (scale_dtype == "f16") p.scale_type = ScaleType::F16;
        else if (scale_dtype == "f32") p.scale_type = ScaleType::F32;
        else if (scale_dtype == "second_order") p.scale_type = ScaleType::SecondOrder;
        else corrupt(concat("header field 'scale_dtype' is '", scale_dtype, "'; expected f16, f32 or second_order"));

        // Version 3's features are named in its header, and only there.
        const bool version3 = version == kLayerFileVersion;
        bool mixed = false;
        if (version3) {
            mixed = bool_field(header, "mixed_bits");
            p.outliers = integer_field(header, "outliers", 0, kMaxWeights);
            if (!mixed && !p.second_order_scales() && p.outliers == 0)
                corrupt(concat("a version ", version, " file without mixed_bits, second-order scales or outliers"));
        } else {
            for (const char* key : {"mixed_bits", "outliers"})
                if (header.contains(key)) corrupt(concat("a version ", version, " file with \"", key, "\" (version ",
                                                         kLayerFileVersion, " only)"));
            if (p.second_order_scales())
                corrupt(concat("a version ", version, " file with second_order scales (version ", kLayerFileVersion,
                               " only)"));
        }
        const bool compensated = version == kCompensatedLayerFileVersion ||
                                 (version3 && header.contains("low_rank"));
        if (version != kLayerFileVersion && (version == kCompensatedLayerFileVersion) != header.contains("low_rank"))
            corrupt(concat("a version ", version, " file ", version == kCompensatedLayerFileVersion ? "without" : "with",
                           " a \"low_rank\" compensator"));

        LowRankFactors& f = layer.compensator;
        if (compensated) {
            const nlohmann::json& low_rank = header.at("low_rank");
            f.rank = int(integer_field(low_rank, "rank", 1, kMaxLowRank));
            f.bits = int(integer_field(low_rank, "bits", 3, 16));
            validate_low_rank_bits(f.bits);
        }
        const nlohmann::json& sections = header.at("sections");
        if (!sections.is_object()) corrupt("header field 'sections' is not a JSON object");
        constexpr int64_t kAnyCount = int64_t(1) << 62;  // read_section checks each against the file
        code_words = uint64_t(integer_field(sections, "codes_u32", 0, kAnyCount));

        // A version 3 header holds no field it does not use (a misnamed one is also missing above),
        // and every header names exactly the sections its layer has.
        if (version3)
            for (const auto& item : header.items()) {
                static const char* const kFields[] = {"qjit_version", "layout", "k", "n", "bits", "group_size",
                                                      "panel_columns", "symmetric", "scale_dtype", "sections",
                                                      "mixed_bits", "outliers"};
                if (std::find(std::begin(kFields), std::end(kFields), item.key()) == std::end(kFields) &&
                    !(compensated && item.key() == "low_rank"))
                    corrupt(concat("header field '", item.key(), "' is not one a version ", version, " file has"));
            }
        const std::vector<std::string> expected =
            section_names(mixed, p.second_order_scales(), p.outliers > 0, compensated ? f.bits : 0);
        std::string features;
        for (const auto& [present, name] : {std::pair<bool, std::string>{mixed, "mixed widths"},
                                            {p.second_order_scales(), "second-order scales"},
                                            {p.outliers > 0, "outliers"},
                                            {compensated, concat(f.bits, "-bit compensator")}})
            if (present) features += (features.empty() ? " (" : ", ") + name;
        const std::string layer_text =
            concat("a version ", version, " layer", features, features.empty() ? "" : ")");
        for (const std::string& name : expected)
            if (!sections.contains(name)) corrupt(concat("section '", name, "' is missing from the header of ", layer_text));
        for (const auto& item : sections.items())
            if (std::find(expected.begin(), expected.end(), item.key()) == expected.end())
                corrupt(concat("section '", item.key(), "' is not one ", layer_text, " has"));

        size_t offset = kPreambleBytes + header_bytes;
        PackedCodes::Words words = read_section<uint32_t, PackedCodes::Words>(image, offset, end, "codes", code_words);
        if (!p.second_order_scales())
            p.scales = read_section<float>(image, offset, end, "scales",
                                           uint64_t(integer_field(sections, "scales_f32", 0, kAnyCount)));
        p.zeros = read_section<uint16_t>(image, offset, end, "zeros", uint64_t(integer_field(sections, "zeros_u16", 0, kAnyCount)));
        p.row_order = read_section<int32_t>(image, offset, end, "row_order",
                                            uint64_t(integer_field(sections, "row_order_i32", 0, kAnyCount)));
        p.act_order = !p.row_order.empty();

        const uint64_t groups = uint64_t(p.num_groups()), n = uint64_t(p.n);
        if (mixed)
            p.group_bits = read_section<uint8_t>(image, offset, end, kGroupBits,
                                                 sized_section(sections, kGroupBits, groups, "one width per K-group"));
        if (p.second_order_scales()) {
            SecondOrderScales& s = p.second_order;
            const uint64_t second = groups * uint64_t(SecondOrderScales::column_groups(p.n));
            s.codes = read_section<uint8_t>(image, offset, end, kScale2Codes,
                                            sized_section(sections, kScale2Codes, groups * n, "groups x N"));
            s.scales = read_section<uint16_t>(image, offset, end, kScale2Scales,
                                              sized_section(sections, kScale2Scales, second, "groups x ceil(N / 16)"));
            s.zeros = read_section<uint16_t>(image, offset, end, kScale2Zeros,
                                             sized_section(sections, kScale2Zeros, second, "groups x ceil(N / 16)"));
            for (size_t i = 0; i < s.codes.size(); ++i)
                if (s.codes[i] >= (1u << SecondOrderScales::kBits))
                    corrupt(concat("second-order scale code ", i, " is ", int(s.codes[i]), "; expected below 16"));
            p.scales = dequantize_second_order(s, p.num_groups(), p.n);  // what validate() then checks again
        }
        if (p.outliers > 0) {
            SparseOutliers& o = p.outliers_data;
            const uint64_t count = uint64_t(p.outliers);
            o.column_start = read_section<int64_t>(image, offset, end, kOutlierStarts,
                                                   sized_section(sections, kOutlierStarts, n + 1, "N + 1"));
            o.rows = read_section<int32_t>(image, offset, end, kOutlierRows,
                                           sized_section(sections, kOutlierRows, count, "the header's outlier count"));
            o.values = read_section<uint16_t>(image, offset, end, kOutlierValues,
                                              sized_section(sections, kOutlierValues, count, "the header's outlier count"));
            // Bounds before validate() walks the columns by them.
            if (o.column_start.front() != 0) corrupt(concat("outlier column starts begin at ", o.column_start.front()));
            for (size_t c = 0; c + 1 < o.column_start.size(); ++c)
                if (o.column_start[c + 1] < o.column_start[c] || o.column_start[c + 1] > p.outliers)
                    corrupt(concat("outlier column starts go from ", o.column_start[c], " to ", o.column_start[c + 1],
                                   " at column ", c, "; expected ascending in 0 .. ", p.outliers));
        }
        if (compensated) {
            f.u = read_factor(image, offset, end, sections, f.bits, p.k, f.rank, kUSections);
            f.vt = read_factor(image, offset, end, sections, f.bits, p.n, f.rank, kVtSections);
            validate(f, p.k, p.n);
        }
        if (offset != end) corrupt(concat(end - offset, " unexpected bytes after the last section"));
        // The ranges were checked as the fields were read; what a range cannot say:
        if (p.bits == 5 || p.bits == 6 || p.bits == 7)
            corrupt(concat("header describes an invalid layer: bits=", p.bits, "; expected 2, 3, 4 or 8"));
        if (panel_columns % 8 != 0) corrupt(concat("panel_columns ", panel_columns, " is not a multiple of 8"));
        if (mixed) validate(p.format());  // group_bits against the shape and bits, before they size the codes
        const size_t expected_words = packed_word_count(p.format(), p.n, panel_columns);
        if (code_words != expected_words)
            corrupt(concat("codes section holds ", code_words, " words; a ", p.k, " x ", p.n, " ",
                           mixed ? "mixed 2/4-bit" : concat(p.bits, "-bit"), " layer (", p.name(), ") in panels of ",
                           panel_columns, " needs ", expected_words));
        layer.codes = PackedCodes{p.bits, p.k, p.n, panel_columns, std::move(words), {}, {}};  // any bits are valid
        assign_block_widths(layer.codes, block_widths(p.format()));  // codes of its block's width
        validate(p);
    } catch (const nlohmann::json::exception& e) {
        corrupt(concat("header is missing a field or has a wrong type: ", e.what()));
    } catch (const Error& e) {
        if (e.status() != QJIT_ERROR_INVALID_ARGUMENT) throw;
        corrupt(concat("inconsistent contents: ", e.what()));
    }
    return layer;
}

void save_layer(const qjit_linear& layer, const std::string& path) {
    const std::string image = serialize_layer(layer);
    static std::atomic<unsigned> counter{0};
    const std::string temporary = concat(path, ".tmp.", getpid(), ".", counter++);
    FILE* file = std::fopen(temporary.c_str(), "wb");
    if (!file) fail(QJIT_ERROR_IO, "cannot create '", temporary, "': ", std::strerror(errno));
    const bool written = std::fwrite(image.data(), 1, image.size(), file) == image.size() &&
                         std::fflush(file) == 0 && fsync(fileno(file)) == 0;
    const int write_errno = errno;
    if (std::fclose(file) != 0 || !written) {
        std::remove(temporary.c_str());
        fail(QJIT_ERROR_IO, "cannot write '", temporary, "': ", std::strerror(write_errno));
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
        const int rename_errno = errno;
        std::remove(temporary.c_str());
        fail(QJIT_ERROR_IO, "cannot rename '", temporary, "' to '", path, "': ", std::strerror(rename_errno));
    }
}

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
