#include "io/layer_sections.hpp"

#include <algorithm>
#include <optional>

#include "base/error.hpp"
#include "base/half.hpp"
#include "io/json_integer.hpp"

namespace qjit {

void corrupt(const std::string& why) { fail(QJIT_ERROR_CORRUPT_DATA, why); }

std::string one_of(const std::vector<std::string>& names) {
    std::string text;
    for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return text;
}

uint32_t file_version(const FeatureList& features) {
    uint32_t version = kPlainLayerFileVersion;
    for (const FeatureCodec* feature : features) version = std::max(version, feature->since());
    return version;
}

bool base_stores_scales(const FeatureList& features) {
    return std::none_of(features.begin(), features.end(), [](const FeatureCodec* f) { return f->stores_scales(); });
}

void SectionWriter::append_to(std::string& image) const {
    for (const Piece& piece : pieces_) image.append(piece.data, piece.bytes);
}

namespace {

constexpr int64_t kAnyCount = int64_t(1) << 62;  // a section's count; SectionReader checks it against the file

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

}  // namespace

uint64_t SectionReader::header_count(const char* name) const {
    return uint64_t(integer_field(sections_, name, 0, kAnyCount));
}

void SectionReader::count_mismatch(const char* name, uint64_t count, uint64_t expected, const char* what) {
    corrupt(concat("section '", name, "' holds ", count, " values; ", what, " needs ", expected));
}

void SectionReader::too_short(const char* label, uint64_t bytes, size_t remaining) {
    corrupt(concat("section '", label, "' needs ", bytes, " bytes; ", remaining, " remain"));
}

namespace {

// ---- The base: shape, widths, groups, packed codes, scales, zero points ----

struct ScaleTypeName {
    ScaleType type;
    const char* name;
};
constexpr ScaleTypeName kScaleTypeNames[] = {
    {ScaleType::F16, "f16"}, {ScaleType::F32, "f32"}, {ScaleType::SecondOrder, "second_order"},
    {ScaleType::SuperBlock, "super_block"}};

const char* scale_dtype_name(ScaleType type) {
    for (const ScaleTypeName& entry : kScaleTypeNames)
        if (entry.type == type) return entry.name;
    return "unknown";
}

ScaleType scale_type_named(const std::string& name) {
    std::vector<std::string> names;
    for (const ScaleTypeName& entry : kScaleTypeNames) {
        if (name == entry.name) return entry.type;
        names.push_back(entry.name);
    }
    corrupt(concat("header field 'scale_dtype' is '", name, "'; expected ", one_of(names)));
}

class BaseCodec final : public FeatureCodec {
public:
    std::vector<std::string> header_fields() const override {
        return {"qjit_version", "layout", "k", "n", "bits", "group_size", "panel_columns", "symmetric", "scale_dtype",
                "sections"};
    }
    bool in_layer(const LayerWriting&) const override { return true; }
    void write_header(const LayerWriting& layer, nlohmann::json& header) const override {
        const QuantParams& p = layer.params;
        header["qjit_version"] = qjit_version();
        header["layout"] = PackedCodes::kLayoutName;
        header["k"] = p.k;
        header["n"] = p.n;
        header["bits"] = p.bits;
        header["group_size"] = p.group_size;
        header["panel_columns"] = layer.codes.panel_columns;
        header["symmetric"] = p.symmetric;
        header["scale_dtype"] = scale_dtype_name(p.scale_type);
    }
    void write(const LayerWriting& layer, SectionWriter& out) const override {
        out.section("codes_u32", layer.codes.words);
        if (base_stores_scales(layer.features)) out.section("scales_f32", layer.params.scales);
        out.section("zeros_u16", layer.params.zeros);
    }

