#include "runtime/linear_layer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>
#include <vector>

#include "base/error.hpp"
#include "runtime/cpu/jit_layer.hpp"
#include "runtime/cpu/panel_tasks.hpp"
#include "runtime/cpu/portable_kernel.hpp"
#include "runtime/cuda/cuda_layer.hpp"

namespace qjit {

namespace {

using Clock = std::chrono::steady_clock;

// A task of a parallel panel copy: wide enough that dispatch costs nothing next to it.
constexpr int64_t kColumnsPerCopyTask = 256;

std::string describe(const qjit_linear& layer) {
    const QuantParams& p = layer.params;
    const CpuLayer& backend = *layer.cpu;
    const std::string low_rank = backend.low_rank() ? backend.low_rank()->describe() : std::string();
    return concat(backend.kernel_name(), " format=", p.name(), " K=", p.k, " N=", p.n, " bits=", p.bits,
                  " group=", p.group_size, p.symmetric ? " symmetric" : " asymmetric", " act_order=", p.act_order ? "yes" : "no",
                  " scales=", scale_type_name(p.scale_type), " layout=", backend.codes().layout_name(),
                  " panel=", backend.codes().panel_columns, " threads=", layer.context->num_threads,
                  " passes=", passes_text(backend.passes()), low_rank.empty() ? "" : " ", low_rank, " ",
                  backend.kernel_fields());
}

double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The verbose line: what was made, where its tiling came from, and what each step cost.
void log_creation(const qjit_linear& layer, double setup_ms) {
    const TilingChoice& t = layer.tuning;
    std::string tuning = concat("tuning=\"", tiling_source_name(t.source), "\"");
    if (t.source == QJIT_TILING_SEARCHED) tuning += concat(" timed=", t.timed, "/", t.ranked);
    if (t.measured_us > 0) tuning += concat(" measured_us=", t.measured_us);
    std::fprintf(stderr, "qjit: linear created: %s %s tuning_ms=%.2f kernel_ms=%.2f setup_ms=%.2f%s%s\n",
                 layer.description.c_str(), tuning.c_str(), t.tuning_ms, layer.kernel_ms, setup_ms,
                 t.warning.empty() ? "" : " warning: ", t.warning.c_str());
}

// Prepares the layer on the context's CUDA device from its quantized matrix and tunes it there;
// logged on its own line.
void attach_cuda(qjit_linear& layer, QuantizedMatrix matrix, const LowRankFactors& compensator) {
    auto cuda = cuda::make_cuda_layer(*layer.context, std::move(matrix), compensator.rank > 0 ? &compensator : nullptr);
    if (layer.context->verbosity > 0)
        for (const auto& [key, c] : cuda->choices())
            std::fprintf(stderr, "qjit: cuda kernel: %s %s tuning=\"%s\" tuning_ms=%.2f compile_ms=%.2f measured_us=%.2f%s%s\n",
                         c.kernel_key.c_str(), c.tiling.c_str(), tiling_source_name(c.source), c.tuning_ms, c.compile_ms,
                         c.measured_us, c.warning.empty() ? "" : " warning: ", c.warning.c_str());
    layer.gpu = std::move(cuda);
}

// The CPU backend's layer: the x86 JIT's when the tuner chose a kernel, else the portable path's.
void prepare_cpu(qjit_linear& layer, PackedCodes codes, std::unique_ptr<LowRankPass> low_rank) {
    qjit_context& context = *layer.context;
    const TilingChoice& choice = layer.tuning;
    if (!choice.spec) {
        layer.cpu = std::make_unique<PortableLayer>(plan_forward(layer.params, layer.params.num_groups(), 1),
                                                    layer.params, std::move(codes), std::move(low_rank), *context.pool);
        return;
    }
    auto jit = std::make_unique<JitLayer>(*choice.spec, choice.tiling, layer.params, std::move(codes),
                                          std::move(low_rank), *context.pool, context.dump_dir);
    layer.kernel_ms = jit->executor().emission_ms();
    layer.cpu = std::move(jit);
}

}  // namespace

int layer_panel_columns(const TilingChoice& choice) {
    return choice.spec ? choice.spec->panel_columns() : PortableTiling::kChunkColumns;
}

namespace {

// An x86 JIT layer's kernels read the scales, zero points and offsets from their own panel layout;
// where it holds them exactly the handle drops its copy (layer_params reads them back).
void release_unpacked_metadata(qjit_linear& layer) {
    if (layer.cpu->kind() != BackendKind::X86Jit) return;
    const JitExecutor& executor = static_cast<const JitLayer&>(*layer.cpu).executor();
    if (!panel_metadata_is_exact(layer.params, executor.metadata_layout())) return;
    std::vector<float>().swap(layer.params.scales);
    std::vector<uint16_t>().swap(layer.params.zeros);
    std::vector<float>().swap(layer.params.offsets);
    layer.params.super_block = SuperBlockScales{};
    layer.metadata_in_kernels = true;
}

}  // namespace

std::unique_ptr<qjit_linear> assemble_linear(qjit_context* context, QuantParams params, PackedCodes codes,
                                             TilingChoice choice, Clock::time_point start, LowRankFactors compensator,
                                             LayerDevices devices) {
    auto layer = std::make_unique<qjit_linear>();
    layer->context = context;
    params.low_rank = {};
    if (compensator.rank > 0) params.low_rank = {compensator.rank, compensator.bits};
    // The backends answer before anything is built for them.
    require_supported(choice.spec ? BackendKind::X86Jit : BackendKind::Portable, params);
    const bool on_gpu = context->gpu && devices == LayerDevices::CpuAndContextGpu;
    if (on_gpu)
        require_supported(BackendKind::Cuda, params,
                          concat("; this context uploads layers to CUDA device ", context->gpu->ordinal));
    std::optional<QuantizedMatrix> gpu_matrix;
    if (on_gpu) gpu_matrix = QuantizedMatrix{params, unpack_codes(codes)};
    const LowRankFactors gpu_compensator = on_gpu ? compensator : LowRankFactors{};
    std::unique_ptr<LowRankPass> low_rank;
    if (compensator.rank > 0) {
        // The compensator's products take the layer's activation path: with int8 activations on
        // INT3 weights, their rounding is small next to the weights' and the dot products 4x
        // faster.
        const qjit_activations path = !choice.spec                                  ? context->activations
                                      : choice.spec->path == jit::ActivationPath::Int8 ? QJIT_ACTIVATIONS_INT8
                                                                                     : QJIT_ACTIVATIONS_F32;
        low_rank = std::make_unique<LowRankPass>(context, std::move(compensator), params.k, params.n, path);
    }
    layer->params = std::move(params);
    layer->tuning = std::move(choice);
    prepare_cpu(*layer, std::move(codes), std::move(low_rank));
    layer->description = describe(*layer);
    if (on_gpu) attach_cuda(*layer, std::move(*gpu_matrix), gpu_compensator);
    else release_unpacked_metadata(*layer);
    if (context->verbosity > 0) log_creation(*layer, ms_since(start));
    return layer;
}

std::unique_ptr<qjit_linear> assemble_prepared_linear(qjit_context* context, QuantParams params, PackedCodes codes,
                                                      PanelMetadata metadata, TilingChoice choice, Clock::time_point start) {
    require(choice.spec.has_value(), "a prepared layer needs an x86 JIT kernel");
    require_supported(BackendKind::X86Jit, params);
    if (context->gpu)
        require_supported(BackendKind::Cuda, params,
                          concat("; this context uploads layers to CUDA device ", context->gpu->ordinal));
    auto layer = std::make_unique<qjit_linear>();
    layer->context = context;
    layer->params = std::move(params);
    layer->tuning = std::move(choice);
    auto jit = std::make_unique<JitLayer>(*layer->tuning.spec, layer->tuning.tiling, layer->params, std::move(codes),
                                          std::move(metadata), *context->pool, context->dump_dir);
    layer->kernel_ms = jit->executor().emission_ms();
    layer->cpu = std::move(jit);
    layer->metadata_in_kernels = true;
    layer->description = describe(*layer);
    if (context->gpu) attach_cuda(*layer, unpack_linear(*layer), {});
    if (context->verbosity > 0) log_creation(*layer, ms_since(start));
    return layer;
}

std::unique_ptr<qjit_linear> make_linear(qjit_context* context, QuantizedMatrix matrix, LowRankFactors compensator,
                                         std::optional<qjit_activations> activations, LayerDevices devices) {
    const auto start = Clock::now();
    validate(matrix);
    TilingChoice choice = choose_tiling(*context, matrix.params, activations);
    PackedCodes codes = pack_codes(matrix.codes.data(), matrix.params.bits, matrix.params.k, matrix.params.n,
                                   layer_panel_columns(choice), block_widths(matrix.params));
    return assemble_linear(context, std::move(matrix.params), std::move(codes), std::move(choice), start,
                           std::move(compensator), devices);
}

std::unique_ptr<qjit_linear> make_linear(qjit_context* context, QuantParams params, PackedCodes codes,
                                         LowRankFactors compensator, std::optional<qjit_activations> activations) {
    const auto start = Clock::now();
    TilingChoice choice = choose_tiling(*context, params, activations);
    if (codes.panel_columns != layer_panel_columns(choice)) {
        PackedCodes repacked =
            zeroed_packed_codes(codes.bits, codes.k, codes.n, layer_panel_columns(choice), codes.block_bits);
        fill_panels_in_parallel(*context->pool, repacked, kColumnsPerCopyTask,
                                [&](int64_t first, int64_t end) { copy_panels(codes, first, end, repacked); });
        codes = std::move(repacked);
    }
    return assemble_linear(context, std::move(params), std::move(codes), std::move(choice), start,
                           std::move(compensator));
}

void linear_forward(const qjit_linear& layer, const float* x, int64_t m, float* y) { layer.cpu->forward(x, m, y); }

void linear_forward_shared_input(std::span<const qjit_linear* const> layers, const float* x, int64_t m,
                                 float* const* ys) {
    thread_local std::vector<int32_t> rows;  // 0 .. m - 1: every member takes every row
    thread_local std::vector<GroupedRows> group;
    if (int64_t(rows.size()) < m) {
        rows.resize(size_t(m));
        std::iota(rows.begin(), rows.end(), 0);
    }
    group.clear();
    for (size_t i = 0; i < layers.size(); ++i) {
        if (runs_in_jit_group(*layers[i]->cpu))
            group.push_back({int(i), layers[i]->cpu.get(), rows.data(), m, ys[i]});
        else
            linear_forward(*layers[i], x, m, ys[i]);
    }
    if (!group.empty()) group.front().layer->run_grouped(group, x, layers[0]->params.k);
}

const BackendLayer& layer_on(const qjit_linear& layer, int device) {
    require(device == QJIT_DEVICE_CPU || device == QJIT_DEVICE_CUDA, "device is ", device,
            "; expected QJIT_DEVICE_CPU or QJIT_DEVICE_CUDA");
    if (device == QJIT_DEVICE_CPU) return *layer.cpu;
    if (!layer.gpu || layer.gpu->kind() != BackendKind::Cuda)
        fail(QJIT_ERROR_NO_DEVICE, "the layer has no CUDA weights: its context was created without options.cuda_device");
    return *layer.gpu;
}

QuantParams layer_params(const qjit_linear& layer) {
    QuantParams params = layer.params;
    if (layer.metadata_in_kernels) {
        const JitLayer& jit = static_cast<const JitLayer&>(*layer.cpu);
        unpack_panel_metadata(jit.panel_metadata(), jit.executor().metadata_layout(), params);
    }
    return params;
}

QuantizedMatrix unpack_linear(const qjit_linear& layer) {
    return QuantizedMatrix{layer_params(layer), unpack_codes(layer.cpu->codes())};
}

LowRankFactors unpack_low_rank(const qjit_linear& layer) {
    return layer.cpu->low_rank() ? layer.cpu->low_rank()->factors() : LowRankFactors{};
}

int64_t weight_bytes(const qjit_linear& layer) { return layer.cpu->weight_bytes(); }

void evict_layer_from_caches(const qjit_linear& layer) { layer.cpu->evict(); }

}  // namespace qjit
