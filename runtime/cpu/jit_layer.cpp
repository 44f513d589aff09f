#include "runtime/cpu/jit_layer.hpp"

#include "base/error.hpp"
#include "runtime/low_rank_pass.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {

JitLayer::JitLayer(const jit::CpuKernelSpec& spec, std::string tiling, const QuantParams& params, PackedCodes codes,
                   std::unique_ptr<LowRankPass> low_rank, ThreadPool& pool, const std::string& dump_dir)
    : CpuLayer(BackendKind::X86Jit, jit_forward_plan(spec, params), params, std::move(codes), std::move(low_rank), pool),
      executor_(spec, params, passes(), dump_dir, &pool),
      tiling_(std::move(tiling)) {}

JitLayer::JitLayer(const jit::CpuKernelSpec& spec, std::string tiling, const QuantParams& params, PackedCodes codes,
                   PanelMetadata metadata, ThreadPool& pool, const std::string& dump_dir)
    : CpuLayer(BackendKind::X86Jit, jit_forward_plan(spec, params), params, std::move(codes), nullptr, pool),
      executor_(spec, params, passes(), dump_dir, std::move(metadata)),
      tiling_(std::move(tiling)) {}

void JitLayer::forward(const float* x, int64_t m, float* y) const {
    executor_.forward(params(), codes(), x, m, y, pool());
    for (const Pass& pass : passes()) {
        switch (pass.kind) {
            case PassKind::Gather:    // in the activation prologue
            case PassKind::Product:   // the tasks of the executor's dispatch
            case PassKind::Outliers:  // in the task of a panel's first K part
                break;
            case PassKind::LowRank: add_low_rank(x, m, y); break;
        }
    }
}

std::string JitLayer::kernel_name() const { return jit::kernel_name(executor_.spec()); }

std::string JitLayer::kernel_fields() const {
    const jit::CpuKernelSpec& spec = executor_.spec();
    return concat("isa=", isa_name(spec.isa.level()), " activations=",
                  spec.path == jit::ActivationPath::Int8 ? "int8" : "f32", " tiling=", tiling_);
}

}  // namespace qjit
