// Sixteen floats as one GCC vector (one AVX-512 register, two AVX2 ones), their loads and stores
// at any float address, and exp over a vector: the pieces the vectorised loops of
// the library and the Llama forward share. Functions using them are compiled per instruction set
// (base/simd_clones.hpp).
#pragma once

#include <cstdint>

// Helpers that take and return these vectors are always inlined into functions compiled for the
// instruction set, so the ABI note about passing them without AVX-512 does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace qjit {

using Floats16 = float __attribute__((vector_size(64)));
using Ints16 = int32_t __attribute__((vector_size(64)));
// The vector read from and written to any float address. Through memcpy, which compiles to one
// unaligned load or store: a vector type with its alignment lowered to 4 is honoured by GCC but not
// everywhere by clang, which may emit an aligned access that faults.
[[gnu::always_inline]] inline Floats16 load16(const float* p) {
    Floats16 v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}
[[gnu::always_inline]] inline void store16(float* p, Floats16 v) { __builtin_memcpy(p, &v, sizeof v); }

[[gnu::always_inline]] inline Floats16 splat16(float v) { return Floats16{} + v; }

// e^x for each lane, within 2 ulp of std::exp over [-87.3, 88.7]; 0 below (so e^-inf is 0), +inf
// above. x = n ln 2 + r with |r| <= ln 2 / 2; e^r by its degree-7 Taylor polynomial (truncation
// error below 2^-27 there); 2^n added to the exponent bits.
[[gnu::always_inline]] inline Floats16 exp16(Floats16 x) {
    const Floats16 below = splat16(-87.3f), above = splat16(88.7f);
    const Floats16 clamped = x < below ? below : (x > above ? above : x);
    const Floats16 n = __builtin_convertvector(
        __builtin_convertvector(clamped * 1.44269504f + (clamped < 0 ? splat16(-0.5f) : splat16(0.5f)), Ints16),
        Floats16);
    // ln 2 in two parts, so that n * ln2_high is exact for |n| <= 128.
    const Floats16 r = (clamped - n * 0.693145752f) - n * 1.42860677e-6f;
    Floats16 p = splat16(1.0f / 5040);
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const Ints16 bits = __builtin_bit_cast(Ints16, p) + (__builtin_convertvector(n, Ints16) << 23);
    const Floats16 result = __builtin_bit_cast(Floats16, bits);
    const Floats16 zero = {}, infinity = splat16(__builtin_inff());
    return x < below ? zero : (x > above ? infinity : result);
}

}  // namespace qjit
