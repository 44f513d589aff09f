#include "runtime/cpu/activation_prologue.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/float_vectors.hpp"
#include "base/scratch.hpp"
#include "base/simd_family.hpp"
#include "runtime/layer_passes.hpp"

namespace qjit {

namespace {

using Int8s16 = int8_t __attribute__((vector_size(16)));

// A group's largest magnitude, or NaN when it holds a NaN or an infinity (which have no int8 step).
// n is a multiple of 16.
[[gnu::always_inline]] inline float group_amax(const float* v, int64_t n) {
    Floats16 most = {};
    Ints16 bad = {};
    for (int64_t r = 0; r < n; r += 16) {
        const Floats16 x = load_lanes<Floats16>(v + r);
        const Floats16 magnitude = x < 0 ? -x : x;
        most = magnitude > most ? magnitude : most;
        bad |= (x - x) != 0;  // NaN for a NaN or an infinity
    }
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < 16; ++i) {
        amax = std::max(amax, most[i]);
        finite = finite && bad[i] == 0;
    }
    return finite ? amax : std::numeric_limits<float>::quiet_NaN();
}

// One activation row: gathered and padded into `row` (f32 path: the output row itself), then
// per group its sum and, on the int8 path, its step and int8 values. Groups are 16 rows or a
// multiple of 32, so each is whole vectors of 16. 16-lane vectors in every family (two registers
// with AVX2, four with SSE2): the result is the same in each.
[[gnu::always_inline]] inline void prepare_row_lanes(const jit::CpuKernelSpec& spec, const int32_t* row_order,
                                                     const float* src, float* row, int8_t* int8_row, float* row_scales,
                                                     float* row_sums) {
    const int64_t k = spec.format.k, padded_k = spec.padded_k(), gs = spec.group_rows();
    if (row_order)
        gather_row(row_order, k, src, row);
    else
        std::copy(src, src + k, row);
    std::fill(row + k, row + padded_k, 0.0f);
    const float qmax = float(spec.int8_activation_max());
    for (int64_t g = 0; g < spec.num_groups(); ++g) {
        const int64_t r0 = g * gs, r1 = std::min(padded_k, r0 + gs);
        if (!int8_row) {
            float sum = 0.0f;
            for (int64_t r = r0; r < r1; ++r) sum += row[r];
            row_sums[g] = sum;
            continue;
        }
        const float amax = group_amax(row + r0, r1 - r0);
        if (std::isnan(amax)) {
            // The group's step becomes NaN, so every output the group feeds is NaN (the kernels
            // multiply each group's integer dot product by its step, a zero dot included); its int8
            // values are zeros.
            std::fill(int8_row + r0, int8_row + r1, int8_t(0));
            row_scales[g] = std::numeric_limits<float>::quiet_NaN();
            row_sums[g] = 0.0f;
            continue;
        }
        // Round to nearest even for |v| < 2^22 without a libm call: adding 1.5 * 2^23 pushes the
        // fraction bits out of the mantissa.
        constexpr float kShift = 12582912.0f;
        const float inverse = amax > 0.0f ? qmax / amax : 0.0f;
        Ints16 sum = {};
        for (int64_t r = r0; r < r1; r += 16) {
            const Ints16 q = __builtin_convertvector((load_lanes<Floats16>(row + r) * inverse + kShift) - kShift, Ints16);
            const Int8s16 narrow = __builtin_convertvector(q, Int8s16);
            std::memcpy(int8_row + r, &narrow, sizeof narrow);
            sum += q;
        }
        int32_t total = 0;
        for (int i = 0; i < 16; ++i) total += sum[i];
        row_scales[g] = amax / qmax;
        row_sums[g] = float(total);
    }
}

using PrepareRow = void (*)(const jit::CpuKernelSpec&, const int32_t*, const float*, float*, int8_t*, float*, float*);
void prepare_row_portable(const jit::CpuKernelSpec& spec, const int32_t* row_order, const float* src, float* row,
                          int8_t* int8_row, float* row_scales, float* row_sums) {
    prepare_row_lanes(spec, row_order, src, row, int8_row, row_scales, row_sums);
}
QJIT_TARGET_AVX2 void prepare_row_avx2(const jit::CpuKernelSpec& spec, const int32_t* row_order, const float* src,
                                       float* row, int8_t* int8_row, float* row_scales, float* row_sums) {
    prepare_row_lanes(spec, row_order, src, row, int8_row, row_scales, row_sums);
}
QJIT_TARGET_AVX512 void prepare_row_avx512(const jit::CpuKernelSpec& spec, const int32_t* row_order, const float* src,
                                           float* row, int8_t* int8_row, float* row_scales, float* row_sums) {
    prepare_row_lanes(spec, row_order, src, row, int8_row, row_scales, row_sums);
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
