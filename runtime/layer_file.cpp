#include "runtime/layer_file.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

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
        {"scale_dtype", p.f16_scales() ? "f16" : "f32"},
        {"sections", {{"codes_u32", layer.codes.words.size()},
                      {"scales_f32", p.scales.size()},
                      {"zeros_u16", p.zeros.size()},
                      {"row_order_i32", p.row_order.size()}}},
    };
    const LowRankFactors compensator = unpack_low_rank(layer);
    if (compensator.rank > 0) {
        header["low_rank"] = {{"rank", compensator.rank}, {"bits", compensator.bits}};
        describe_factor(header["sections"], compensator.u, compensator.bits, kUSections);
        describe_factor(header["sections"], compensator.vt, compensator.bits, kVtSections);
    }
    const std::string header_text = header.dump();

    std::string image(kMagic, sizeof kMagic);
    append_u32(image, compensator.rank > 0 ? kLayerFileVersion : kPlainLayerFileVersion);
    append_u32(image, uint32_t(header_text.size()));
    image += header_text;
    append_raw(image, layer.codes.words.data(), layer.codes.words.size());
    append_raw(image, p.scales.data(), p.scales.size());
    append_raw(image, p.zeros.data(), p.zeros.size());
    append_raw(image, p.row_order.data(), p.row_order.size());
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
    if (version != kPlainLayerFileVersion && version != kLayerFileVersion)
        fail(QJIT_ERROR_UNSUPPORTED, "layer file format version ", version, "; this qjit reads versions ",
             kPlainLayerFileVersion, " and ", kLayerFileVersion);
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
        const std::string layout = header.at("layout").get<std::string>();
        if (layout != PackedCodes::kLayoutName) corrupt(concat("layout '", layout, "' is not one this qjit reads"));
        p.k = integer_field(header, "k", 1, kMaxDimension - 1);
        p.n = integer_field(header, "n", 1, kMaxDimension - 1);
        p.bits = int(integer_field(header, "bits", 2, 8));
        p.group_size = integer_field(header, "group_size", 1, kMaxDimension - 1);
        const int panel_columns = int(integer_field(header, "panel_columns", 8, 4096));
        p.symmetric = header.at("symmetric").get<bool>();
        p.scale_type = header.at("scale_dtype").get<std::string>() == "f16" ? ScaleType::F16 : ScaleType::F32;
        const nlohmann::json& sections = header.at("sections");
        constexpr int64_t kAnyCount = int64_t(1) << 62;  // read_section checks each against the file
        code_words = uint64_t(integer_field(sections, "codes_u32", 0, kAnyCount));
        size_t offset = kPreambleBytes + header_bytes;
        PackedCodes::Words words = read_section<uint32_t, PackedCodes::Words>(image, offset, end, "codes", code_words);
        p.scales = read_section<float>(image, offset, end, "scales", uint64_t(integer_field(sections, "scales_f32", 0, kAnyCount)));
        p.zeros = read_section<uint16_t>(image, offset, end, "zeros", uint64_t(integer_field(sections, "zeros_u16", 0, kAnyCount)));
        p.row_order = read_section<int32_t>(image, offset, end, "row_order",
                                            uint64_t(integer_field(sections, "row_order_i32", 0, kAnyCount)));
        p.act_order = !p.row_order.empty();
        if ((version == kLayerFileVersion) != header.contains("low_rank"))
            corrupt(concat("a version ", version, " file ", version == kLayerFileVersion ? "without" : "with",
                           " a \"low_rank\" compensator"));
        if (version == kLayerFileVersion) {
            const nlohmann::json& low_rank = header.at("low_rank");
            LowRankFactors& f = layer.compensator;
            f.rank = int(integer_field(low_rank, "rank", 1, kMaxLowRank));
            f.bits = int(integer_field(low_rank, "bits", 3, 16));
            validate_low_rank_bits(f.bits);
            f.u = read_factor(image, offset, end, sections, f.bits, p.k, f.rank, kUSections);
            f.vt = read_factor(image, offset, end, sections, f.bits, p.n, f.rank, kVtSections);
            validate(f, p.k, p.n);
        }
        if (offset != end) corrupt(concat(end - offset, " unexpected bytes after the last section"));
        // The ranges were checked as the fields were read; what a range cannot say:
        if (p.bits == 5 || p.bits == 6 || p.bits == 7)
            corrupt(concat("header describes an invalid layer: bits=", p.bits, "; expected 2, 3, 4 or 8"));
        if (panel_columns % 8 != 0) corrupt(concat("panel_columns ", panel_columns, " is not a multiple of 8"));
        const size_t expected_words = PackedCodes::word_count(p.bits, p.k, p.n, panel_columns);
        if (code_words != expected_words)
            corrupt(concat("codes section holds ", code_words, " words; a ", p.k, " x ", p.n, " ", p.bits,
                           "-bit layer in panels of ", panel_columns, " needs ", expected_words));
        layer.codes = PackedCodes{p.bits, p.k, p.n, panel_columns, std::move(words)};  // any bits are valid codes
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
