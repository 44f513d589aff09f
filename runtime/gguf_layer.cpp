#include "runtime/gguf_layer.hpp"

#include <chrono>
#include <optional>
#include <utility>

#include "base/error.hpp"
#include "io/gguf_import.hpp"
#include "runtime/cpu/cpu_tiling_choice.hpp"
#include "runtime/cpu/panel_tasks.hpp"

namespace qjit {

namespace {

// Columns of one import task: enough work to outweigh a dispatch, few enough to spread a layer.
constexpr int64_t kColumnsPerImportTask = 64;

}  // namespace

std::unique_ptr<qjit_linear> make_linear_from_gguf(qjit_context* context, GgmlType type, const uint8_t* data,
                                                   size_t bytes, int64_t k, int64_t n) {
    const auto start = std::chrono::steady_clock::now();
    QuantParams params = import_gguf_params_shell(type, data, bytes, k, n);
    const std::string source = gguf_import_name(type);
    std::optional<TilingChoice> choice;
    try {
        choice = choose_tiling(*context, params);
    } catch (const Error& e) {
        fail(e.status(), "GGUF ", source, ": ", e.what());
    }
    PackedCodes codes = unwritten_packed_codes(params.bits, k, n, layer_panel_columns(*choice));
    fill_panels_in_parallel(*context->pool, codes, kColumnsPerImportTask, [&](int64_t first, int64_t end) {
        import_gguf_panels(type, data, first, end, params, codes);
    });
    validate(params);
    std::unique_ptr<qjit_linear> layer;
    try {
        layer = assemble_linear(context, std::move(params), std::move(codes), std::move(*choice), start);
    } catch (const Error& e) {
        fail(e.status(), "GGUF ", source, ": ", e.what());
    }
    layer->description += concat(" source=\"GGUF ", source, "\"");
    return layer;
}

}  // namespace qjit
