// The instruction-set families the library's hand-written vector loops compile for, and the one a
// context's ISA (its CPU capped by the options and $QJIT_MAX_ISA) runs: nothing picks a family by
// asking the CPU itself. A loop is written once over a float vector type (base/float_vectors.hpp)
// and instantiated per family in functions marked with the family's target attribute:
//   portable  SSE2 (baseline x86-64), Floats4, no FMA
//   avx2      AVX2 + FMA + F16C, Floats8
//   avx512    AVX-512 F/BW/VL + FMA, Floats16 (what tuner/cpu_isa.cpp checks for the level)
// The VNNI levels add integer dot products only: their float loops are their base family's.
#pragma once

#include "qjit/qjit.h"

#define QJIT_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define QJIT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

namespace qjit {

enum class SimdFamily { Portable, Avx2, Avx512 };

inline SimdFamily simd_family(qjit_isa isa) {
    if (isa >= QJIT_ISA_AVX512) return SimdFamily::Avx512;
    if (isa >= QJIT_ISA_AVX2) return SimdFamily::Avx2;
    return SimdFamily::Portable;
}

inline const char* simd_family_name(SimdFamily family) {
    switch (family) {
        case SimdFamily::Avx512: return "avx512";
        case SimdFamily::Avx2: return "avx2";
        case SimdFamily::Portable: break;
    }
    return "portable";
}

// One function pointer per family, picked by a context's ISA.
template <typename Fn>
struct PerFamily {
    Fn portable, avx2, avx512;
    Fn operator[](SimdFamily family) const {
        return family == SimdFamily::Avx512 ? avx512 : family == SimdFamily::Avx2 ? avx2 : portable;
    }
};

}  // namespace qjit
