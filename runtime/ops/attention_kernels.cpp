#include "runtime/ops/attention_kernels.hpp"

#include <type_traits>

#include "base/error.hpp"
#include "base/float_vectors.hpp"
#include "base/half.hpp"
#include "base/simd_family.hpp"

namespace qjit::ops {

namespace {

// The kernel body, written once over the vector type V (kLanes<V> floats) and always inlined into
// the per-family entry points below, whose target attributes decide the instructions: a * b + c
// is one FMA where the family has it (this file compiles with -ffp-contract=fast). Every row's
// arithmetic is its own and the same whatever the other rows are, so a query's result depends on
// the query and the cache alone (not on the rows beside it, the prompt length or the threads).
//
// R: queries; B: score vectors per row of a position block (the block is B * kLanes<V> positions);
// J: value vectors per row in the weighted sum. R * B and R * J accumulators stay in registers.
// Element: the cache's, float, uint16_t (binary16, converted exactly as it is loaded) or int8_t
// (codes, converted exactly; a block's scores and value weights times its positions' steps).
template <typename V, int R, int B, int J, bool kFma, typename Element>
struct Attend {
    static constexpr bool kCodes = std::is_same_v<Element, int8_t>;

    // a * b + c for the scalar steps, fused exactly where the family has FMA: left to the compiler,
    // contraction differs between the row counts' kernels (clang fused the tail in some, not all).
    [[gnu::always_inline]] static float multiply_add(float a, float b, float c) {
        if constexpr (kFma) return __builtin_fmaf(a, b, c);
        else return a * b + c;
    }

    static constexpr int kLanesV = kLanes<V>;

    [[gnu::always_inline]] static V load(const Element* p) {
        if constexpr (std::is_same_v<Element, float>) {
            return load_lanes<V>(p);
        } else if constexpr (kLanesV == 4) {  // the portable family
            if constexpr (kCodes) return load_bytes<V>(p);
            else return load_halves<V>(p);
        } else {
            float lanes[kLanesV];
            if constexpr (kCodes) family_load_bytes(p, lanes);
            else family_load_halves(p, lanes);
            return load_lanes<V>(lanes);
        }
    }
    // The last features of a value row past the whole vectors: one at a time.
    [[gnu::always_inline]] static float element(const Element* p) {
        if constexpr (std::is_same_v<Element, float>) return *p;
        else if constexpr (kCodes) return float(*p);
        else return half_to_float(*p);
    }
    // A head's block at `at`: its elements, then with codes its positions' steps.
    [[gnu::always_inline]] static const Element* elements(const char* at) { return reinterpret_cast<const Element*>(at); }
    // With codes, the steps of the position block from `within` of the head's block at `at`, one
    // vector per score vector; nothing otherwise.
    [[gnu::always_inline]] static void load_steps(const char* at, int head_size, int within, V (&steps)[B]) {
        if constexpr (kCodes) {
            const float* first = reinterpret_cast<const float*>(at + size_t(head_size) * kKeyBlock) + within;
#pragma GCC unroll 4
            for (int b = 0; b < B; ++b) steps[b] = load_lanes<V>(first + kLanesV * b);
        }
    }
    // x times a position's step with codes; x itself otherwise.
    [[gnu::always_inline]] static V times_step(V x, V step) {
        if constexpr (kCodes) return x * step;
        else return x;
    }
    static constexpr int kBlock = B * kLanesV;
    static_assert(kKeyBlock % kBlock == 0, "a position block lies within one cache block");

