#include "runtime/tp_mlp_file.hpp"

#include <cstring>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/replace_file.hpp"
#include "io/framed_file.hpp"
#include "io/json_integer.hpp"
#include "runtime/layer_file.hpp"
#include "io/layer_sections.hpp"

namespace qjit {

namespace {

constexpr FileKind kTpMlpFile{"QJITTPML", "tensor-parallel MLP", 1, 1};

// A section's bytes at `offset`, `bytes` long, or QJIT_ERROR_CORRUPT_DATA naming it.
std::string_view take(std::string_view image, size_t& offset, size_t end, uint64_t bytes, const char* what) {
    if (bytes > end - offset)
        corrupt(concat("the ", what, " section (", bytes, " bytes) runs past the end of the file"));
    const std::string_view section = image.substr(offset, size_t(bytes));
    offset += size_t(bytes);
    return section;
}

}  // namespace

std::string serialize_tp_mlp(const qjit_tp_mlp& mlp) {
    const std::string up = serialize_layer(*mlp.up), down = serialize_layer(*mlp.down);
    const std::string gate = mlp.gate ? serialize_layer(*mlp.gate) : std::string();
    const nlohmann::json header = {
        {"kind", mlp.kind == QJIT_MLP_SWIGLU ? "swiglu" : "gelu"},
        {"algorithm", mlp.algorithm == QJIT_TP_AWARE ? "tp_aware" : "naive"},
        {"rank", mlp.rank},
        {"world_size", mlp.world_size},
        {"k1", mlp.k1},
        {"n1", mlp.n1},
        {"n2", mlp.n2},
        {"qjit_version", qjit_version()},
        {"sections",
         {{"down_rows", mlp.down_rows.size()}, {"up", up.size()}, {"gate", gate.size()}, {"down", down.size()}}}};
    return write_framed(kTpMlpFile, 1, header, [&](std::string& image) {
        image.append(reinterpret_cast<const char*>(mlp.down_rows.data()), mlp.down_rows.size() * sizeof(int32_t));
        image += up;
        image += gate;
        image += down;
    });
}

std::unique_ptr<qjit_tp_mlp> deserialize_tp_mlp(qjit_context* context, std::string_view image) {
    const Frame frame = read_framed(kTpMlpFile, image);
    return reading_contents([&] {
        const nlohmann::json& header = frame.header.root();
        auto mlp = std::make_unique<qjit_tp_mlp>();
        mlp->context = context;
        const std::string kind = header.at("kind"), algorithm = header.at("algorithm");
        if (kind != "swiglu" && kind != "gelu") corrupt(concat("kind is '", kind, "'; expected swiglu or gelu"));
        if (algorithm != "tp_aware" && algorithm != "naive")
            corrupt(concat("algorithm is '", algorithm, "'; expected tp_aware or naive"));
        mlp->kind = kind == "swiglu" ? QJIT_MLP_SWIGLU : QJIT_MLP_GELU;
        mlp->algorithm = algorithm == "tp_aware" ? QJIT_TP_AWARE : QJIT_TP_NAIVE;
        // Integers in range, never a float converted unchecked; check_tp_mlp checks how they fit together.
        mlp->rank = int(json_integer_field(header, "rank", 0, INT32_MAX));
        mlp->world_size = int(json_integer_field(header, "world_size", 1, INT32_MAX));
        mlp->k1 = json_integer_field(header, "k1", 1, INT64_MAX);
        mlp->n1 = json_integer_field(header, "n1", 1, INT64_MAX);
        mlp->n2 = json_integer_field(header, "n2", 1, INT64_MAX);
        const nlohmann::json& sections = header.at("sections");
        size_t offset = frame.body_begin;
        const size_t end = frame.body_end;
        const auto section_bytes = [&](const char* name) { return uint64_t(json_integer_field(sections, name, 0, INT64_MAX)); };
        const uint64_t rows = section_bytes("down_rows");
        if (rows > (end - offset) / sizeof(int32_t)) corrupt("the down_rows section runs past the end of the file");
        const std::string_view rows_bytes = take(image, offset, end, rows * sizeof(int32_t), "down_rows");
        mlp->down_rows.resize(size_t(rows));
        // No memcpy for no rows: an empty vector's data() may be null, which memcpy may not take.
        if (rows != 0) std::memcpy(mlp->down_rows.data(), rows_bytes.data(), rows_bytes.size());
        const std::string_view up = take(image, offset, end, section_bytes("up"), "up");
        const std::string_view gate = take(image, offset, end, section_bytes("gate"), "gate");
        const std::string_view down = take(image, offset, end, section_bytes("down"), "down");
        if (offset != end) corrupt(concat(end - offset, " unexpected bytes after the last section"));
        if ((mlp->kind == QJIT_MLP_SWIGLU) == gate.empty())
            corrupt(mlp->kind == QJIT_MLP_SWIGLU ? "a SwiGLU MLP without its gate" : "a GELU MLP with a gate");
        mlp->up = layer_from_image(context, up);
        if (!gate.empty()) mlp->gate = layer_from_image(context, gate);
        mlp->down = layer_from_image(context, down);
        check_tp_mlp(*mlp);
        return mlp;
    });
}

void save_tp_mlp(const qjit_tp_mlp& mlp, const std::string& path) { replace_file(path, serialize_tp_mlp(mlp)); }

std::unique_ptr<qjit_tp_mlp> load_tp_mlp(qjit_context* context, const std::string& path) {
    return read_mapped(path, [&](std::string_view image) { return deserialize_tp_mlp(context, image); });
}

}  // namespace qjit
