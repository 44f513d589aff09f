// Internal to format/: the bit layout of ggml's quantized blocks (ggml-common.h's structs; the bit
// arithmetic follows gguf-py's quants.py, whose reshapes give each value's bits). Where each field
// of a block lies and how a value's integer code and a sub-block's integer scale and min are
// unpacked: integers only. What is computed from them in floating point belongs to each user:
// io/gguf_dequantize.cpp (ggml's fp32 arithmetic, the oracle the importer is tested against)
// and io/gguf_import.cpp (qjit's codes, scales and offsets).
#pragma once

#include <cstdint>

#include "base/half.hpp"

namespace qjit::gguf_blocks {

constexpr int kSuperBlock = 256;  // QK_K: values per K-quant block

inline uint16_t u16_at(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
inline uint32_t u32_at(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
// An fp16 field as fp32 (exact: every fp16 value, subnormals included, is an fp32 value).
inline float half_at(const uint8_t* p) { return half_to_float(u16_at(p)); }

// Byte offsets of each block's fields: d and m/dmin are fp16; qs, qh, ql, hmask, scales bytes.
struct Q4_0 { static constexpr int d = 0, qs = 2; };
struct Q4_1 { static constexpr int d = 0, m = 2, qs = 4; };
struct Q5_0 { static constexpr int d = 0, qh = 2, qs = 6; };
struct Q5_1 { static constexpr int d = 0, m = 2, qh = 4, qs = 8; };
struct Q8_0 { static constexpr int d = 0, qs = 2; };
struct Q2_K { static constexpr int scales = 0, qs = 16, d = 80, dmin = 82; };
struct Q3_K { static constexpr int hmask = 0, qs = 32, scales = 96, d = 108; };
struct Q4_K { static constexpr int d = 0, dmin = 2, scales = 4, qs = 16; };
struct Q5_K { static constexpr int d = 0, dmin = 2, scales = 4, qh = 16, qs = 48; };
struct Q6_K { static constexpr int ql = 0, qh = 128, scales = 192, d = 208; };
struct IQ4_NL { static constexpr int d = 0, qs = 2; };
struct IQ4_XS { static constexpr int d = 0, scales_h = 2, scales_l = 4, qs = 8; };

// The nibble of value i (of 32) in 16 bytes: value j in the low nibble of byte j, value 16 + j in
// its high nibble (Q4_0, Q4_1, and the low bits of Q5_0 and Q5_1).
inline int nibble_code(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; }
// All 32 nibble codes at once, in two loops the compiler vectorises.
inline void nibble_codes(const uint8_t* qs, uint8_t* codes) {
    for (int i = 0; i < 16; ++i) codes[i] = uint8_t(qs[i] & 15);
    for (int i = 0; i < 16; ++i) codes[16 + i] = uint8_t(qs[i] >> 4);
}

// The 5-bit code of value i (of 32): its nibble and bit i of the little-endian uint32 qh.
inline int five_bit_code(const uint8_t* qs, uint32_t qh, int i) { return nibble_code(qs, i) | int(qh >> i & 1) << 4; }

// Q8_0's value i as an unsigned byte: the int8 code plus 128 (the sign bit flipped).
inline int q8_0_biased_code(const uint8_t* qs, int i) { return qs[i] ^ 0x80; }

// The 2-bit field of value i (of 256) in 64 bytes: byte 32 * (i / 128) + i % 32, bits
// 2 * ((i % 128) / 32) (Q2_K's codes, Q3_K's low bits).
inline int two_bit_code(const uint8_t* qs, int i) { return qs[i / 128 * 32 + i % 32] >> (2 * (i % 128 / 32)) & 3; }

// Bit i / 32 of byte i % 32 of 32 bytes: Q3_K's hmask bit and Q5_K's fifth bit of value i.
inline int high_bit(const uint8_t* bits, int i) { return bits[i % 32] >> (i / 32) & 1; }

// Q2_K's scale and min of sub-block s (of 16): the low and high nibble of scale byte s.
inline int q2_k_scale(const uint8_t* scales, int s) { return scales[s] & 15; }
inline int q2_k_min(const uint8_t* scales, int s) { return scales[s] >> 4; }

// Q3_K's 6-bit scale of sub-block s (of 16), packed in 12 bytes: low nibbles in bytes 0..7 (s < 8
// low, else high nibble of byte s - 8), the top two bits in bytes 8..11 (byte 8 + s % 4, bits
// 2 * (s / 4)); the scale is that code - 32.
inline int q3_k_scale(const uint8_t* scales, int s) {
    const int low = s < 8 ? scales[s] & 15 : scales[s - 8] >> 4;
    const int high = scales[8 + s % 4] >> (2 * (s / 4)) & 3;
    return (low | high << 4) - 32;
}

// The 6-bit scale and min of sub-block j (of 8) in Q4_K's and Q5_K's 12 scale bytes (ggml's
// get_scale_min_k4): for j < 4 the low six bits of bytes j and j + 4; for j >= 4 the nibbles of
// byte j + 4 with the top two bits of bytes j - 4 and j.
inline void k4_scale_min(const uint8_t* scales, int j, int* scale, int* min) {
    if (j < 4) {
        *scale = scales[j] & 63;
        *min = scales[j + 4] & 63;
    } else {
        *scale = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4;
        *min = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
    }
}

// The nibble of value i (of 256) in Q4_K's and Q5_K's 128 bytes: sub-block j = i / 32 uses the low
// nibbles (j even) or high nibbles (j odd) of bytes 32 * (j / 2) ..+32.
inline int k4_nibble(const uint8_t* qs, int i) {
    const int j = i / 32;
    return qs[j / 2 * 32 + i % 32] >> (4 * (j % 2)) & 15;
}

// Q6_K's unsigned 6-bit code of value i (of 256; the value is code - 32): per half of 128 values,
// value f takes the nibble of ql byte f % 64 (low for f < 64) and the bits 2 * (f / 32) of qh byte
// f % 32 as its top two bits.
inline int q6_k_code(const uint8_t* ql, const uint8_t* qh, int i) {
    const int half = i / 128, f = i % 128;
    const int low = ql[64 * half + f % 64] >> (4 * (f / 64)) & 15;
    const int high = qh[32 * half + f % 32] >> (2 * (f / 32)) & 3;
    return low | high << 4;
}

// IQ4_XS's scale of sub-block j (of 8): a 6-bit code, its low nibble in scales_l byte j / 2 (low
// nibble for even j) and its top two bits at bits 2j of the little-endian u16 scales_h, less 32.
inline int iq4_xs_scale(const uint8_t* block, int j) {
    const int low = block[IQ4_XS::scales_l + j / 2] >> (4 * (j % 2)) & 15;
    const int high = u16_at(block + IQ4_XS::scales_h) >> (2 * j) & 3;
    return (low | high << 4) - 32;
}

// IQ4_XS's code of value i (of 256): sub-block j = i / 32 holds 16 bytes of nibbles laid out as
// Q4_0's.
inline int iq4_xs_code(const uint8_t* block, int i) { return nibble_code(block + IQ4_XS::qs + 16 * (i / 32), i % 32); }

// Q6_K's int8 scale of sub-block s (of 16).
inline int q6_k_scale(const uint8_t* scales, int s) { return int8_t(scales[s]); }

}  // namespace qjit::gguf_blocks
