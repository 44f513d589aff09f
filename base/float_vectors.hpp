// Float vectors as GCC vector types (Floats16: one AVX-512 register, two AVX2 ones; Floats8 and
// Floats4 for the narrower instruction sets), their loads and stores at any float address, lane
// reductions, and exp over a vector: the pieces the vectorised loops of the library and the Llama
// forward share. Everything here but the families' own loads is always inlined, so it compiles
// for the instruction set of the function it lands in (a family's target attribute,
// base/simd_family.hpp, or a file's flags).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "base/simd_family.hpp"

// Helpers that take and return these vectors are always inlined into functions compiled for the
// instruction set, so the ABI note about passing them without AVX-512 does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace qjit {

using Floats16 = float __attribute__((vector_size(64)));
using Ints16 = int32_t __attribute__((vector_size(64)));
using Floats8 = float __attribute__((vector_size(32)));
using Floats4 = float __attribute__((vector_size(16)));

// The lane count of a float vector type, and its integer twin (what a comparison of two yields).
template <typename V>
inline constexpr int kLanes = int(sizeof(V) / sizeof(float));
template <typename V>
using IntsOf = decltype(V{} < V{});

// The vector read from and written to any float address. Through memcpy, which compiles to one
// unaligned load or store: a vector type with its alignment lowered to 4 is honoured by GCC but not
// everywhere by clang, which may emit an aligned access that faults.
template <typename V>
[[gnu::always_inline]] inline V load_lanes(const float* p) {
    V v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}
