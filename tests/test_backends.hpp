// The CPU kernel families a test sweeps: the portable path, and the generated kernels of each ISA
// this machine runs on both activation paths.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "qjit/qjit.h"
#include "tuner/cpu_isa.hpp"

namespace qjit::test {

// A kernel family: the ISA cap and activation path of the context (QJIT_ISA_PORTABLE: the
// portable path).
struct Backend {
    qjit_isa isa;
    qjit_activations activations;
};

inline std::string backend_name(const Backend& b) {
    if (b.isa == QJIT_ISA_PORTABLE) return "portable";
    return std::string(isa_name(b.isa)) + (b.activations == QJIT_ACTIVATIONS_INT8 ? "_int8" : "_f32");
}

inline void PrintTo(const Backend& b, std::ostream* out) { *out << backend_name(b); }

// Every backend this CPU runs. The f32 path emits the same code with or without VNNI, so it is
// listed once per vector width.
inline std::vector<Backend> available_backends() {
    std::vector<Backend> backends = {{QJIT_ISA_PORTABLE, QJIT_ACTIVATIONS_F32}};
    for (const qjit_isa isa : {QJIT_ISA_AVX2, QJIT_ISA_AVX2_VNNI, QJIT_ISA_AVX512, QJIT_ISA_AVX512_VNNI}) {
        if (!cpu_supports(isa)) continue;
        if (isa == QJIT_ISA_AVX2 || isa == QJIT_ISA_AVX512) backends.push_back({isa, QJIT_ACTIVATIONS_F32});
        backends.push_back({isa, QJIT_ACTIVATIONS_INT8});
    }
    return backends;
}

}  // namespace qjit::test
