// The x86 JIT backend's layer: codes packed at its kernel's panel width and the executor holding
// the kernels and the repacked metadata (runtime/cpu/jit_executor.hpp). A forward runs the gather,
// the products and the outliers as one dispatch, then the compensator. A grouped call (the experts
// of a MoE layer) prepares every expert's rows in one dispatch and runs every product in another.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/cpu/cpu_layer.hpp"
#include "runtime/cpu/jit_executor.hpp"

namespace qjit {

class JitLayer final : public CpuLayer {
public:
    // codes: packed with spec.panel_columns(). tiling: the tiling's text, for the describe string.
    // dump_dir: where to write each kernel's machine code ("" for nowhere).
    JitLayer(const jit::CpuKernelSpec& spec, std::string tiling, const QuantParams& params, PackedCodes codes,
             std::unique_ptr<LowRankPass> low_rank, ThreadPool& pool, const std::string& dump_dir);
    // The same with the metadata in the kernels' panel layout already (a pack file's), and no
    // compensator.
    JitLayer(const jit::CpuKernelSpec& spec, std::string tiling, const QuantParams& params, PackedCodes codes,
             PanelMetadata metadata, ThreadPool& pool, const std::string& dump_dir);

    const JitExecutor& executor() const { return executor_; }
    // The scales and zero points in the panel layout (metadata_layout()), wherever the kernels read
    // them: beside the codes, or from their slots.
    PanelMetadata panel_metadata() const;

    void forward(const float* x, int64_t m, float* y) const override;
    // Every layer of `group` must be a JitLayer (runtime/cpu/jit_grouped.cpp).
    void run_grouped(std::span<const GroupedRows> group, const float* x, int64_t k) const override;
    std::string kernel_name() const override;
    std::string kernel_fields() const override;

private:
    struct KernelStream;  // codes and metadata as the kernels read them (jit_layer.cpp)
    static KernelStream kernel_stream(const jit::CpuKernelSpec& spec, const QuantParams& params, PackedCodes codes,
                                      ThreadPool& pool);
    JitLayer(const jit::CpuKernelSpec& spec, std::string tiling, const QuantParams& params, KernelStream stream,
             std::unique_ptr<LowRankPass> low_rank, ThreadPool& pool, const std::string& dump_dir);

    int64_t metadata_bytes() const override { return executor_.metadata_bytes(); }
    void evict_metadata() const override { executor_.evict_metadata(); }

    JitExecutor executor_;
    std::string tiling_;
};

// Whether JitLayer::run_grouped takes `layer`: an x86 JIT layer whose plan has only gathers,
// products and a compensator (runtime/cpu/jit_grouped.cpp).
bool runs_in_jit_group(const BackendLayer& layer);

}  // namespace qjit
