// What the generated x86 kernels may use, as features rather than the public API's ordered
// levels (qjit_isa): code asks "512-bit vectors?" or "vpdpbusd?", never "at least level N?", so a
// new extension (AVX10, AMX) is a new feature here, not a rung every comparison must place.
#pragma once

#include <string>

#include "qjit/qjit.h"

namespace qjit::jit {

struct IsaFeatures {
    bool avx2 = false;    // 256-bit vectors, FMA, 16 vector registers: what every generated kernel needs
    bool avx512 = false;  // 512-bit vectors, 32 vector registers, mask registers, embedded broadcast
    bool vnni = false;    // vpdpbusd: AVX-VNNI on 256-bit vectors, AVX512-VNNI on 512-bit ones

    bool operator==(const IsaFeatures&) const = default;

    int lanes() const { return avx512 ? 16 : 8; }  // fp32 lanes of a vector register
    int vector_registers() const { return avx512 ? 32 : 16; }
    // "avx2", "avx2vnni", "avx512", "avx512vnni": the part of a kernel name that names its ISA.
    std::string tag() const { return std::string(avx512 ? "avx512" : "avx2") + (vnni ? "vnni" : ""); }

    // The features of a public level (PORTABLE and AUTO have none), and back.
    static IsaFeatures of(qjit_isa level) {
        IsaFeatures f;
        f.avx2 = level >= QJIT_ISA_AVX2 && level <= QJIT_ISA_AVX512_VNNI;
        f.avx512 = level == QJIT_ISA_AVX512 || level == QJIT_ISA_AVX512_VNNI;
        f.vnni = level == QJIT_ISA_AVX2_VNNI || level == QJIT_ISA_AVX512_VNNI;
        return f;
    }
    qjit_isa level() const {
        if (!avx2) return QJIT_ISA_PORTABLE;
        if (avx512) return vnni ? QJIT_ISA_AVX512_VNNI : QJIT_ISA_AVX512;
        return vnni ? QJIT_ISA_AVX2_VNNI : QJIT_ISA_AVX2;
    }
};

}  // namespace qjit::jit
