#include "jit/x86/cpu_tiling.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "jit/knob_text.hpp"

namespace qjit::jit {

// An int8 activation is off by up to 1/254 of its group's largest value; a code of 6 bits or fewer by 1/126
// or more of its weight group's range, so the weights' own error dominates. At 8 bits the two are alike, and
// 8-bit weights stay exact (the measurements are in docs/cpu-kernels.md).
ActivationPath default_activation_path(int bits) {
    return bits <= 6 ? ActivationPath::Int8 : ActivationPath::F32;
}

std::optional<CpuKernelSpec> cpu_kernel_format(qjit_isa isa, qjit_activations activations, const QuantParams& p) {
    if (isa < QJIT_ISA_AVX2 || !unsupported_reason(p.format()).empty()) return std::nullopt;
    if (!p.symmetric && std::any_of(p.zeros.begin(), p.zeros.end(), [](uint16_t z) { return z > 255; }))
        return std::nullopt;  // GPTQ v1 can encode a zero of 256; the kernels keep zeros in bytes
    CpuKernelSpec spec;
    spec.isa = IsaFeatures::of(isa);
    spec.path = activations == QJIT_ACTIVATIONS_F32    ? ActivationPath::F32
                : activations == QJIT_ACTIVATIONS_INT8 ? ActivationPath::Int8
                                                       : default_activation_path(p.bits);
    spec.format = p.format();
    spec.inline_metadata = inline_metadata_fits(spec);
    return spec;
}

CpuKernelSpec cpu_kernel_spec(qjit_isa isa, ActivationPath path, int bits, int64_t k, int64_t group_size) {
    CpuKernelSpec spec;
    spec.isa = IsaFeatures::of(isa);
    spec.path = path;
    spec.format.bits = bits;
    spec.format.k = k;
    spec.format.group_size = group_size;
    spec.format.scale_type = ScaleType::F16;
    return spec;
}

std::string tiling_text(const CpuTiling& t) {
    return concat("tu=", t.tu, ",mb=", t.mb, ",prefetch=", t.prefetch, ",ku=", t.ku, ",ksplit=", t.ksplit);
}

CpuTiling parse_tiling(const std::string& text, CpuTiling t) {
    const KnobTable<CpuTiling> knobs = {{"tu", &CpuTiling::tu},
                                        {"mb", &CpuTiling::mb},
                                        {"prefetch", &CpuTiling::prefetch},
                                        {"ku", &CpuTiling::ku},
                                        {"ksplit", &CpuTiling::ksplit}};
    t = read_knobs(text, "tiling", knobs, t);
    require(t.ksplit >= 1, "tiling '", text, "': ksplit must be at least 1");
    return t;
}

CpuKernelSpec with_tiling_text(CpuKernelSpec spec, const std::string& text) {
    spec.tiling = parse_tiling(text, spec.tiling);
    spec.rows = spec.tiling.mb;
    try {
        check_spec(spec);
    } catch (const Error& e) {  // names the text the kernel's message does not
        fail(QJIT_ERROR_INVALID_ARGUMENT, "tiling '", text, "' cannot be used: ", e.what());
    }
    return spec;
}

}  // namespace qjit::jit
