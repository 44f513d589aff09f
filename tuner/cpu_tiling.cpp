#include "tuner/cpu_tiling.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "base/error.hpp"

namespace qjit {

// Int8 activations change the real model's NLL by -0.0007 to +0.006 nats (docs/cpu-kernels.md): at most 3 % of
// the error of 2- to 4-bit weights (0.11 and up), but as large as the whole error of 8-bit weights.
jit::ActivationPath default_activation_path(int bits) {
    return bits <= 4 ? jit::ActivationPath::Int8 : jit::ActivationPath::F32;
}

std::optional<jit::CpuKernelSpec> cpu_kernel_format(qjit_isa isa, qjit_activations activations, const QuantParams& p) {
    if (isa < QJIT_ISA_AVX2 || !jit::unsupported_reason(p.format()).empty()) return std::nullopt;
    if (!p.symmetric && std::any_of(p.zeros.begin(), p.zeros.end(), [](uint16_t z) { return z > 255; }))
        return std::nullopt;  // GPTQ v1 can encode a zero of 256; the kernels keep zeros in bytes
    jit::CpuKernelSpec spec;
    spec.isa = jit::IsaFeatures::of(isa);
    spec.path = activations == QJIT_ACTIVATIONS_F32    ? jit::ActivationPath::F32
                : activations == QJIT_ACTIVATIONS_INT8 ? jit::ActivationPath::Int8
                                                       : default_activation_path(p.bits);
    spec.format = p.format();
    return spec;
}

jit::CpuKernelSpec cpu_kernel_spec(qjit_isa isa, jit::ActivationPath path, int bits, int64_t k, int64_t group_size) {
    jit::CpuKernelSpec spec;
    spec.isa = jit::IsaFeatures::of(isa);
    spec.path = path;
    spec.format.bits = bits;
    spec.format.k = k;
    spec.format.group_size = group_size;
    spec.format.scale_type = ScaleType::F16;
    return spec;
}

std::string tiling_text(const jit::CpuTiling& t) {
    return concat("tu=", t.tu, ",mb=", t.mb, ",prefetch=", t.prefetch, ",ku=", t.ku, ",ksplit=", t.ksplit);
}

jit::CpuKernelSpec with_tiling_text(jit::CpuKernelSpec spec, const std::string& text) {
    std::istringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        const size_t eq = item.find('=');
        require(eq != std::string::npos, "tiling '", text, "': item '", item, "' is not key=value");
        const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
        int number = 0;
        try {
            size_t used = 0;
            number = std::stoi(value, &used);
            require(used == value.size(), "tiling '", text, "': '", value, "' is not a number");
        } catch (const std::logic_error&) {
            fail(QJIT_ERROR_INVALID_ARGUMENT, "tiling '", text, "': '", value, "' is not a number");
        }
        jit::CpuTiling& t = spec.tiling;
        if (key == "tu") t.tu = number;
        else if (key == "mb") t.mb = number;
        else if (key == "prefetch") t.prefetch = number;
        else if (key == "ksplit") t.ksplit = number;
        else if (key == "ku") t.ku = number;
        else fail(QJIT_ERROR_INVALID_ARGUMENT, "tiling '", text, "': unknown key '", key,
                  "' (tu, mb, prefetch, ku, ksplit)");
    }
    require(spec.tiling.ksplit >= 1, "tiling '", text, "': ksplit must be at least 1");
    spec.rows = spec.tiling.mb;
    try {
        jit::check_spec(spec);
    } catch (const Error& e) {  // names the text the kernel's message does not
        fail(QJIT_ERROR_INVALID_ARGUMENT, "tiling '", text, "' cannot be used: ", e.what());
    }
    return spec;
}

}  // namespace qjit
