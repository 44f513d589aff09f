#include "runtime/gptq_layer.hpp"

#include <chrono>
#include <utility>

#include "base/error.hpp"
#include "format/gptq_import.hpp"
#include "format/gptq_packing.hpp"
#include "runtime/cpu/panel_tasks.hpp"

namespace qjit {

namespace {

// Columns per packing task: a task's part of a qweight row is 4 KiB, a page, so every page of
// qweight is read whole by one task; a 4096- to 28672-wide layer still makes 4 to 28 tasks.
constexpr int64_t kColumnsPerTask = 1024;

}  // namespace

std::unique_ptr<qjit_linear> make_linear_from_gptq(qjit_context* context, int64_t k, int64_t n,
                                                   const qjit_gptq_tensors& tensors, LowRankFactors compensator) {
    const auto start = std::chrono::steady_clock::now();
    require(context != nullptr, "context is NULL");
    QuantParams params = import_gptq_params(k, n, tensors);
    TilingChoice choice = choose_tiling(*context, params);
    PackedCodes codes = unwritten_packed_codes(params.bits, k, n, layer_panel_columns(choice));
    fill_panels_in_parallel(*context->pool, codes, kColumnsPerTask,
                            [&](int64_t first_panel, int64_t end_panel) {
                                pack_gptq_panels(tensors.qweight, params.row_order, first_panel, end_panel, codes);
                            });
    return assemble_linear(context, std::move(params), std::move(codes), std::move(choice), start,
                           std::move(compensator));
}

}  // namespace qjit
