// The bodies of the sparse FFN's SIMD kernels (runtime/flash/sparse_ffn_kernels.hpp), compiled
// once per instruction set: each sparse_ffn_kernels_<isa>.cpp includes this file under its own
// compiler flags and defines its kernel table with QJIT_SPARSE_FFN_KERNEL_TABLE. Everything here
// has internal linkage, so the copies never meet at link time, and each file hands out its table. Each (width, rows, group) kernel is
// a function of its own rather than inlined into one dispatch: GCC's time on one huge function
// grows faster than its size.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/flash/sparse_ffn_kernels.hpp"

#pragma GCC diagnostic ignored "-Wpsabi"  // 32-byte vectors on baseline x86-64: internal functions only

#define QJIT_FLASH_OUTLINED __attribute__((noinline))

namespace qjit {
namespace {  // one copy per including file, each compiled for its own instruction set

using Data = NeuronCache::Data;

// GCC vector types: 8 lanes, split into halves on baseline x86-64 and one register with AVX2.
using v8u = uint32_t __attribute__((vector_size(32)));
using v8i = int32_t __attribute__((vector_size(32)));
using v8f = float __attribute__((vector_size(32)));

inline v8f load_f(const float* p) {
    v8f v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline v8f to_float(const v8u& code) {
    return __builtin_convertvector(reinterpret_cast<const v8i&>(code), v8f);
}

// fp16 bits to fp32 without branches (so loops of it vectorize): exact for finite values,
// subnormals included.
inline float half_bits_to_float(uint32_t h) {
    const uint32_t magnitude = (h & 0x7fffu) << 13, exponent = magnitude & 0x0f800000u;
    uint32_t bits = magnitude + (112u << 23);
    bits = exponent == 0x0f800000u ? bits + (112u << 23) : bits;  // inf, nan
    float value, subnormal, one;
    const uint32_t subnormal_bits = bits + (1u << 23), one_bits = 113u << 23;
    std::memcpy(&value, &bits, 4);
    std::memcpy(&subnormal, &subnormal_bits, 4);
    std::memcpy(&one, &one_bits, 4);
    value = exponent == 0 ? subnormal - one : value;
    uint32_t out;
    std::memcpy(&out, &value, 4);
    out |= (h & 0x8000u) << 16;
    std::memcpy(&value, &out, 4);
    return value;
}

// Shift of row j of a word in a plane of `width` bits (format/code_planes.hpp's plane_slot).
constexpr int plane_shift(int width, int j) { return 8 * (j % 4) + width * (j / 4); }

// Rows [8 * OCTET, 8 * OCTET + 8) of plane W's words, shifted to VALUE_SHIFT: each lane takes its
// row's word and shifts it by a constant, one variable shift for 8 rows.
template <int W, int VALUE_SHIFT, int OCTET>
inline v8u plane_octet(const uint32_t* words) {
    constexpr int kRows = 32 / W;  // rows per word
    constexpr int kFirst = OCTET * 8;
    constexpr auto shift_of = [](int l) { return uint32_t(plane_shift(W, (kFirst + l) % kRows)); };
    constexpr v8u shift = {shift_of(0), shift_of(1), shift_of(2), shift_of(3),
                           shift_of(4), shift_of(5), shift_of(6), shift_of(7)};
    v8u word = v8u{} + words[kFirst / kRows];
    if constexpr (kRows < 8) {  // 8-bit codes: four rows a word, two words an octet
        const uint32_t low = words[kFirst / kRows], high = words[kFirst / kRows + 1];
        word = v8u{low, low, low, low, high, high, high, high};
    }
    return ((word >> shift) & ((1u << W) - 1u)) << VALUE_SHIFT;
}

template <int B, int OCTET>
inline v8f decode_octet(const uint32_t* words) {
    v8u code;
    if constexpr (B == 3) code = plane_octet<2, 0, OCTET>(words) | plane_octet<1, 2, OCTET>(words + 2);
    else code = plane_octet<B, 0, OCTET>(words);
    return to_float(code);
}

// A block's 32 codes of a vector (its B words), as floats.
template <int B>
inline void decode_column_block(const uint8_t* bytes, v8f (&q)[4]) {
    uint32_t words[B];
    std::memcpy(words, bytes, sizeof words);
    q[0] = decode_octet<B, 0>(words);
    q[1] = decode_octet<B, 1>(words);
    q[2] = decode_octet<B, 2>(words);
    q[3] = decode_octet<B, 3>(words);
}

// half_bits_to_float on 8 lanes (GCC does not vectorize the scalar loop).
inline v8f half_octet_to_float(const uint8_t* at) {
    uint16_t h[8];
    std::memcpy(h, at, sizeof h);
    using v8h = uint16_t __attribute__((vector_size(16)));
    v8h packed;
    std::memcpy(&packed, h, sizeof packed);
    const v8u bits16 = __builtin_convertvector(packed, v8u);
    const v8u magnitude = (bits16 & 0x7fffu) << 13, exponent = magnitude & 0x0f800000u;
    v8u bits = magnitude + (112u << 23);
    bits = exponent == 0x0f800000u ? bits + (112u << 23) : bits;  // inf, nan
    const v8f unit = v8f{} + 1.0f / 16384.0f;  // 2^-14: subnormals come out offset by it
    const v8u subnormal_bits = bits + (1u << 23);
    // (vector casts reinterpret the bits)
    const v8f value = exponent == 0 ? (v8f)subnormal_bits - unit : (v8f)bits;
    return (v8f)((v8u)value | (bits16 & 0x8000u) << 16);
}

// n scales (or float offsets) at the scales' type.
inline void meta_values(const Data& d, const uint8_t* at, int64_t n, float* out) {
    if (d.scale_bytes == 4) {
        std::memcpy(out, at, size_t(n) * 4);
        return;
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8f v = half_octet_to_float(at + 2 * i);
        std::memcpy(out + i, &v, sizeof v);
    }
    for (; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, at + 2 * i, 2);
        out[i] = half_bits_to_float(h);
    }
}

constexpr int64_t kTermChunk = 64;  // groups whose terms a kernel converts at once

// The terms of groups [g0, g0 + n) of a quantized vector v (n <= kTermChunk): its weights are
// s * q + o, o = -s * z, or the float offset itself.
template <int B>
inline void group_terms(const Data& d, const uint8_t* v, int64_t g0, int64_t n, float* s, float* o) {
    const WeightFormat& f = d.header.vector.format;
    const uint8_t* zeros = v + d.zeros_offset + g0 * d.zero_bytes;
    meta_values(d, v + d.scales_offset + g0 * d.scale_bytes, n, s);
    if (f.float_offsets) meta_values(d, zeros, n, o);
    else if (f.symmetric) for (int64_t i = 0; i < n; ++i) o[i] = -s[i] * float(1 << (B - 1));
    else for (int64_t i = 0; i < n; ++i) o[i] = -s[i] * float(zeros[i]);
}

// Folds one group's sums (octets [O0, O1) of each row's chains), scaled by s, into total.
template <int ROWS, int O0, int O1>
inline void fold_group(float s, v8f (&acc)[ROWS][4], v8f (&total)[ROWS]) {
    for (int r = 0; r < ROWS; ++r) {
        v8f dot = acc[r][O0];
        for (int o = O0 + 1; o < O1; ++o) dot += acc[r][o];
        for (int o = O0; o < O1; ++o) acc[r][o] = v8f{};
        total[r] += s * dot;
    }
}

// The products of ROWS rows of x with a quantized gate or up vector v: one chain per octet of a
// block, so that a single row keeps the FMA units busy; the groups' terms converted a chunk at a
// time, the offsets' share (o times a group's sum of x) summed apart. HALF: groups of 16 rows, two
// to a block; otherwise a block lies in one group.
template <int B, int ROWS, bool HALF>
QJIT_FLASH_OUTLINED void column_kernel(const Data& d, const uint8_t* v, const float* x, const float* x_sums,
                                     float* out) {
    const int64_t x_stride = d.blocks * 32, blocks = d.blocks, groups = d.groups, group_blocks = d.group_blocks;
    v8f acc[ROWS][4] = {}, total[ROWS] = {};
    float offset[ROWS] = {}, s[kTermChunk], o[kTermChunk];
    for (int64_t g0 = 0; g0 < groups; g0 += kTermChunk) {
        const int64_t n = std::min(kTermChunk, groups - g0);
        group_terms<B>(d, v, g0, n, s, o);
        for (int r = 0; r < ROWS; ++r) {
            const float* xs = x_sums + r * groups + g0;
            v8f sums{};  // 8 sums, not one chain of n
            int64_t i = 0;
            for (; i + 8 <= n; i += 8) sums += load_f(o + i) * load_f(xs + i);
            for (; i < n; ++i) offset[r] += o[i] * xs[i];
            for (int l = 0; l < 8; ++l) offset[r] += sums[l];
        }
        const int64_t first = HALF ? g0 / 2 : g0 * group_blocks;
        const int64_t end = std::min(blocks, HALF ? (g0 + n + 1) / 2 : (g0 + n) * group_blocks);
        int64_t group = 0, in_group = 0;  // of the chunk
        for (int64_t b = first; b < end; ++b) {
            v8f q[4];
            decode_column_block<B>(v + b * B * 4, q);
            for (int r = 0; r < ROWS; ++r)
                for (int k = 0; k < 4; ++k) acc[r][k] += load_f(x + r * x_stride + b * 32 + 8 * k) * q[k];
            if (HALF) {
                fold_group<ROWS, 0, 2>(s[group++], acc, total);
                // (past the last group: a last block's padding rows, all 0 as x is padded with 0)
                if (group < n) fold_group<ROWS, 2, 4>(s[group++], acc, total);
            } else if (++in_group == group_blocks || b + 1 == blocks) {
                fold_group<ROWS, 0, 4>(s[group++], acc, total);
                in_group = 0;
            }
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        float sum = offset[r];
        for (int l = 0; l < 8; ++l) sum += total[r][l];
        out[r] = sum;
    }
}

template <int B>
inline void column_rows(const Data& d, const uint8_t* v, const float* x, const float* x_sums, int rows,
                                   float* out) {
    const bool half = d.group_size == 16;
    switch (rows * 2 + half) {
    case 2: column_kernel<B, 1, false>(d, v, x, x_sums, out); break;
    case 3: column_kernel<B, 1, true>(d, v, x, x_sums, out); break;
    case 4: column_kernel<B, 2, false>(d, v, x, x_sums, out); break;
    case 5: column_kernel<B, 2, true>(d, v, x, x_sums, out); break;
    case 6: column_kernel<B, 3, false>(d, v, x, x_sums, out); break;
    case 7: column_kernel<B, 3, true>(d, v, x, x_sums, out); break;
    case 8: column_kernel<B, 4, false>(d, v, x, x_sums, out); break;
    default: column_kernel<B, 4, true>(d, v, x, x_sums, out); break;
    }
}

// Each weight is s * q + o: the s * q terms go into y as the rows are decoded, one FMA a weight;
// the o terms, the same over a group's rows, are summed per row of x and 16- or 32-row segment of
// y (a task's blocks) and added once at the end.
constexpr int64_t kDownPrefetch = 2;  // vectors ahead

template <int B, bool HALF>
QJIT_FLASH_OUTLINED void down_kernel(const Data& d, const int32_t* slots, int64_t count, const float* a, int64_t m,
                                   int64_t b0, int64_t b1, float* y) {
    // Locals, so the stores to y need not reload them.
    const uint8_t* const vectors = d.vectors[int(NeuronPart::Down)].data();
    const int64_t vector_bytes = d.vector_bytes, d_model = d.d_model, group_blocks = d.group_blocks;
    constexpr int kSegments = HALF ? 2 : 1, kSegmentRows = 32 / kSegments;
    const int64_t segments = (b1 - b0) * kSegments;
    thread_local std::vector<float> offset_sums;  // [m][segments]; grows to its largest once a thread
    offset_sums.assign(size_t(m * segments), 0.0f);
    float* const offsets = offset_sums.data();
    for (int64_t i = 0; i < count; ++i) {
        if (i + kDownPrefetch < count)  // the task's run of a later vector
            prefetch_bytes(vectors + slots[i + kDownPrefetch] * vector_bytes + b0 * B * 4, (b1 - b0) * B * 4);
        const uint8_t* v = vectors + slots[i] * vector_bytes;
        int64_t next_group_block = b0;  // (16-row groups: each segment is a group)
        float s = 0.0f, o = 0.0f;
        for (int64_t b = b0; b < b1; ++b) {
            v8f octets[4];
            decode_column_block<B>(v + b * B * 4, octets);
            const int64_t base = b * 32, rows = std::min<int64_t>(32, d_model - base);
            for (int h = 0; h < kSegments; ++h) {
                const int64_t j0 = h * kSegmentRows, j1 = std::min<int64_t>(j0 + kSegmentRows, rows);
                if (j0 >= j1) break;
                if (HALF) {
                    group_terms<B>(d, v, 2 * b + h, 1, &s, &o);
                } else if (b == next_group_block) {  // once a group
                    const int64_t g = b / group_blocks;
                    next_group_block = (g + 1) * group_blocks;
                    group_terms<B>(d, v, g, 1, &s, &o);
                }
                for (int64_t r = 0; r < m; ++r) {
                    const float ar = a[r * count + i], scale = ar * s;
                    offsets[r * segments + (b - b0) * kSegments + h] += ar * o;
                    float* yr = y + r * d_model + base;
                    if (j1 - j0 == kSegmentRows) {
                        for (int k = int(j0 / 8); k < int(j0 / 8) + kSegmentRows / 8; ++k) {
                            v8f out;
                            std::memcpy(&out, yr + 8 * k, sizeof out);
                            out += scale * octets[k];
                            std::memcpy(yr + 8 * k, &out, sizeof out);
                        }
                    } else {
                        float q[32];
                        std::memcpy(q, octets, sizeof q);
                        for (int64_t j = j0; j < j1; ++j) yr[j] += scale * q[j];
                    }
                }
            }
        }
    }
    for (int64_t r = 0; r < m; ++r)
        for (int64_t t = 0; t < segments; ++t) {
            const float offset = offsets[r * segments + t];
            const int64_t k0 = b0 * 32 + t * kSegmentRows, k1 = std::min(d_model, k0 + kSegmentRows);
            for (int64_t k = k0; k < k1; ++k) y[r * d_model + k] += offset;
        }
}

inline void column_products_body(const Data& d, NeuronPart part, int64_t slot, const float* x_padded,
                                            const float* x_sums, int64_t m, float* out) {
    const uint8_t* v = d.vector(part, slot);
    const int64_t x_stride = d.blocks * 32;
    for (int64_t r0 = 0; r0 < m; r0 += 4) {
        const int rows = int(std::min<int64_t>(4, m - r0));
        const float* x = x_padded + r0 * x_stride;
        const float* sums = x_sums + r0 * d.groups;
        switch (d.bits) {
        case 2: column_rows<2>(d, v, x, sums, rows, out + r0); break;
        case 3: column_rows<3>(d, v, x, sums, rows, out + r0); break;
        case 4: column_rows<4>(d, v, x, sums, rows, out + r0); break;
        default: column_rows<8>(d, v, x, sums, rows, out + r0); break;
        }
    }
}

inline void down_accumulate_body(const Data& d, const int32_t* slots, int64_t count, const float* a, int64_t m,
                                      int64_t b0, int64_t b1, float* y) {
    const bool half = d.group_size == 16;
    switch (d.bits * 2 + half) {
    case 4: down_kernel<2, false>(d, slots, count, a, m, b0, b1, y); break;
    case 5: down_kernel<2, true>(d, slots, count, a, m, b0, b1, y); break;
    case 6: down_kernel<3, false>(d, slots, count, a, m, b0, b1, y); break;
    case 7: down_kernel<3, true>(d, slots, count, a, m, b0, b1, y); break;
    case 8: down_kernel<4, false>(d, slots, count, a, m, b0, b1, y); break;
    case 9: down_kernel<4, true>(d, slots, count, a, m, b0, b1, y); break;
    case 16: down_kernel<8, false>(d, slots, count, a, m, b0, b1, y); break;
    default: down_kernel<8, true>(d, slots, count, a, m, b0, b1, y); break;
    }
}

// Whether 8-lane vectors are one register here: converting fp16 with them pays only then (on the
// baseline the scalar conversion, which GCC vectorizes its own way, runs twice as fast).
#ifdef __AVX2__
constexpr bool kOneRegisterVectors = true;
#else
constexpr bool kOneRegisterVectors = false;
#endif

// fp16 vectors: 32 values converted at a time (four chains of 8), then one FMA each per row of x.
inline void f16_products_body(const uint16_t* row, const float* x, int64_t m, int64_t n, float* out) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(row);
    const int64_t vector_end = kOneRegisterVectors ? n / 32 * 32 : 0;
    for (int64_t r0 = 0; r0 < m; r0 += 4) {
        const int rows = int(std::min<int64_t>(4, m - r0));
        v8f acc[4][4] = {};
        int64_t k = 0;
        for (; k < vector_end; k += 32) {
            v8f w[4];
            for (int c = 0; c < 4; ++c) w[c] = half_octet_to_float(bytes + 2 * (k + 8 * c));
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < 4; ++c) acc[r][c] += load_f(x + (r0 + r) * n + k + 8 * c) * w[c];
        }
        for (int r = 0; r < rows; ++r) {
            const float* xr = x + (r0 + r) * n;
            float sum = 0.0f;
            for (int64_t j = k; j < n; ++j) sum += xr[j] * half_bits_to_float(row[j]);
            const v8f total = acc[r][0] + acc[r][1] + acc[r][2] + acc[r][3];
            for (int l = 0; l < 8; ++l) sum += total[l];
            out[r0 + r] = sum;
        }
    }
}

inline void f16_down_accumulate_body(const Data& d, const int32_t* slots, int64_t count, const float* a,
                                          int64_t m, int64_t k0, int64_t k1, float* y) {
    for (int64_t i = 0; i < count; ++i) {
        const uint16_t* row = d.f16_row(NeuronPart::Down, slots[i]);
        const auto* bytes = reinterpret_cast<const uint8_t*>(row);
        for (int64_t r = 0; r < m; ++r) {
            const float ar = a[r * count + i];
            if (ar == 0.0f) continue;
            float* yr = y + r * d.d_model;
            int64_t k = k0;
            for (; kOneRegisterVectors && k + 8 <= k1; k += 8) {  // 8 values converted at a time
                v8f out = load_f(yr + k);
                out += ar * half_octet_to_float(bytes + 2 * k);
                std::memcpy(yr + k, &out, sizeof out);
            }
            for (; k < k1; ++k) yr[k] += ar * half_bits_to_float(row[k]);
        }
    }
}

}  // namespace
}  // namespace qjit

// Defines qjit::FUNCTION(), the table of this file's kernels.
#define QJIT_SPARSE_FFN_KERNEL_TABLE(FUNCTION)                                                          \
    const qjit::SparseFfnKernelTable& qjit::FUNCTION() {                                                \
        static constexpr SparseFfnKernelTable table{column_products_body, down_accumulate_body,         \
                                                    f16_products_body, f16_down_accumulate_body};       \
        return table;                                                                                    \
    }