    bool read_header(LayerReading& reading) const override {
        const nlohmann::json& header = reading.header;
        QuantParams& p = reading.layer.params;
        const std::string layout = header.at("layout").get<std::string>();
        if (layout != PackedCodes::kLayoutName) corrupt(concat("layout '", layout, "' is not one this qjit reads"));
        p.k = integer_field(header, "k", 1, kMaxDimension - 1);
        p.n = integer_field(header, "n", 1, kMaxDimension - 1);
        p.bits = int(integer_field(header, "bits", 2, 8));  // validate() says which of these a layer may have
        p.group_size = integer_field(header, "group_size", 1, kMaxDimension - 1);
        reading.layer.codes.panel_columns = int(integer_field(header, "panel_columns", 8, 4096));
        p.symmetric = header.at("symmetric").get<bool>();
        p.scale_type = scale_type_named(header.at("scale_dtype").get<std::string>());
        const nlohmann::json& sections = header.at("sections");
        if (!sections.is_object()) corrupt("header field 'sections' is not a JSON object");
        reading.code_words = uint64_t(integer_field(sections, "codes_u32", 0, kAnyCount));
        return true;
    }
    void section_names(const LayerReading& reading, std::vector<std::string>& names) const override {
        names.push_back("codes_u32");
        if (base_stores_scales(reading.features)) names.push_back("scales_f32");
        names.push_back("zeros_u16");
    }
    void read(SectionReader& in, LayerReading& reading) const override {
        QuantParams& p = reading.layer.params;
        reading.layer.codes.words = in.read<uint32_t, PackedCodes::Words>("codes", reading.code_words);
        if (base_stores_scales(reading.features)) p.scales = in.section<float>("scales_f32", "scales");
        p.zeros = in.section<uint16_t>("zeros_u16", "zeros");
    }
    // The ranges were checked as the fields were read; what a range cannot say: the format as a
    // whole (widths, group widths against the shape), before it sizes the codes; then the layer.
    void check(LayerReading& reading) const override {
        QuantParams& p = reading.layer.params;
        PackedCodes& codes = reading.layer.codes;
        validate(p.format());
        if (codes.panel_columns % 8 != 0)
            corrupt(concat("panel_columns ", codes.panel_columns, " is not a multiple of 8"));
        const size_t expected_words = packed_word_count(p.format(), p.n, codes.panel_columns);
        if (codes.words.size() != expected_words)
            corrupt(concat("codes section holds ", codes.words.size(), " words; a ", p.k, " x ", p.n, " ",
                           p.uniform_bits() ? concat(p.bits, "-bit") : "mixed 2/4-bit", " layer (", p.name(),
                           ") in panels of ", codes.panel_columns, " needs ", expected_words));
        codes = PackedCodes{p.bits, p.k, p.n, codes.panel_columns, std::move(codes.words), {}, {}};
        assign_block_widths(codes, block_widths(p.format()));  // codes of its block's width
        validate(p);
    }
};

// ---- Act-order: the row order (GPTQ's g_idx as a permutation), an empty section without ----

class RowOrderCodec final : public FeatureCodec {
public:
    bool in_layer(const LayerWriting&) const override { return true; }
    void write(const LayerWriting& layer, SectionWriter& out) const override {
        out.section("row_order_i32", layer.params.row_order);
    }
    bool read_header(LayerReading&) const override { return true; }
    void section_names(const LayerReading&, std::vector<std::string>& names) const override {
        names.push_back("row_order_i32");
    }
    void read(SectionReader& in, LayerReading& reading) const override {
        QuantParams& p = reading.layer.params;
        p.row_order = in.section<int32_t>("row_order_i32", "row_order");
        p.act_order = !p.row_order.empty();
    }
};

// ---- Mixed widths: a width per K-group ----

constexpr const char* kGroupBits = "group_bits_u8";

class MixedWidthsCodec final : public FeatureCodec {
public:
    uint32_t since() const override { return kMixedLayerFileVersion; }
    const char* header_name() const override { return "mixed_bits"; }
    std::vector<std::string> header_fields() const override { return {"mixed_bits"}; }
    bool in_layer(const LayerWriting& layer) const override { return !layer.params.uniform_bits(); }
    void write_header(const LayerWriting& layer, nlohmann::json& header) const override {
        header["mixed_bits"] = !layer.params.uniform_bits();
    }
    void write(const LayerWriting& layer, SectionWriter& out) const override {
        out.section(kGroupBits, layer.params.group_bits);
    }
    bool mentioned(const LayerReading& reading) const override { return reading.header.contains("mixed_bits"); }
    bool read_header(LayerReading& reading) const override { return bool_field(reading.header, "mixed_bits"); }
    std::string label(const LayerReading&) const override { return "mixed widths"; }
    void section_names(const LayerReading&, std::vector<std::string>& names) const override {
        names.push_back(kGroupBits);
    }
    void read(SectionReader& in, LayerReading& reading) const override {
        QuantParams& p = reading.layer.params;
        p.group_bits = in.sized_section<uint8_t>(kGroupBits, uint64_t(p.num_groups()), "one width per K-group");
    }
};

// ---- Second-order scales: 4-bit codes of the scales, an fp16 scale and zero per 16 columns ----

constexpr const char* kScale2Codes = "scale2_codes_u8";
constexpr const char* kScale2Scales = "scale2_scales_f16";
constexpr const char* kScale2Zeros = "scale2_zeros_f16";

class SecondOrderScalesCodec final : public FeatureCodec {
public:
    uint32_t since() const override { return kMixedLayerFileVersion; }
    const char* header_name() const override { return "second_order scales"; }
    // Stored as their codes, scales and zeros only: the fp32 scales are what those give, computed
    // again at load.
    bool stores_scales() const override { return true; }
    bool in_layer(const LayerWriting& layer) const override { return layer.params.second_order_scales(); }
    void write(const LayerWriting& layer, SectionWriter& out) const override {
        const SecondOrderScales& s = layer.params.second_order;
        out.section(kScale2Codes, s.codes);
        out.section(kScale2Scales, s.scales);
        out.section(kScale2Zeros, s.zeros);
    }
    bool mentioned(const LayerReading& reading) const override {
        return reading.layer.params.second_order_scales();  // the base read scale_dtype
    }
    bool read_header(LayerReading& reading) const override { return mentioned(reading); }
    std::string label(const LayerReading&) const override { return "second-order scales"; }
    void section_names(const LayerReading&, std::vector<std::string>& names) const override {
        names.insert(names.end(), {kScale2Codes, kScale2Scales, kScale2Zeros});
    }
    void read(SectionReader& in, LayerReading& reading) const override {
        QuantParams& p = reading.layer.params;
        SecondOrderScales& s = p.second_order;
        const uint64_t groups = uint64_t(p.num_groups());
        const uint64_t second = groups * uint64_t(SecondOrderScales::column_groups(p.n));
        s.codes = in.sized_section<uint8_t>(kScale2Codes, groups * uint64_t(p.n), "groups x N");
        s.scales = in.sized_section<uint16_t>(kScale2Scales, second, "groups x ceil(N / 16)");
        s.zeros = in.sized_section<uint16_t>(kScale2Zeros, second, "groups x ceil(N / 16)");
        for (size_t i = 0; i < s.codes.size(); ++i)
            if (s.codes[i] >= (1u << SecondOrderScales::kBits))
                corrupt(concat("second-order scale code ", i, " is ", int(s.codes[i]), "; expected below 16"));
        p.scales = dequantize_second_order(s, p.num_groups(), p.n);  // what validate() then checks again
    }
};

// ---- Sparse outliers: CSR over the output columns ----

constexpr const char* kOutlierStarts = "outlier_starts_i64";
constexpr const char* kOutlierRows = "outlier_rows_i32";
constexpr const char* kOutlierValues = "outlier_values_f16";

class OutliersCodec final : public FeatureCodec {
public:
    uint32_t since() const override { return kMixedLayerFileVersion; }
    const char* header_name() const override { return "outliers"; }
    std::vector<std::string> header_fields() const override { return {"outliers"}; }
    bool in_layer(const LayerWriting& layer) const override { return layer.params.outliers > 0; }
    void write_header(const LayerWriting& layer, nlohmann::json& header) const override {
        header["outliers"] = layer.params.outliers;
    }
    void write(const LayerWriting& layer, SectionWriter& out) const override {
        const SparseOutliers& o = layer.params.outliers_data;
        out.section(kOutlierStarts, o.column_start);
        out.section(kOutlierRows, o.rows);
        out.section(kOutlierValues, o.values);
    }
    bool mentioned(const LayerReading& reading) const override { return reading.header.contains("outliers"); }
    bool read_header(LayerReading& reading) const override {
        QuantParams& p = reading.layer.params;
        p.outliers = integer_field(reading.header, "outliers", 0, kMaxWeights);
        return p.outliers > 0;
    }
    std::string label(const LayerReading&) const override { return "outliers"; }
    void section_names(const LayerReading&, std::vector<std::string>& names) const override {
        names.insert(names.end(), {kOutlierStarts, kOutlierRows, kOutlierValues});
    }
    void read(SectionReader& in, LayerReading& reading) const override {
        QuantParams& p = reading.layer.params;
        SparseOutliers& o = p.outliers_data;
        const uint64_t count = uint64_t(p.outliers);
        o.column_start = in.sized_section<int64_t>(kOutlierStarts, uint64_t(p.n) + 1, "N + 1");
        o.rows = in.sized_section<int32_t>(kOutlierRows, count, "the header's outlier count");
        o.values = in.sized_section<uint16_t>(kOutlierValues, count, "the header's outlier count");
        // Bounds before validate() walks the columns by them.
        if (o.column_start.front() != 0) corrupt(concat("outlier column starts begin at ", o.column_start.front()));
        for (size_t c = 0; c + 1 < o.column_start.size(); ++c)
            if (o.column_start[c + 1] < o.column_start[c] || o.column_start[c + 1] > p.outliers)
                corrupt(concat("outlier column starts go from ", o.column_start[c], " to ", o.column_start[c + 1],
                               " at column ", c, "; expected ascending in 0 .. ", p.outliers));
    }
};

// ---- The low-rank compensator: U and V^T (format/low_rank.hpp) ----

// Each factor (dimension x rank) as codes and component scales, or fp16 values.
struct FactorSections {
    const char* codes;
    const char* scales;
    const char* halves;
};
constexpr FactorSections kUSections{"u_codes_u8", "u_scales_f32", "u_f16"};
constexpr FactorSections kVtSections{"vt_codes_u8", "vt_scales_f32", "vt_f16"};

void write_factor(const LowRankFactor& factor, int bits, const FactorSections& names, SectionWriter& out) {
    if (bits == 16) {
        std::vector<uint16_t>& halves = out.converted();
        halves.resize(factor.values.size());
        for (size_t i = 0; i < halves.size(); ++i) halves[i] = float_to_half(factor.values[i]);
        out.section(names.halves, halves);
    } else {
        out.section(names.codes, factor.codes.codes);
        out.section(names.scales, factor.codes.params.scales);
    }
}

// A factor of `rows` x rank back from its sections; validate(LowRankFactors) checks it after.
LowRankFactor read_factor(SectionReader& in, int bits, int64_t rows, int rank, const FactorSections& names) {
    LowRankFactor factor;
    if (bits == 16) {
        const std::vector<uint16_t> halves = in.section<uint16_t>(names.halves);
        factor.values.resize(halves.size());
        for (size_t i = 0; i < halves.size(); ++i) factor.values[i] = half_to_float(halves[i]);
        return factor;
    }
    QuantParams& p = factor.codes.params;
    factor.codes.codes = in.section<uint8_t>(names.codes);
    p.scales = in.section<float>(names.scales);
    p.k = rows;
    p.n = rank;
    p.bits = bits;
    p.group_size = rows;
    p.symmetric = true;
    p.zeros.assign(p.scales.size(), uint16_t(1u << (bits - 1)));
    return factor;
}

class CompensatorCodec final : public FeatureCodec {
public:
    uint32_t since() const override { return kCompensatedLayerFileVersion; }
    const char* header_name() const override { return "a \"low_rank\" compensator"; }
    std::vector<std::string> header_fields() const override { return {"low_rank"}; }
    bool in_layer(const LayerWriting& layer) const override { return layer.compensator.rank > 0; }
    void write_header(const LayerWriting& layer, nlohmann::json& header) const override {
        const LowRankFactors& f = layer.compensator;
        if (f.rank > 0) header["low_rank"] = {{"rank", f.rank}, {"bits", f.bits}};
    }
    void write(const LayerWriting& layer, SectionWriter& out) const override {
        const LowRankFactors& f = layer.compensator;
        write_factor(f.u, f.bits, kUSections, out);
        write_factor(f.vt, f.bits, kVtSections, out);
    }
    bool mentioned(const LayerReading& reading) const override { return reading.header.contains("low_rank"); }
    bool read_header(LayerReading& reading) const override {
        if (!mentioned(reading)) return false;
        const nlohmann::json& low_rank = reading.header.at("low_rank");
        LowRankFactors& f = reading.layer.compensator;
        f.rank = int(integer_field(low_rank, "rank", 1, kMaxLowRank));
        f.bits = int(integer_field(low_rank, "bits", 3, 16));
        validate_low_rank_bits(f.bits);
        return true;
    }
    std::string label(const LayerReading& reading) const override {
        return concat(reading.layer.compensator.bits, "-bit compensator");
    }
    void section_names(const LayerReading& reading, std::vector<std::string>& names) const override {
        for (const FactorSections& factor : {kUSections, kVtSections}) {
            if (reading.layer.compensator.bits == 16) names.push_back(factor.halves);
            else names.insert(names.end(), {factor.codes, factor.scales});
        }
    }
    void read(SectionReader& in, LayerReading& reading) const override {
        const QuantParams& p = reading.layer.params;
        LowRankFactors& f = reading.layer.compensator;
        f.u = read_factor(in, f.bits, p.k, f.rank, kUSections);
        f.vt = read_factor(in, f.bits, p.n, f.rank, kVtSections);
        validate(f, p.k, p.n);
    }
};

// ---- Permuted columns: the original column of each output (a tensor-parallel shard's) ----

constexpr const char* kColumnOrder = "column_order_i32";

class PermutedColumnsCodec final : public FeatureCodec {
public:
    uint32_t since() const override { return kPermutedLayerFileVersion; }
    const char* header_name() const override { return "permuted_columns"; }
    std::vector<std::string> header_fields() const override { return {"permuted_columns"}; }
    bool in_layer(const LayerWriting& layer) const override { return layer.params.permuted_columns; }
    void write_header(const LayerWriting& layer, nlohmann::json& header) const override {
        header["permuted_columns"] = layer.params.permuted_columns;
    }
    void write(const LayerWriting& layer, SectionWriter& out) const override {
        out.section(kColumnOrder, layer.params.column_order);
    }
    bool mentioned(const LayerReading& reading) const override {
        return reading.header.contains("permuted_columns");
    }
    bool read_header(LayerReading& reading) const override {
        return reading.layer.params.permuted_columns = bool_field(reading.header, "permuted_columns");
    }
    std::string label(const LayerReading&) const override { return "permuted columns"; }
    void section_names(const LayerReading&, std::vector<std::string>& names) const override {
        names.push_back(kColumnOrder);
    }
    void read(SectionReader& in, LayerReading& reading) const override {
        QuantParams& p = reading.layer.params;
        p.column_order = in.sized_section<int32_t>(kColumnOrder, uint64_t(p.n), "one original column per output");
    }
};

// ---- Float offsets: a real-valued offset per group in place of the zero points ----

constexpr const char* kOffsets = "offsets_f32";

class FloatOffsetsCodec final : public FeatureCodec {
public:
    uint32_t since() const override { return kOffsetLayerFileVersion; }
    const char* header_name() const override { return "float_offsets"; }
    std::vector<std::string> header_fields() const override { return {"float_offsets"}; }
    bool in_layer(const LayerWriting& layer) const override { return layer.params.float_offsets; }
    void write_header(const LayerWriting& layer, nlohmann::json& header) const override {
        header["float_offsets"] = layer.params.float_offsets;
    }
    // Super-block scales store their offsets as min codes (SuperBlockScalesCodec).
    void write(const LayerWriting& layer, SectionWriter& out) const override {
        if (!layer.params.super_block_scales()) out.section(kOffsets, layer.params.offsets);
    }
    bool mentioned(const LayerReading& reading) const override { return reading.header.contains("float_offsets"); }
    bool read_header(LayerReading& reading) const override {
        return reading.layer.params.float_offsets = bool_field(reading.header, "float_offsets");
    }
    std::string label(const LayerReading&) const override { return "float offsets"; }
    void section_names(const LayerReading& reading, std::vector<std::string>& names) const override {
        if (!reading.layer.params.super_block_scales()) names.push_back(kOffsets);
    }
    void read(SectionReader& in, LayerReading& reading) const override {
        QuantParams& p = reading.layer.params;
        if (!p.super_block_scales())
            p.offsets = in.sized_section<float>(kOffsets, uint64_t(p.num_groups() * p.n), "groups x N");
    }
};

// ---- Super-block scales: integer scale (and min) codes per group, fp16 d (and dmin) per 256 rows ----

constexpr const char* kSuperScaleCodes = "sb_scale_codes_i8";
constexpr const char* kSuperScales = "sb_scales_f16";
constexpr const char* kSuperMinCodes = "sb_min_codes_u8";
constexpr const char* kSuperMins = "sb_mins_f16";

class SuperBlockScalesCodec final : public FeatureCodec {
public:
    uint32_t since() const override { return kLayerFileVersion; }
    const char* header_name() const override { return "scale_code_bits"; }
    std::vector<std::string> header_fields() const override { return {"scale_code_bits"}; }
    // The fp32 scales (and offsets) are what the codes give, computed again at load.
    bool stores_scales() const override { return true; }
    bool in_layer(const LayerWriting& layer) const override { return layer.params.super_block_scales(); }
    void write_header(const LayerWriting& layer, nlohmann::json& header) const override {
        header["scale_code_bits"] = layer.params.scale_code_bits;
    }
    void write(const LayerWriting& layer, SectionWriter& out) const override {
        const SuperBlockScales& s = layer.params.super_block;
        out.section(kSuperScaleCodes, s.scale_codes);
        out.section(kSuperScales, s.scales);
        if (!layer.params.float_offsets) return;
        out.section(kSuperMinCodes, s.min_codes);
        out.section(kSuperMins, s.mins);
    }
    bool mentioned(const LayerReading& reading) const override { return reading.layer.params.super_block_scales(); }
    bool read_header(LayerReading& reading) const override {
        QuantParams& p = reading.layer.params;
        p.scale_code_bits = int(integer_field(reading.header, "scale_code_bits", 0, 8));  // validate() says which
        return p.super_block_scales();
    }
    std::string label(const LayerReading&) const override { return "super-block scales"; }
    void section_names(const LayerReading& reading, std::vector<std::string>& names) const override {
        names.insert(names.end(), {kSuperScaleCodes, kSuperScales});
        if (reading.layer.params.float_offsets) names.insert(names.end(), {kSuperMinCodes, kSuperMins});
    }
    void read(SectionReader& in, LayerReading& reading) const override {
        QuantParams& p = reading.layer.params;
        if (p.k % kSuperBlockRows != 0 || (p.group_size != 16 && p.group_size != 32))
            corrupt(concat("super-block scales on K = ", p.k, " with groups of ", p.group_size,
                           "; they need K a multiple of 256 and groups of 16 or 32"));
        SuperBlockScales& s = p.super_block;
        const uint64_t groups = uint64_t(p.num_groups() * p.n), supers = uint64_t(p.k / kSuperBlockRows * p.n);
        s.scale_codes = in.sized_section<int8_t>(kSuperScaleCodes, groups, "groups x N");
        s.scales = in.sized_section<uint16_t>(kSuperScales, supers, "K / 256 x N");
        if (p.float_offsets) {
            s.min_codes = in.sized_section<uint8_t>(kSuperMinCodes, groups, "groups x N");
            s.mins = in.sized_section<uint16_t>(kSuperMins, supers, "K / 256 x N");
        }
        expand_super_block_scales(p);  // what validate() then checks again, codes and all
    }
};

const BaseCodec kBase;
const RowOrderCodec kRowOrder;
const MixedWidthsCodec kMixedWidths;
const SecondOrderScalesCodec kSecondOrderScales;
const OutliersCodec kOutliers;
const CompensatorCodec kCompensator;
const PermutedColumnsCodec kPermutedColumns;
// ---- A codebook: what each code stands for (a header field, no sections) ----

class CodebookCodec final : public FeatureCodec {
public:
    uint32_t since() const override { return kLayerFileVersion; }
    const char* header_name() const override { return "codebook"; }
    std::vector<std::string> header_fields() const override { return {"codebook"}; }
    bool in_layer(const LayerWriting& layer) const override { return layer.params.has_codebook(); }
    void write_header(const LayerWriting& layer, nlohmann::json& header) const override {
        header["codebook"] = codebook_name(layer.params.codebook);
    }
    void write(const LayerWriting&, SectionWriter&) const override {}
    bool mentioned(const LayerReading& reading) const override { return reading.header.contains("codebook"); }
    bool read_header(LayerReading& reading) const override {
        const nlohmann::json& field = reading.header.at("codebook");
        const std::string name = field.is_string() ? field.get<std::string>() : field.dump();
        const std::optional<Codebook> codebook = codebook_named(name);
        if (!codebook) corrupt(concat("header field 'codebook' is '", name, "'; expected none or iq4_nl"));
        reading.layer.params.codebook = *codebook;
        return reading.layer.params.has_codebook();
    }
    std::string label(const LayerReading&) const override { return "IQ4_NL codebook"; }
    void section_names(const LayerReading&, std::vector<std::string>&) const override {}
    void read(SectionReader&, LayerReading&) const override {}
};

const FloatOffsetsCodec kFloatOffsets;
const SuperBlockScalesCodec kSuperBlockScales;
const CodebookCodec kCodebook;
const FeatureCodec* const kCodecs[] = {&kBase,         &kRowOrder,        &kMixedWidths,
                                       &kSecondOrderScales, &kOutliers, &kCompensator,
                                       &kPermutedColumns,   &kFloatOffsets, &kSuperBlockScales,
                                       &kCodebook};

}  // namespace

std::span<const FeatureCodec* const> feature_codecs() { return kCodecs; }

}  // namespace qjit
