#include "runtime/cpu/activation_prologue.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/float_vectors.hpp"
#include "base/scratch.hpp"
#include "base/simd_family.hpp"
#include "runtime/layer_passes.hpp"

namespace qjit {

namespace {

// The lanes of a float or int vector of 4, 8 or 16 lanes folded pairwise with `op` (halves,
// quarters, ...) down to one: a few shuffles where a loop over the lanes extracts each. For max,
// or and integer sums, whose result does not depend on the order.
template <typename V, typename Op>
[[gnu::always_inline]] inline auto fold_lanes(V v, Op op) {
    constexpr int kCount = int(sizeof(V) / sizeof(v[0]));
    if constexpr (kCount == 16) {
        return fold_lanes(op(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7),
                             __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)),
                          op);
    } else if constexpr (kCount == 8) {
        return fold_lanes(op(__builtin_shufflevector(v, v, 0, 1, 2, 3), __builtin_shufflevector(v, v, 4, 5, 6, 7)), op);
    } else {
        static_assert(kCount == 4);
        const auto two = op(__builtin_shufflevector(v, v, 0, 1), __builtin_shufflevector(v, v, 2, 3));
        return op(two, __builtin_shufflevector(two, two, 1, 0))[0];
    }
}

// The low byte of each lane (the lane itself for values in [-128, 127]), stored at `out`: one byte
// shuffle (__builtin_convertvector to int8 went through the stack a lane at a time without AVX-512).
using Bytes16 = int8_t __attribute__((vector_size(16)));
using Bytes32 = int8_t __attribute__((vector_size(32)));
using Bytes64 = int8_t __attribute__((vector_size(64)));
template <typename Ints>
[[gnu::always_inline]] inline void store_low_bytes(int8_t* out, Ints v) {
    using Bytes = std::conditional_t<sizeof(Ints) == 64, Bytes64, std::conditional_t<sizeof(Ints) == 32, Bytes32, Bytes16>>;
    const Bytes bytes = __builtin_bit_cast(Bytes, v);
    if constexpr (sizeof(Ints) == 64) {
        const auto low = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60);
        std::memcpy(out, &low, sizeof low);
    } else if constexpr (sizeof(Ints) == 32) {
        const auto low = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, 16, 20, 24, 28);
        std::memcpy(out, &low, sizeof low);
    } else {
        const auto low = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12);
        std::memcpy(out, &low, sizeof low);
    }
}

// A group's largest magnitude, or NaN when it holds a NaN or an infinity (which have no int8 step).
// n is a multiple of V's lanes.
template <typename V>
[[gnu::always_inline]] inline float group_amax(const float* v, int64_t n) {
    using Ints = IntsOf<V>;
    V most = {}, non_finite = {};
    for (int64_t r = 0; r < n; r += kLanes<V>) {
        const V x = load_lanes<V>(v + r);
        const V magnitude = __builtin_bit_cast(V, __builtin_bit_cast(Ints, x) & 0x7fffffff);
        most = magnitude > most ? magnitude : most;
        non_finite += x - x;  // 0, or NaN for a NaN or an infinity
    }
    const float amax = fold_lanes(most, [](auto a, auto b) { return a > b ? a : b; });
    const float check = fold_lanes(non_finite, [](auto a, auto b) { return a + b; });
    return check == 0.0f ? amax : std::numeric_limits<float>::quiet_NaN();
}

// One activation row: gathered and padded into `row` (f32 path: the output row itself), then
// per group its sum and, on the int8 path, its int8 values and the step of its activation group
// (the group itself, or the super-block holding it: CpuKernelSpec::activation_group_rows), written
// for each group. Groups are 16 rows or a multiple of 32, so each is whole vectors of V (4, 8 or 16
// lanes). Every step is exact or elementwise (maxima, integer sums, one rounding per value), so the
// lanes do not change the result: each family writes the same values.
template <typename V>
[[gnu::always_inline]] inline void prepare_row_lanes(const jit::CpuKernelSpec& spec, const int32_t* row_order,
                                                     const float* src, float* row, int8_t* int8_row, float* row_scales,
                                                     float* row_sums) {
    using Ints = IntsOf<V>;
    const int64_t k = spec.format.k, padded_k = spec.padded_k(), gs = spec.group_rows();
    if (row_order)
        gather_row(row_order, k, src, row);
    else
        std::copy(src, src + k, row);
    std::fill(row + k, row + padded_k, 0.0f);
    if (!int8_row) {
        for (int64_t g = 0; g < spec.num_groups(); ++g) {
            const int64_t r0 = g * gs, r1 = std::min(padded_k, r0 + gs);
            float sum = 0.0f;
            for (int64_t r = r0; r < r1; ++r) sum += row[r];
            row_sums[g] = sum;
        }
        return;
    }
    const float qmax = float(spec.int8_activation_max());
    const int64_t span = spec.activation_group_rows();
    for (int64_t s0 = 0; s0 < padded_k; s0 += span) {
        const int64_t s1 = std::min(padded_k, s0 + span), g0 = s0 / gs, g1 = (s1 + gs - 1) / gs;
        const float amax = group_amax<V>(row + s0, s1 - s0);
        if (std::isnan(amax)) {
            // The step becomes NaN, so every output the groups feed is NaN (the kernels multiply
            // each integer dot product by its step, a zero dot included); their int8 values are zeros.
            std::fill(int8_row + s0, int8_row + s1, int8_t(0));
            std::fill(row_scales + g0, row_scales + g1, std::numeric_limits<float>::quiet_NaN());
            std::fill(row_sums + g0, row_sums + g1, 0.0f);
            continue;
        }
        // Round to nearest even for |v| < 2^22 without a libm call: adding 1.5 * 2^23 pushes the
        // fraction bits out of the mantissa.
        constexpr float kShift = 12582912.0f;
        const float inverse = amax > 0.0f ? qmax / amax : 0.0f;
        for (int64_t g = g0; g < g1; ++g) {
            const int64_t r0 = g * gs, r1 = std::min(s1, r0 + gs);
            Ints sum = {};
            for (int64_t r = r0; r < r1; r += kLanes<V>) {
                const Ints q = __builtin_convertvector((load_lanes<V>(row + r) * inverse + kShift) - kShift, Ints);
                store_low_bytes(int8_row + r, q);
                sum += q;
            }
            row_scales[g] = amax / qmax;
            row_sums[g] = float(fold_lanes(sum, [](auto a, auto b) { return a + b; }));
        }
    }
}

