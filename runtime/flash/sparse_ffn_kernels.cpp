#include "runtime/flash/sparse_ffn_kernels.hpp"

#include <algorithm>
#include <cstring>

#include "base/simd_clones.hpp"

// Inlined into each clone, so compiled at the clone's width.
#define QJIT_FLASH_INLINE inline __attribute__((always_inline))

namespace qjit {

namespace {

using Data = NeuronCache::Data;
constexpr int kPanel = Data::kPanel;

// The code of row r of a 32-row block whose words lie at w[word * stride + c]: the bit planes of
// format/code_planes.hpp, written out so that r (unrolled) makes every word and shift a constant.
template <int B>
QJIT_FLASH_INLINE int32_t block_code(const uint32_t* w, int r, int stride, int c) {
    if constexpr (B == 3) {
        const int rw = r % 16;
        const uint32_t low = (w[(r / 16) * stride + c] >> (8 * (rw % 4) + 2 * (rw / 4))) & 3u;
        const uint32_t high = (w[2 * stride + c] >> (8 * (r % 4) + r / 4)) & 1u;
        return int32_t(low | high << 2);
    } else {
        constexpr int kRowsPerWord = 32 / B;
        const int rw = r % kRowsPerWord;
        return int32_t((w[(r / kRowsPerWord) * stride + c] >> (8 * (rw % 4) + B * (rw / 4))) & ((1u << B) - 1u));
    }
}

// Folds one group's sums into the panel's products: s * (dot - z * xsum), or s * dot + m * xsum
// with float offsets.
template <int ROWS>
void fold_group(const Data& d, const uint8_t* scales, const uint8_t* zeros, int64_t g, const float* x_sums,
                float (&acc)[ROWS][kPanel], float (&total)[ROWS][kPanel]) {
    if (g >= d.groups) return;  // the padding rows of a last block of 16-row groups
    const WeightFormat& f = d.header.vector.format;
    float s[kPanel], z[kPanel];
    for (int c = 0; c < kPanel; ++c) {
        const int64_t at = g * kPanel + c;
        s[c] = d.meta_float(scales + at * d.scale_bytes);
        z[c] = f.float_offsets ? d.meta_float(zeros + at * d.zero_bytes)
               : f.symmetric   ? float(1 << (d.bits - 1))
                               : float(zeros[at]);
    }
    for (int r = 0; r < ROWS; ++r) {
        const float xs = x_sums[r * d.groups + g];
        for (int c = 0; c < kPanel; ++c) {
            total[r][c] += f.float_offsets ? s[c] * acc[r][c] + z[c] * xs : s[c] * (acc[r][c] - z[c] * xs);
            acc[r][c] = 0.0f;
        }
    }
}

// HALF: groups of 16 rows, two to a block; otherwise a block lies in one group.
template <int B, int ROWS, bool HALF>
QJIT_FLASH_INLINE void panel_kernel(const Data& d, NeuronPart part, int64_t panel, const float* x, const float* x_sums,
                                    float* out) {
    const uint32_t* codes = d.panel_codes(part, panel);
    const uint8_t* scales = d.panel_scales(part, panel);
    const uint8_t* zeros = d.panel_zeros(part, panel);
    const int64_t x_stride = d.blocks * 32;
    float acc[ROWS][kPanel] = {}, total[ROWS][kPanel] = {};
    for (int64_t b = 0; b < d.blocks; ++b) {
        const uint32_t* w = codes + b * B * kPanel;
        const float* xb = x + b * 32;
#pragma GCC unroll 32
        for (int r = 0; r < 32; ++r) {
            float q[kPanel];
            for (int c = 0; c < kPanel; ++c) q[c] = float(block_code<B>(w, r, kPanel, c));
            for (int i = 0; i < ROWS; ++i) {
                const float xv = xb[i * x_stride + r];
                for (int c = 0; c < kPanel; ++c) acc[i][c] += xv * q[c];
            }
            if (HALF && r == 15) fold_group<ROWS>(d, scales, zeros, 2 * b, x_sums, acc, total);
        }
        if (HALF) fold_group<ROWS>(d, scales, zeros, 2 * b + 1, x_sums, acc, total);
        else if ((b + 1) * 32 % d.group_size == 0 || b + 1 == d.blocks)
            fold_group<ROWS>(d, scales, zeros, b * 32 / d.group_size, x_sums, acc, total);
    }
    for (int i = 0; i < ROWS; ++i)
        for (int c = 0; c < kPanel; ++c) out[i * kPanel + c] = total[i][c];
}

template <int B>
QJIT_FLASH_INLINE void panel_rows(const Data& d, NeuronPart part, int64_t panel, const float* x, const float* x_sums,
                                  int rows, float* out) {
    const bool half = d.group_size == 16;
    switch (rows * 2 + half) {
    case 2: panel_kernel<B, 1, false>(d, part, panel, x, x_sums, out); break;
    case 3: panel_kernel<B, 1, true>(d, part, panel, x, x_sums, out); break;
    case 4: panel_kernel<B, 2, false>(d, part, panel, x, x_sums, out); break;
    case 5: panel_kernel<B, 2, true>(d, part, panel, x, x_sums, out); break;
    case 6: panel_kernel<B, 3, false>(d, part, panel, x, x_sums, out); break;
    case 7: panel_kernel<B, 3, true>(d, part, panel, x, x_sums, out); break;
    case 8: panel_kernel<B, 4, false>(d, part, panel, x, x_sums, out); break;
    default: panel_kernel<B, 4, true>(d, part, panel, x, x_sums, out); break;
    }
}

template <int B, bool HALF>
QJIT_FLASH_INLINE void down_kernel(const Data& d, const int32_t* slots, int64_t count, const float* a, int64_t m,
                                   int64_t b0, int64_t b1, float* y) {
    const WeightFormat& f = d.header.vector.format;
    const int64_t scales_offset = d.header.vector.scales_offset(), zeros_offset = d.header.vector.zeros_offset();
    constexpr int kSegments = HALF ? 2 : 1, kSegmentRows = 32 / kSegments;
    for (int64_t i = 0; i < count; ++i) {
        bool any = false;  // Relu leaves many neurons at exactly 0
        for (int64_t r = 0; r < m; ++r) any |= a[r * count + i] != 0.0f;
        if (!any) continue;
        const uint8_t* v = d.down_vector(slots[i]);
        for (int64_t b = b0; b < b1; ++b) {
            uint32_t w[B];
            std::memcpy(w, v + b * B * 4, sizeof w);
            float q[32];
#pragma GCC unroll 32
            for (int r = 0; r < 32; ++r) q[r] = float(block_code<B>(w, r, 1, 0));
            const int64_t base = b * 32, rows = std::min<int64_t>(32, d.d_model - base);
            for (int h = 0; h < kSegments; ++h) {
                const int64_t j0 = h * kSegmentRows, j1 = std::min<int64_t>(j0 + kSegmentRows, rows);
                if (j0 >= j1) break;
                const int64_t g = HALF ? 2 * b + h : base / d.group_size;
                const float s = d.meta_float(v + scales_offset + g * d.scale_bytes);
                const float z = f.float_offsets ? d.meta_float(v + zeros_offset + g * d.zero_bytes)
                                : f.symmetric   ? float(1 << (B - 1))
                                                : float(v[zeros_offset + g]);
                for (int64_t r = 0; r < m; ++r) {
                    const float ar = a[r * count + i];
                    const float scale = ar * s, offset = f.float_offsets ? ar * z : -scale * z;
                    float* yr = y + r * d.d_model + base;
                    if (j1 - j0 == kSegmentRows) {
                        for (int j = 0; j < kSegmentRows; ++j) yr[j0 + j] += scale * q[j0 + j] + offset;
                    } else {
                        for (int64_t j = j0; j < j1; ++j) yr[j] += scale * q[j] + offset;
                    }
                }
            }
        }
    }
}

// fp16 bits to fp32 without branches (so loops of it vectorize): exact for finite values,
// subnormals included.
QJIT_FLASH_INLINE float half_bits_to_float(uint32_t h) {
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

}  // namespace

QJIT_SIMD_CLONES void panel_products(const Data& d, NeuronPart part, int64_t panel, const float* x_padded,
                                     const float* x_sums, int64_t m, float* out) {
    const int64_t x_stride = d.blocks * 32;
    for (int64_t r0 = 0; r0 < m; r0 += 4) {
        const int rows = int(std::min<int64_t>(4, m - r0));
        const float* x = x_padded + r0 * x_stride;
        const float* sums = x_sums + r0 * d.groups;
        float* o = out + r0 * kPanel;
        switch (d.bits) {
        case 2: panel_rows<2>(d, part, panel, x, sums, rows, o); break;
        case 3: panel_rows<3>(d, part, panel, x, sums, rows, o); break;
        case 4: panel_rows<4>(d, part, panel, x, sums, rows, o); break;
        default: panel_rows<8>(d, part, panel, x, sums, rows, o); break;
        }
    }
}

QJIT_SIMD_CLONES void down_accumulate(const Data& d, const int32_t* slots, int64_t count, const float* a, int64_t m,
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

QJIT_SIMD_CLONES void f16_products(const uint16_t* row, const float* x, int64_t m, int64_t n, float* out) {
    for (int64_t r = 0; r < m; ++r) {
        const float* xr = x + r * n;
        float acc[8] = {};
        int64_t k = 0;
        for (; k + 8 <= n; k += 8)
            for (int c = 0; c < 8; ++c) acc[c] += xr[k + c] * half_bits_to_float(row[k + c]);
        float sum = 0.0f;
        for (; k < n; ++k) sum += xr[k] * half_bits_to_float(row[k]);
        for (int c = 0; c < 8; ++c) sum += acc[c];
        out[r] = sum;
    }
}

QJIT_SIMD_CLONES void f16_down_accumulate(const Data& d, const int32_t* slots, int64_t count, const float* a,
                                          int64_t m, int64_t k0, int64_t k1, float* y) {
    for (int64_t i = 0; i < count; ++i) {
        const uint16_t* row = d.f16_row(NeuronPart::Down, slots[i]);
        for (int64_t r = 0; r < m; ++r) {
            const float ar = a[r * count + i];
            if (ar == 0.0f) continue;
            float* yr = y + r * d.d_model;
            for (int64_t k = k0; k < k1; ++k) yr[k] += ar * half_bits_to_float(row[k]);
        }
    }
}

}  // namespace qjit
