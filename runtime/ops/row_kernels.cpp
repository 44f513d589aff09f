#include "runtime/ops/row_kernels.hpp"

#include <cmath>

#include "base/float_vectors.hpp"

namespace qjit::ops {

namespace {

// Four vector accumulators for the sum of squares (a fixed order per family), then the scaled
// product; the last size % lanes values one by one.
template <typename V>
[[gnu::always_inline]] inline void rms_norm_lanes(const float* x, const float* weight, int64_t size, float eps,
                                                  float* out) {
    constexpr int kWidth = kLanes<V>;
    V sums[4] = {};
    int64_t i = 0;
    for (; i + 4 * kWidth <= size; i += 4 * kWidth)
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
            const V v = load_lanes<V>(x + i + u * kWidth);
            sums[u] += v * v;
        }
    for (; i + kWidth <= size; i += kWidth) {
        const V v = load_lanes<V>(x + i);
        sums[0] += v * v;
    }
    float squares = sum_of_lanes((sums[0] + sums[1]) + (sums[2] + sums[3]));
    for (; i < size; ++i) squares += x[i] * x[i];
    const float inverse_rms = 1.0f / std::sqrt(squares / float(size) + eps);
    const V scale = splat<V>(inverse_rms);
    i = 0;
    for (; i + kWidth <= size; i += kWidth)
        store_lanes(out + i, load_lanes<V>(weight + i) * (scale * load_lanes<V>(x + i)));
    for (; i < size; ++i) out[i] = weight[i] * (inverse_rms * x[i]);
}

// Plain loops the family's vectoriser takes: halves pair contiguous runs; adjacent pairs
// interleave, which it handles with permutes.
[[gnu::always_inline]] inline void rope_loops(float* x, int64_t row_size, int head_size, const float* rotations,
                                              qjit_rope_pairs pairs) {
    const int half = head_size / 2;
    for (int64_t head = 0; head + head_size <= row_size; head += head_size) {
        float* h = x + head;
        if (pairs == QJIT_ROPE_HALVES) {
            for (int i = 0; i < half; ++i) {
                const float v0 = h[i], v1 = h[i + half], c = rotations[2 * i], s = rotations[2 * i + 1];
                h[i] = v0 * c - v1 * s;
                h[i + half] = v0 * s + v1 * c;
            }
        } else {
            for (int i = 0; i < half; ++i) {
                const float v0 = h[2 * i], v1 = h[2 * i + 1], c = rotations[2 * i], s = rotations[2 * i + 1];
                h[2 * i] = v0 * c - v1 * s;
                h[2 * i + 1] = v0 * s + v1 * c;
            }
        }
    }
}

// Each lane keeps its largest value so far and where it was (a strictly larger value moves it, so
// a lane keeps its first), and whether it met a NaN; the lanes are then merged, the lower index
// winning a tie, and the last count % lanes values looked at one by one.
template <typename V>
[[gnu::always_inline]] inline RangeMaximum argmax_lanes(const float* x, int64_t count) {
    using Ints = IntsOf<V>;
    constexpr int kWidth = kLanes<V>;
    RangeMaximum best{-__builtin_inff(), -1, false};
    int64_t i = 0;
    if (count >= kWidth) {
        Ints lane{};
        for (int l = 0; l < kWidth; ++l) lane[l] = l;
        V most = splat<V>(-__builtin_inff());
        Ints at = lane - lane - 1, nan = lane - lane;
        for (; i + kWidth <= count; i += kWidth, lane += kWidth) {
            const V v = load_lanes<V>(x + i);
            const Ints larger = v > most;
            most = larger ? v : most;
            at = larger ? lane : at;
            nan |= v != v;
        }
        for (int l = 0; l < kWidth; ++l) {
            best.has_nan |= nan[l] != 0;
            if (at[l] < 0) continue;
            if (most[l] > best.value || (most[l] == best.value && at[l] < best.index)) best = {most[l], at[l], best.has_nan};
        }
    }
    for (; i < count; ++i) {
        best.has_nan |= x[i] != x[i];
        if (x[i] > best.value) best = {x[i], i, best.has_nan};
    }
    return best;
}

void rms_norm_portable(const float* x, const float* weight, int64_t size, float eps, float* out) {
    rms_norm_lanes<Floats4>(x, weight, size, eps, out);
}
QJIT_TARGET_AVX2 void rms_norm_avx2(const float* x, const float* weight, int64_t size, float eps, float* out) {
    rms_norm_lanes<Floats8>(x, weight, size, eps, out);
}
QJIT_TARGET_AVX512 void rms_norm_avx512(const float* x, const float* weight, int64_t size, float eps, float* out) {
    rms_norm_lanes<Floats16>(x, weight, size, eps, out);
}

void rope_portable(float* x, int64_t row_size, int head_size, const float* rotations, qjit_rope_pairs pairs) {
    rope_loops(x, row_size, head_size, rotations, pairs);
}
QJIT_TARGET_AVX2 void rope_avx2(float* x, int64_t row_size, int head_size, const float* rotations,
                                qjit_rope_pairs pairs) {
    rope_loops(x, row_size, head_size, rotations, pairs);
}
QJIT_TARGET_AVX512 void rope_avx512(float* x, int64_t row_size, int head_size, const float* rotations,
                                    qjit_rope_pairs pairs) {
    rope_loops(x, row_size, head_size, rotations, pairs);
}

RangeMaximum argmax_portable(const float* x, int64_t count) { return argmax_lanes<Floats4>(x, count); }
QJIT_TARGET_AVX2 RangeMaximum argmax_avx2(const float* x, int64_t count) { return argmax_lanes<Floats8>(x, count); }
QJIT_TARGET_AVX512 RangeMaximum argmax_avx512(const float* x, int64_t count) { return argmax_lanes<Floats16>(x, count); }

}  // namespace

const PerFamily<RmsNormRow> kRmsNormRow{rms_norm_portable, rms_norm_avx2, rms_norm_avx512};
const PerFamily<RopeRow> kRopeRow{rope_portable, rope_avx2, rope_avx512};
const PerFamily<ArgmaxRange> kArgmaxRange{argmax_portable, argmax_avx2, argmax_avx512};

}  // namespace qjit::ops