using PrepareRow = void (*)(const jit::CpuKernelSpec&, const int32_t*, const float*, float*, int8_t*, float*, float*);
void prepare_row_portable(const jit::CpuKernelSpec& spec, const int32_t* row_order, const float* src, float* row,
                          int8_t* int8_row, float* row_scales, float* row_sums) {
    prepare_row_lanes<Floats4>(spec, row_order, src, row, int8_row, row_scales, row_sums);
}
QJIT_TARGET_AVX2 void prepare_row_avx2(const jit::CpuKernelSpec& spec, const int32_t* row_order, const float* src,
                                       float* row, int8_t* int8_row, float* row_scales, float* row_sums) {
    prepare_row_lanes<Floats8>(spec, row_order, src, row, int8_row, row_scales, row_sums);
}
QJIT_TARGET_AVX512 void prepare_row_avx512(const jit::CpuKernelSpec& spec, const int32_t* row_order, const float* src,
                                           float* row, int8_t* int8_row, float* row_scales, float* row_sums) {
    prepare_row_lanes<Floats16>(spec, row_order, src, row, int8_row, row_scales, row_sums);
}
constexpr PerFamily<PrepareRow> kPrepareRow{prepare_row_portable, prepare_row_avx2, prepare_row_avx512};

// The family of the kernel the rows feed: the spec's ISA, under the context's cap.
void prepare_row(const jit::CpuKernelSpec& spec, const int32_t* row_order, const float* src, float* row,
                 int8_t* int8_row, float* row_scales, float* row_sums) {
    kPrepareRow[simd_family(spec.isa.level())](spec, row_order, src, row, int8_row, row_scales, row_sums);
}

}  // namespace

void prepare_activation_row(const jit::CpuKernelSpec& spec, const int32_t* row_order, const float* src,
                            const PreparedRow& out) {
    if (spec.path != jit::ActivationPath::Int8) {
        prepare_row(spec, row_order, src, static_cast<float*>(out.x), nullptr, out.scale, out.sum);
        return;
    }
    thread_local std::vector<float> gathered;  // the int8 path's fp32 staging row, per thread
    prepare_row(spec, row_order, src, grow(gathered, size_t(spec.padded_k())), static_cast<int8_t*>(out.x), out.scale,
                out.sum);
}

PreparedActivations prepare_activations(const jit::CpuKernelSpec& spec, const int32_t* row_order, const float* x,
                                        int64_t m, ThreadPool& pool) {
    // The caller's buffers; the tasks below may run on other threads, so they get addresses.
    thread_local std::vector<float> f32_rows, scales, sums;
    thread_local std::vector<int8_t> int8_rows;
    const int64_t k = spec.format.k, padded_k = spec.padded_k(), groups = spec.num_groups();
    const bool int8 = spec.path == jit::ActivationPath::Int8;
    float* const scale_out = grow(scales, size_t(m * groups));
    float* const sum_out = grow(sums, size_t(m * groups));
    float* const f32_out = int8 ? nullptr : grow(f32_rows, size_t(m * padded_k));
    int8_t* const int8_out = int8 ? grow(int8_rows, size_t(m * padded_k)) : nullptr;

    auto task = [&](int64_t i) {
        void* row = int8 ? static_cast<void*>(int8_out + i * padded_k) : static_cast<void*>(f32_out + i * padded_k);
        prepare_activation_row(spec, row_order, x + i * k, {row, scale_out + i * groups, sum_out + i * groups});
    };
    // Below this many activations a dispatch costs more than the work.
    constexpr int64_t kMinParallelElements = 1 << 14;
    pool.parallel_for(m, task, m * k >= kMinParallelElements);
    return {int8 ? static_cast<const void*>(int8_out) : static_cast<const void*>(f32_out), scale_out, sum_out, x};
}

}  // namespace qjit
