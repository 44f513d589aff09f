#include "runtime/cpu/jit_layer.hpp"

#include "base/error.hpp"
#include "format/inline_metadata.hpp"
#include "runtime/low_rank_pass.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {

// The codes and metadata as spec's kernels read them: the metadata in the codes' slots where the
// kernels read it inline, else beside them in the panel layout.
struct JitLayer::KernelStream {
    PackedCodes codes;
    PanelMetadata metadata;
};

JitLayer::KernelStream JitLayer::kernel_stream(const jit::CpuKernelSpec& spec, const QuantParams& params,
                                               PackedCodes codes, ThreadPool& pool) {
    if (spec.inline_metadata) return {kernel_codes(spec, params, std::move(codes), &pool), {}};
    return {std::move(codes), packed_metadata(spec, params, &pool)};
}

JitLayer::JitLayer(const jit::CpuKernelSpec& spec, std::string tiling, const QuantParams& params, PackedCodes codes,
                   std::unique_ptr<LowRankPass> low_rank, ThreadPool& pool, const std::string& dump_dir)
    : JitLayer(spec, std::move(tiling), params, kernel_stream(spec, params, std::move(codes), pool),
               std::move(low_rank), pool, dump_dir) {}

JitLayer::JitLayer(const jit::CpuKernelSpec& spec, std::string tiling, const QuantParams& params, KernelStream stream,
                   std::unique_ptr<LowRankPass> low_rank, ThreadPool& pool, const std::string& dump_dir)
    : CpuLayer(BackendKind::X86Jit, jit_forward_plan(spec, params), params, std::move(stream.codes), std::move(low_rank),
               pool),
      executor_(spec, params, passes(), dump_dir, std::move(stream.metadata)),
      tiling_(std::move(tiling)) {}

JitLayer::JitLayer(const jit::CpuKernelSpec& spec, std::string tiling, const QuantParams& params, PackedCodes codes,
                   PanelMetadata metadata, ThreadPool& pool, const std::string& dump_dir)
    : CpuLayer(BackendKind::X86Jit, jit_forward_plan(spec, params), params, std::move(codes), nullptr, pool),
      executor_(spec, params, passes(), dump_dir, std::move(metadata)),
      tiling_(std::move(tiling)) {
    require(this->codes().has_slots() == spec.inline_metadata, "a layer's codes have metadata slots exactly when its "
            "kernels read their metadata inline");
}

PanelMetadata JitLayer::panel_metadata() const {
    if (!executor_.spec().inline_metadata) return executor_.metadata();
    return metadata_from_slots(codes(), executor_.metadata_layout());
}

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