    // acc[r][j .. j + J * lanes) += sum over the block's `valid` positions s of p[r][s] * values[s][j ..].
    // (With codes p holds the weights times the values' steps.)
    template <int Vectors>
    [[gnu::always_inline]] static void add_weighted_values(float (*acc)[kMaxHeadSize], const float (*p)[kBlock],
                                                           const Element* values, size_t value_row, int valid, int j) {
        V sum[R][Vectors];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
            for (int v = 0; v < Vectors; ++v) sum[r][v] = load_lanes<V>(acc[r] + j + kLanesV * v);
        for (int s = 0; s < valid; ++s) {
            const Element* row = values + size_t(s) * value_row + size_t(j);
            V value[Vectors];
#pragma GCC unroll 4
            for (int v = 0; v < Vectors; ++v) value[v] = load(row + kLanesV * v);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const V weight = splat<V>(p[r][s]);
#pragma GCC unroll 4
                for (int v = 0; v < Vectors; ++v) sum[r][v] += weight * value[v];
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
            for (int v = 0; v < Vectors; ++v) store_lanes(acc[r] + j + kLanesV * v, sum[r][v]);
    }

    // The online softmax of one position block for every row: masks the scores to each row's
    // positions, takes the block's maximum, rescales the row's sums to it, and leaves the weights
    // in p. It goes in phases across the rows (maxima, then one exponential of all rows' rescales,
    // then the scores' exponentials, then the sums), so that the rows' chains of lane reductions
    // and exponentials overlap instead of running one after another; each row's arithmetic is
    // what it would be alone. The rescales' exponential runs on every block, not behind a branch:
    // with a branch, GCC fused the sum's update into an FMA in some row counts' kernels and not in
    // others, and a query's result would depend on the rows beside it.
    [[gnu::always_inline]] static void softmax_block(V (&score)[R][B], const V (&key_steps)[B], const V (&value_steps)[B],
                                                     V lane_offsets, int s0, const int (&pos)[R], const int (&first)[R],
                                                     float (&running_max)[R], float (&running_sum)[R],
                                                     float (*p)[kBlock], float (*acc)[kMaxHeadSize], int head_size) {
        static_assert(R <= kLanesV, "one lane per row holds the rescales");
        const V minus_infinity = splat<V>(-__builtin_inff());
        float new_max[R];
        bool outside[R];  // the block lies wholly outside the row's positions
        V rescale_exponents = {};
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const V row_pos = splat<V>(float(pos[r])), row_first = splat<V>(float(first[r]));
            V most = minus_infinity;
#pragma GCC unroll 4
            for (int b = 0; b < B; ++b) {
                const V at = lane_offsets + float(s0 + kLanesV * b);
                score[r][b] = (at <= row_pos) & (at >= row_first) ? times_step(score[r][b], key_steps[b]) : minus_infinity;
                most = lane_max(most, score[r][b]);
            }
            const float block_max = max_of_lanes(most);
            // Such a block (before the row's window, or after its last position among longer
            // rows) adds nothing, and a row with no position yet must not subtract an infinite
            // maximum from itself.
            outside[r] = block_max == -__builtin_inff();
            new_max[r] = outside[r] || running_max[r] > block_max ? running_max[r] : block_max;
            // -inf on the row's first block (a factor of 0), exactly 0 (a factor of 1) while the
            // maximum holds.
            rescale_exponents[r] = outside[r] ? 0.0f : running_max[r] - new_max[r];
        }
        const V rescales = exp_lanes(rescale_exponents);
        V sums[R] = {};
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            if (outside[r]) continue;
#pragma GCC unroll 4
            for (int b = 0; b < B; ++b) {
                const V e = exp_lanes(score[r][b] - new_max[r]);
                store_lanes(p[r] + kLanesV * b, times_step(e, value_steps[b]));  // the sum takes e
                sums[r] += e;
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            if (outside[r]) {
                for (int s = 0; s < kBlock; ++s) p[r][s] = 0.0f;
                continue;
            }
            const float rescale = rescales[r];
            running_sum[r] = multiply_add(running_sum[r], rescale, sum_of_lanes(sums[r]));
            running_max[r] = new_max[r];
            if (rescale != 1.0f)
                for (int i = 0; i < head_size; ++i) acc[r][i] *= rescale;
        }
    }

