#include "runtime/layer_pack.hpp"

#include <atomic>
#include <chrono>
#include <optional>

#include "base/error.hpp"
#include "io/framed_file.hpp"
#include "io/json_integer.hpp"
#include "jit/x86/cpu_kernel.hpp"
#include "jit/x86/cpu_tiling.hpp"
#include "runtime/cpu/jit_layer.hpp"
#include "runtime/layer_file.hpp"

namespace qjit {

namespace {

constexpr const char* kPanelsKind = "panels";
constexpr const char* kLayerKind = "layer";

// Whether the panel form holds the whole layer: its kernels hold its metadata (which only an x86 JIT
// layer without second-order scales does), and it has nothing the panels leave out (a gather,
// permuted columns, outliers, mixed widths, a compensator).
bool held_by_panels(const qjit_linear& layer) {
    const QuantParams& p = layer.params;
    return layer.metadata_in_kernels && p.uniform_bits() && !p.act_order && !p.permuted_columns && p.outliers == 0 &&
           !p.low_rank.present();
}

ScaleType panel_scale_type(const std::string& name) {
    if (name == scale_type_name(ScaleType::F16)) return ScaleType::F16;
    if (name == scale_type_name(ScaleType::F32)) return ScaleType::F32;
    if (name == scale_type_name(ScaleType::SuperBlock)) return ScaleType::SuperBlock;
    fail(QJIT_ERROR_INVALID_ARGUMENT, "scale type '", name, "' is not one a panels entry stores");
}

// The format a panels entry names, checked.
QuantParams panel_params(const nlohmann::json& fields) {
    QuantParams p;
    p.k = json_integer_field(fields, "k", 1, kMaxDimension - 1);
    p.n = json_integer_field(fields, "n", 1, kMaxDimension - 1);
    p.bits = int(json_integer_field(fields, "bits", 1, 8));
    p.group_size = json_integer_field(fields, "group_size", 1, kMaxDimension);
    p.symmetric = fields.at("symmetric").get<bool>();
    p.float_offsets = fields.at("float_offsets").get<bool>();
    p.scale_type = panel_scale_type(fields.at("scale_type").get<std::string>());
    if (p.super_block_scales()) p.scale_code_bits = int(json_integer_field(fields, "scale_code_bits", 0, 8));
    if (fields.contains("codebook")) {
        const std::string name = fields.at("codebook").get<std::string>();
        const std::optional<Codebook> codebook = codebook_named(name);
        require(codebook.has_value(), "codebook '", name, "' is not one qjit knows");
        p.codebook = *codebook;
    }
    validate(p.format());
    return p;
}

// The kernel of a panels entry in `context`: the one the context makes for the entry's format,
// with the entry's tiling. QJIT_ERROR_STALE when the context makes another family of kernel.
jit::CpuKernelSpec panel_kernel(const qjit_context& context, const QuantParams& params, const nlohmann::json& fields) {
    const std::string family = fields.at("kernel").get<std::string>();
    const std::optional<jit::CpuKernelSpec> made = jit::cpu_kernel_format(context.isa, context.activations, params);
    if (!made || jit::kernel_family_name(*made) != family)
        fail(QJIT_ERROR_STALE, "its layers run on ", family, " kernels; this context makes ",
             made ? jit::kernel_family_name(*made) : std::string("none (the portable path)"), " for ",
             params.name(), " (another CPU, instruction-set cap or activation path)");
    const jit::CpuKernelSpec spec = jit::with_tiling_text(*made, fields.at("tiling").get<std::string>());
    jit::check_spec(spec);
    return spec;
}

template <typename T>
PageBuffer<T> borrowed(const PackFile& pack, const PackSection& section, size_t count, const char* what) {
    require(section.bytes == count * sizeof(T), what, " is ", section.bytes, " bytes; the layout takes ",
            count * sizeof(T));
    return PageBuffer<T>::borrow(reinterpret_cast<const T*>(pack.data(section)), count, pack.keeper());
}

std::unique_ptr<qjit_linear> layer_from_panels(qjit_context* context, const PackFile& pack, const PackEntry& entry) {
    const auto start = std::chrono::steady_clock::now();
    QuantParams params = panel_params(*entry.fields);
    const jit::CpuKernelSpec spec = panel_kernel(*context, params, *entry.fields);
    require(entry.sections.size() == 3, "a panels entry has 3 sections, not ", entry.sections.size());
    PackedCodes codes;
    codes.bits = params.bits;
    codes.k = params.k;
    codes.n = params.n;
    codes.panel_columns = spec.panel_columns();
    jit::assign_kernel_slots(spec, codes);
    require(entry.fields->at("layout").get<std::string>() == codes.layout_name(), "layout is not ", codes.layout_name());
    codes.words = borrowed<uint32_t>(pack, entry.sections[0], size_t(codes.num_panels() * codes.panel_words()), "codes");
    const PanelMetadataSizes sizes = jit::beside_codes_metadata_sizes(spec, params);
    PanelMetadata metadata{borrowed<uint8_t>(pack, entry.sections[1], sizes.scale_bytes, "scales"),
                           borrowed<uint8_t>(pack, entry.sections[2], sizes.zero_bytes, "zero points")};
    TilingChoice choice;
    choice.spec = spec;
    choice.tiling = entry.fields->at("tiling").get<std::string>();
    choice.source = QJIT_TILING_PACK;
    choice.kernel_key = entry.fields->at("kernel_key").get<std::string>();
    choice.measured_us = entry.fields->at("measured_us").get<double>();
    auto layer = assemble_prepared_linear(context, std::move(params), std::move(codes), std::move(metadata),
                                          std::move(choice), start);
    layer->description += concat(" source=\"pack ", pack.path(), "\"");
    return layer;
}

// Runs read() over an entry's fields: a field missing or of the wrong type and contents that fail
// their checks become QJIT_ERROR_CORRUPT_DATA, and every error names the file.
template <typename Read>
auto reading_pack(const PackFile& pack, Read&& read) -> decltype(read()) {
    try {
        return reading_contents(read);
    } catch (const Error& e) {
        fail(e.status(), "'", pack.path(), "': ", e.what());
    }
}

}  // namespace

void write_pack_entry(PackWriter& writer, const std::string& name, const qjit_linear& layer) {
    if (!held_by_panels(layer)) {
        const std::string image = serialize_layer(layer);
        writer.add_entry(name, {{"kind", kLayerKind}}, {writer.write_section(image.data(), image.size())});
        return;
    }
    const QuantParams& p = layer.params;
    const JitExecutor& executor = static_cast<const JitLayer&>(*layer.cpu).executor();
    const PackedCodes& codes = layer.cpu->codes();
    const nlohmann::json fields = {
        {"kind", kPanelsKind},
        {"layout", codes.layout_name()},
        {"k", p.k},
        {"n", p.n},
        {"bits", p.bits},
        {"group_size", p.group_size},
        {"symmetric", p.symmetric},
        {"float_offsets", p.float_offsets},
        {"scale_type", scale_type_name(p.scale_type)},
        {"scale_code_bits", p.scale_code_bits},
        {"codebook", codebook_name(p.codebook)},
        {"kernel", jit::kernel_family_name(executor.spec())},
        {"tiling", layer.tuning.tiling},
        {"kernel_key", layer.tuning.kernel_key},
        {"measured_us", layer.tuning.measured_us},
    };
    const PanelMetadata& metadata = executor.metadata();
    std::vector<PackSection> sections = {
        writer.write_section(codes.words.data(), codes.words.size() * sizeof(uint32_t)),
        writer.write_section(metadata.scales.data(), metadata.scales.size()),
        writer.write_section(metadata.zeros.data(), metadata.zeros.size()),
    };
    writer.add_entry(name, fields, std::move(sections));
}

std::shared_ptr<const PackFile> open_pack(qjit_context& context, const std::string& path, const std::string& source) {
    std::shared_ptr<const PackFile> pack = PackFile::open(path);
    if (pack->source() != source)
        fail(QJIT_ERROR_STALE, "'", path, "' was made from ", pack->source(), ", not from ", source);
    reading_pack(*pack, [&] {
        for (const PackEntry& entry : pack->entries()) {
            const std::string kind = entry.fields->at("kind").get<std::string>();
            require(kind == kPanelsKind || kind == kLayerKind, "entry '", entry.name, "' is of kind '", kind, "'");
            if (kind == kPanelsKind) panel_kernel(context, panel_params(*entry.fields), *entry.fields);
        }
    });
    std::vector<const PackSection*> sections;
    for (const PackEntry& entry : pack->entries())
        for (const PackSection& section : entry.sections) sections.push_back(&section);
    std::atomic<bool> intact{true};
    auto check = [&](int64_t i) {
        if (!pack->intact(*sections[size_t(i)])) intact = false;
    };
    context.pool->parallel_for(int64_t(sections.size()), check);
    if (!intact) fail(QJIT_ERROR_CORRUPT_DATA, "'", path, "': a section's checksum does not match: the file is corrupt");
    return pack;
}

std::unique_ptr<qjit_linear> layer_from_pack(qjit_context* context, const PackFile& pack, const PackEntry& entry) {
    return reading_pack(pack, [&] {
        const std::string kind = entry.fields->at("kind").get<std::string>();
        if (kind == kPanelsKind) return layer_from_panels(context, pack, entry);
        require(kind == kLayerKind && entry.sections.size() == 1, "entry '", entry.name,
                "' is not a layer file's image");
        const PackSection& image = entry.sections[0];
        return layer_from_image(context, std::string_view(reinterpret_cast<const char*>(pack.data(image)), image.bytes));
    });
}

}  // namespace qjit