template <typename V>
[[gnu::always_inline]] inline void store_lanes(float* p, V v) {
    __builtin_memcpy(p, &v, sizeof v);
}
// The vector of kLanes<V> IEEE binary16 values at any address, converted exactly (signed zeros,
// subnormals, infinities and NaNs included). In vector arithmetic rather than F16C, so that it
// compiles in every family and inlines into kernels written over V: the 15 magnitude bits moved
// under a float's exponent and scaled by 2^112 (exact for normals and subnormals alike), then the
// exponent of infinities and NaNs and the sign set. (Under denormals-are-zero, halves below 2^-14
// read as zero.)
using Halves4 = uint16_t __attribute__((vector_size(8)));
using Halves8 = uint16_t __attribute__((vector_size(16)));
using Halves16 = uint16_t __attribute__((vector_size(32)));
template <typename V>
[[gnu::always_inline]] inline V load_halves(const uint16_t* p) {
    using Ints = IntsOf<V>;
    using Halves = std::conditional_t<kLanes<V> == 4, Halves4, std::conditional_t<kLanes<V> == 8, Halves8, Halves16>>;
    Halves h;
    __builtin_memcpy(&h, p, sizeof h);
    const Ints bits = __builtin_convertvector(h, Ints);
    const Ints magnitude = (bits & 0x7fff) << 13;
    const Ints finite = __builtin_bit_cast(Ints, __builtin_bit_cast(V, magnitude) * 0x1p112f);
    const Ints value = (bits & 0x7c00) == 0x7c00 ? (magnitude | 0x7f800000) : finite;
    return __builtin_bit_cast(V, value | ((bits & 0x8000) << 16));
}
// The vector of kLanes<V> int8 values at any address, as floats (exact). GCC 12 converts an int8
// vector to int32 or float lanes a lane at a time, so for 8 lanes the bytes are read as one
// integer into the low lanes of a 16-byte vector (a movq; through memory, a narrow store then a
// wide load stalls), each is copied to every byte of its 32-bit lane (one shuffle) and
// sign-extended by an arithmetic shift of the top one.
using Int8s16 = int8_t __attribute__((vector_size(16)));
template <typename V, size_t... I>
[[gnu::always_inline]] inline V bytes_to_floats(const int8_t* p, std::index_sequence<I...>) {
    static_assert(kLanes<V> == 8, "load_bytes takes the other widths its own ways");
    using Words2 = uint64_t __attribute__((vector_size(16)));
    uint64_t bits;
    __builtin_memcpy(&bits, p, sizeof bits);
    const Int8s16 b = __builtin_bit_cast(Int8s16, Words2{bits, 0});
    // Lane I / 4's byte in all four bytes of its lane.
    const auto tops = __builtin_shufflevector(b, b, (I / 4)...);
    return __builtin_convertvector(__builtin_bit_cast(IntsOf<V>, tops) >> 24, V);
}
template <typename V>
[[gnu::always_inline]] inline V load_bytes(const int8_t* p) {
    if constexpr (kLanes<V> == 16) {  // two halves joined: GCC 12 widens 16 bytes to 64 through memory
        const Floats8 low = load_bytes<Floats8>(p), high = load_bytes<Floats8>(p + 8);
        return __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    } else if constexpr (kLanes<V> == 4) {  // SSE2 has no byte shuffle: four sign-extending loads
        return __builtin_convertvector((IntsOf<V>{p[0], p[1], p[2], p[3]}), V);
    } else {
        return bytes_to_floats<V>(p, std::make_index_sequence<4 * kLanes<V>>{});
    }
}
// The AVX2 and AVX-512 families' own conversions (base/simd_family.hpp), for their kernels:
// halves through F16C (vcvtph2ps; the same floats as load_halves for every half but a signaling
// NaN, which comes out quiet) and int8 values sign-extended and converted (vpmovsxbd, vcvtdq2ps;
// the same floats as load_bytes), one or two instructions where the portable forms take several.
// Plain inline functions with their family's target, which the compilers inline into the
// kernels' entry points (whose target is theirs) but refuse as always_inline inside the
// target-less templates between; the lanes go through an array, since a vector passed to or
// returned from a function of another target changes the ABI. The array's size picks the width.
QJIT_TARGET_AVX2 inline void family_load_halves(const uint16_t* p, float (&lanes)[8]) {
    _mm256_storeu_ps(lanes, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
QJIT_TARGET_AVX512 inline void family_load_halves(const uint16_t* p, float (&lanes)[16]) {
    _mm512_storeu_ps(lanes, _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
}
QJIT_TARGET_AVX2 inline void family_load_bytes(const int8_t* p, float (&lanes)[8]) {
    _mm256_storeu_ps(lanes, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
}
QJIT_TARGET_AVX512 inline void family_load_bytes(const int8_t* p, float (&lanes)[16]) {
    _mm512_storeu_ps(lanes, _mm512_maskz_cvtepi32_ps(
                                0xffff, _mm512_maskz_cvtepi8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
}

// Every lane v, as one broadcast: through v's bits, since an integer 0 + x folds away where a float
// 0 + v costs an add before each broadcast (0 + -0 is +0) and GCC 12 builds float vectors written
// lane by lane, or v - 0, a lane at a time on AVX-512.
template <typename V>
[[gnu::always_inline]] inline V splat(float v) {
    return __builtin_bit_cast(V, IntsOf<V>{} + __builtin_bit_cast(int32_t, v));
}

template <typename V>
[[gnu::always_inline]] inline V lane_max(V a, V b) {
    return a > b ? a : b;
}
// The lanes' largest value: the upper half folded onto the lower until one lane is left, a chain
// of log2(lanes) steps (the largest value is the same in any order).
template <typename V>
[[gnu::always_inline]] inline float max_of_lanes(V v) {
    if constexpr (kLanes<V> == 16) {
        return max_of_lanes(lane_max(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7),
                                     __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)));
    } else if constexpr (kLanes<V> == 8) {
        return max_of_lanes(lane_max(__builtin_shufflevector(v, v, 0, 1, 2, 3), __builtin_shufflevector(v, v, 4, 5, 6, 7)));
    } else {
        const V pairs = lane_max(v, __builtin_shufflevector(v, v, 2, 3, 0, 1));
        return pairs[0] > pairs[1] ? pairs[0] : pairs[1];
    }
}
// The lanes' sum, lane 0 first (the same order on every call).
template <typename V>
[[gnu::always_inline]] inline float sum_of_lanes(V v) {
    float sum = 0.0f;
    for (int i = 0; i < kLanes<V>; ++i) sum += v[i];
    return sum;
}

// e^x for each lane, within 2 ulp of std::exp over [-87.3, 88.7]; 0 below (so e^-inf is 0), +inf
// above. x = n ln 2 + r with |r| <= ln 2 / 2; e^r by its degree-7 Taylor polynomial (truncation
// error below 2^-27 there); 2^n added to the exponent bits.
template <typename V>
[[gnu::always_inline]] inline V exp_lanes(V x) {
    using Ints = IntsOf<V>;
    const V below = splat<V>(-87.3f), above = splat<V>(88.7f);
    const V clamped = x < below ? below : (x > above ? above : x);
    const V n = __builtin_convertvector(
        __builtin_convertvector(clamped * 1.44269504f + (clamped < 0 ? splat<V>(-0.5f) : splat<V>(0.5f)), Ints), V);
    // ln 2 in two parts, so that n * ln2_high is exact for |n| <= 128.
    const V r = (clamped - n * 0.693145752f) - n * 1.42860677e-6f;
    V p = splat<V>(1.0f / 5040);
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const Ints bits = __builtin_bit_cast(Ints, p) + (__builtin_convertvector(n, Ints) << 23);
    const V result = __builtin_bit_cast(V, bits);
    const V zero = {}, infinity = splat<V>(__builtin_inff());
    return x < below ? zero : (x > above ? infinity : result);
}

}  // namespace qjit