    [[gnu::always_inline]] static void run(const AttentionTask& task) {
        const int head_size = task.head_size;
        const char* const keys = static_cast<const char*>(task.keys);
        const char* const values = static_cast<const char*>(task.values);
        alignas(64) float q[R][kMaxHeadSize];  // scaled
        alignas(64) float acc[R][kMaxHeadSize];
        alignas(64) float p[R][kBlock];
        float running_max[R], running_sum[R];
        int pos[R], first[R], last = 0, start = 0x7fffffff;  // first: a row's first visible position
        for (int r = 0; r < R; ++r) {
            const int from = r < task.count ? r : 0;  // missing rows repeat the first; never stored
            for (int i = 0; i < head_size; ++i) q[r][i] = task.q[from][i] * task.scale;
            for (int i = 0; i < head_size; ++i) acc[r][i] = 0.0f;
            pos[r] = task.pos[from];
            first[r] = task.window > 0 && pos[r] - task.window + 1 > 0 ? pos[r] - task.window + 1 : 0;
            last = pos[r] > last ? pos[r] : last;
            start = first[r] < start ? first[r] : start;
            running_max[r] = -__builtin_inff();
            running_sum[r] = 0.0f;
        }
        V lane_offsets;
        for (int i = 0; i < kLanesV; ++i) lane_offsets[i] = float(i);

        for (int s0 = start / kBlock * kBlock; s0 <= last; s0 += kBlock) {
            const size_t block = size_t(s0 / kKeyBlock) * task.block_bytes;
            const int within = s0 % kKeyBlock;  // the position block's first position in its cache block
            V score[R][B] = {};
            for (int i = 0; i < head_size; ++i) {
                const Element* key = elements(keys + block) + size_t(i) * kKeyBlock + size_t(within);
                V k[B];
#pragma GCC unroll 4
                for (int b = 0; b < B; ++b) k[b] = load(key + kLanesV * b);
#pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    const V qi = splat<V>(q[r][i]);
#pragma GCC unroll 4
                    for (int b = 0; b < B; ++b) score[r][b] += qi * k[b];
                }
            }
            V key_steps[B] = {}, value_steps[B] = {};
            load_steps(keys + block, head_size, within, key_steps);
            load_steps(values + block, head_size, within, value_steps);
            softmax_block(score, key_steps, value_steps, lane_offsets, s0, pos, first, running_max, running_sum, p,
                          acc, head_size);
            const int valid = last - s0 + 1 < kBlock ? last - s0 + 1 : kBlock;
            const size_t value_row = size_t(head_size);
            const Element* block_values = elements(values + block) + size_t(within) * value_row;
            int j = 0;
            for (; j + J * kLanesV <= head_size; j += J * kLanesV)
                add_weighted_values<J>(acc, p, block_values, value_row, valid, j);
            for (; j + kLanesV <= head_size; j += kLanesV)
                add_weighted_values<1>(acc, p, block_values, value_row, valid, j);
            // The last head_size % lanes features, position by position as the vectors go.
            for (int s = 0; s < valid && j < head_size; ++s) {
                const Element* row = block_values + size_t(s) * value_row;
                for (int r = 0; r < R; ++r)
                    for (int i = j; i < head_size; ++i) acc[r][i] = multiply_add(p[r][s], element(row + i), acc[r][i]);
            }
        }
        for (int r = 0; r < task.count; ++r) {
            const float inverse = 1.0f / running_sum[r];
            for (int i = 0; i < head_size; ++i) task.out[r][i] = acc[r][i] * inverse;
        }
    }
};

// One entry point per family, element type and row count. The blocks and value widths fill each
// family's registers: 16 xmm (SSE2) and 16 ymm (AVX2) hold 4 x 2 accumulators beside their
// operands, 32 zmm (AVX-512) hold 4 x 4 in the weighted sum, or 8 x 2 with eight rows.
template <int R, typename Element>
void attend_portable(const AttentionTask& task) {
    Attend<Floats4, R, 2, 2, false, Element>::run(task);
}
template <int R, typename Element>
QJIT_TARGET_AVX2 void attend_avx2(const AttentionTask& task) {
    Attend<Floats8, R, 2, 2, true, Element>::run(task);
}
template <int R, typename Element>
QJIT_TARGET_AVX512 void attend_avx512(const AttentionTask& task) {
    Attend<Floats16, R, 2, (R > 4 ? 2 : 4), true, Element>::run(task);
}

template <int R, typename Element>
constexpr PerFamily<AttentionKernel> kAttend{attend_portable<R, Element>, attend_avx2<R, Element>,
                                             attend_avx512<R, Element>};

// Rows 1 to 4 in every family; 8 (tasks of 5 to 8 rows) in AVX-512 only.
template <typename Element>
constexpr PerFamily<AttentionKernel> kByRows[5] = {kAttend<1, Element>, kAttend<2, Element>, kAttend<3, Element>,
                                                   kAttend<4, Element>, {nullptr, nullptr, attend_avx512<8, Element>}};

}  // namespace

int max_attention_rows(SimdFamily family) { return family == SimdFamily::Avx512 ? 8 : 4; }

AttentionKernel attention_kernel(SimdFamily family, qjit_kv_type type, int rows) {
    require(rows >= 1 && rows <= max_attention_rows(family), "attention kernel: ", rows, " rows; the ",
            simd_family_name(family), " family takes 1 to ", max_attention_rows(family));
    const int slot = rows <= 4 ? rows - 1 : 4;
    switch (type) {
        case QJIT_KV_F16: return kByRows<uint16_t>[slot][family];
        case QJIT_KV_INT8: return kByRows<int8_t>[slot][family];
        default: return kByRows<float>[slot][family];
    }
}

}  // namespace qjit::ops
