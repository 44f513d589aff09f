#include "runtime/cpu/outlier_add.hpp"

#include <immintrin.h>

#include <algorithm>

namespace qjit {

namespace {

__attribute__((target("sse3"))) inline float sum_of(__m128 v) {
    const __m128 pair = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
}

// The outliers stream from memory once per forward, a few bytes per column between loads:
// too little for the hardware prefetcher, so each column asks for the lines well ahead.
inline void prefetch_ahead(const OutlierColumns& o, int64_t c, int64_t stop) {
    constexpr int64_t kAhead = 256;  // outliers (1 KiB of rows, 1 KiB of values)
    _mm_prefetch(reinterpret_cast<const char*>(o.rows + stop + kAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(o.values + stop + kAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(o.column_start + c + kAhead / 4), _MM_HINT_T0);
}

}  // namespace

// 8 outliers per gather. A column with none runs the loop body once with an empty mask (adding 0),
// which costs less than a mispredicted branch. (16 per AVX-512 gather ran slower on Zen 5: most
// columns hold about 8.)
__attribute__((target("avx2,fma"))) void add_outliers_one_row(const OutlierColumns& o, const float* x, int64_t first,
                                                              int64_t end, float* y) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t c = first; c < end; ++c) {
        const int64_t stop = o.column_start[c + 1];
        prefetch_ahead(o, c, stop);
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

// Rows in chunks of 16 (two vectors), columns in chunks of 64. Each column's outliers are taken in
// pairs with accumulators of their own, which halves the chain of dependent multiply-adds a column
// waits on. The sums go to a small column-major block first and are added to y a row at a time:
// y's rows lie N floats apart, often a multiple of 4 KiB, so 16 stores per column would all land
// in one L1 set. Rows past `rows` read padding and are not stored.
__attribute__((target("avx2,fma"))) void add_outliers_transposed(const OutlierColumns& o, const float* xt,
                                                                 int64_t stride, int64_t rows, int64_t first,
                                                                 int64_t end, float* y, int64_t ldy) {
    static_assert(kOutlierRowChunk == 16);
    constexpr int64_t kColumnChunk = 64;
    alignas(32) float sums[kColumnChunk][kOutlierRowChunk];
    for (int64_t i0 = 0; i0 < rows; i0 += kOutlierRowChunk) {
        const int64_t height = std::min(kOutlierRowChunk, rows - i0);
        const float* x0 = xt + i0;
        for (int64_t c0 = first; c0 < end; c0 += kColumnChunk) {
            const int64_t width = std::min(kColumnChunk, end - c0);
            for (int64_t j = 0; j < width; ++j) {
                const int64_t c = c0 + j, stop = o.column_start[c + 1];
                prefetch_ahead(o, c, stop);
                __m256 even_lo = _mm256_setzero_ps(), even_hi = _mm256_setzero_ps();
                __m256 odd_lo = _mm256_setzero_ps(), odd_hi = _mm256_setzero_ps();
                int64_t e = o.column_start[c];
                for (; e + 1 < stop; e += 2) {
                    const float* xa = x0 + o.rows[e] * stride;
                    const float* xb = x0 + o.rows[e + 1] * stride;
                    const __m256 va = _mm256_set1_ps(o.values[e]), vb = _mm256_set1_ps(o.values[e + 1]);
                    even_lo = _mm256_fmadd_ps(_mm256_loadu_ps(xa), va, even_lo);
                    even_hi = _mm256_fmadd_ps(_mm256_loadu_ps(xa + 8), va, even_hi);
                    odd_lo = _mm256_fmadd_ps(_mm256_loadu_ps(xb), vb, odd_lo);
                    odd_hi = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 8), vb, odd_hi);
                }
                if (e < stop) {
                    const float* xa = x0 + o.rows[e] * stride;
                    const __m256 va = _mm256_set1_ps(o.values[e]);
                    even_lo = _mm256_fmadd_ps(_mm256_loadu_ps(xa), va, even_lo);
                    even_hi = _mm256_fmadd_ps(_mm256_loadu_ps(xa + 8), va, even_hi);
                }
                _mm256_store_ps(sums[j], _mm256_add_ps(even_lo, odd_lo));
                _mm256_store_ps(sums[j] + 8, _mm256_add_ps(even_hi, odd_hi));
            }
            for (int64_t i = 0; i < height; ++i) {
                float* yi = y + (i0 + i) * ldy + c0;
                for (int64_t j = 0; j < width; ++j) yi[j] += sums[j][i];
            }
        }
    }
}

const float* transpose_for_outliers(const float* x, int64_t m, int64_t k, std::vector<float>& buffer,
                                   ThreadPool& pool) {
    if (buffer.size() < size_t(m * k + kOutlierRowChunk)) buffer.resize(size_t(m * k + kOutlierRowChunk));
    float* xt = buffer.data();
    // Blocks of 64 rows of K: the m rows' reads stay sequential and the block's writes in L1.
    constexpr int64_t kBlock = 64;
    auto transpose_block = [&](int64_t block) {
        const int64_t r0 = block * kBlock, r1 = std::min(k, r0 + kBlock);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t r = r0; r < r1; ++r) xt[r * m + i] = x[i * k + r];
    };
    pool.parallel_for((k + kBlock - 1) / kBlock, transpose_block, m * k >= (int64_t(1) << 14));
    std::fill(xt + m * k, xt + m * k + kOutlierRowChunk, 0.f);
    return xt;
}

}  // namespace qjit
