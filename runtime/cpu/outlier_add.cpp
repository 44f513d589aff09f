#include "runtime/cpu/outlier_add.hpp"

// GCC 12's AVX-512 intrinsics start from their own _mm512_undefined_*() values, which
// -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

namespace qjit {

namespace {

__attribute__((target("sse3"))) inline float sum_of(__m128 v) {
    const __m128 pair = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
}

// The columns' term for one row, 16 outliers per gather. A column with none runs the loop body
// once with an empty mask (adding 0), which costs less than a mispredicted branch.
__attribute__((target("avx512f"))) void one_row_avx512(const OutlierColumns& o, const float* x, int64_t first,
                                                        int64_t end, float* y) {
    for (int64_t c = first; c < end; ++c) {
        const int64_t stop = o.column_start[c + 1];
        __m512 sum = _mm512_setzero_ps();
        int64_t e = o.column_start[c];
        do {
            const int64_t left = stop - e;
            const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
            const __m512i rows = _mm512_maskz_loadu_epi32(mask, o.rows + e);
            const __m512 values = _mm512_maskz_loadu_ps(mask, o.values + e);
            const __m512 xs = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, rows, x, 4);
            sum = _mm512_fmadd_ps(xs, values, sum);
            e += 16;
        } while (e < stop);
        y[c] += _mm512_reduce_add_ps(sum);
    }
}

// The same, 8 outliers per gather.
__attribute__((target("avx2,fma"))) void one_row_avx2(const OutlierColumns& o, const float* x, int64_t first,
                                                       int64_t end, float* y) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t c = first; c < end; ++c) {
        const int64_t stop = o.column_start[c + 1];
        __m256 sum = _mm256_setzero_ps();
        int64_t e = o.column_start[c];
        do {
            const int left = int(std::min<int64_t>(stop - e, 8));
            const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane);
            const __m256i rows = _mm256_maskload_epi32(o.rows + e, mask);
            const __m256 values = _mm256_maskload_ps(o.values + e, mask);
            const __m256 xs =
                _mm256_mask_i32gather_ps(_mm256_setzero_ps(), x, rows, _mm256_castsi256_ps(mask), 4);
            sum = _mm256_fmadd_ps(xs, values, sum);
            e += 8;
        } while (e < stop);
        y[c] += sum_of(_mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1)));
    }
}

// Every row chunk's accumulators are kOutlierRowChunk wide whatever the chunk's height, so the
// compiler vectorizes the inner loop at the caller's width; rows past `rows` read padding.
__attribute__((always_inline)) inline void transposed_body(const OutlierColumns& o, const float* xt, int64_t stride,
                                                          int64_t rows, int64_t first, int64_t end, float* y,
                                                          int64_t ldy) {
    for (int64_t i0 = 0; i0 < rows; i0 += kOutlierRowChunk) {
        const int64_t height = std::min(kOutlierRowChunk, rows - i0);
        for (int64_t c = first; c < end; ++c) {
            float sum[kOutlierRowChunk] = {};
            for (int64_t e = o.column_start[c]; e < o.column_start[c + 1]; ++e) {
                const float* xr = xt + o.rows[e] * stride + i0;
                const float v = o.values[e];
                for (int64_t i = 0; i < kOutlierRowChunk; ++i) sum[i] += xr[i] * v;
            }
            for (int64_t i = 0; i < height; ++i) y[(i0 + i) * ldy + c] += sum[i];
        }
    }
}

__attribute__((target("avx512f"))) void transposed_avx512(const OutlierColumns& o, const float* xt, int64_t stride,
                                                           int64_t rows, int64_t first, int64_t end, float* y,
                                                           int64_t ldy) {
    transposed_body(o, xt, stride, rows, first, end, y, ldy);
}

__attribute__((target("avx2,fma"))) void transposed_avx2(const OutlierColumns& o, const float* xt, int64_t stride,
                                                          int64_t rows, int64_t first, int64_t end, float* y,
                                                          int64_t ldy) {
    transposed_body(o, xt, stride, rows, first, end, y, ldy);
}

}  // namespace

void add_outliers_one_row(const OutlierColumns& outliers, const float* x, int64_t first_column, int64_t end_column,
                          float* y, bool avx512) {
    if (avx512) one_row_avx512(outliers, x, first_column, end_column, y);
    else one_row_avx2(outliers, x, first_column, end_column, y);
}

void add_outliers_transposed(const OutlierColumns& outliers, const float* xt, int64_t stride, int64_t rows,
                             int64_t first_column, int64_t end_column, float* y, int64_t ldy, bool avx512) {
    if (avx512) transposed_avx512(outliers, xt, stride, rows, first_column, end_column, y, ldy);
    else transposed_avx2(outliers, xt, stride, rows, first_column, end_column, y, ldy);
}

const float* transpose_for_outliers(const float* x, int64_t m, int64_t k, std::vector<float>& buffer) {
    if (buffer.size() < size_t(m * k + kOutlierRowChunk)) buffer.resize(size_t(m * k + kOutlierRowChunk));
    float* xt = buffer.data();
    for (int64_t r = 0; r < k; ++r)
        for (int64_t i = 0; i < m; ++i) xt[r * m + i] = x[i * k + r];
    std::fill(xt + m * k, xt + m * k + kOutlierRowChunk, 0.f);
    return xt;
}

}  // namespace qjit
