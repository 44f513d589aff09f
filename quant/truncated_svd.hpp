// The best rank-r approximation of a dense matrix (Eckart-Young), for MiLo's low-rank compensator:
// A ~ U V with the singular values split evenly between the factors (U = U_r sqrt(S_r),
// V = sqrt(S_r) V_r^T), so both factors have the same magnitude and quantize alike.
//
// Small problems take Eigen's exact SVD (BDCSVD). Large ones take a randomized range finder
// (Halko, Martinsson and Tropp 2011): a Gaussian sketch with oversampling, power iterations
// re-orthonormalised by QR, then the exact SVD of the small projected matrix; its seed is fixed,
// so the result is reproducible.
#pragma once

#include <cstdint>
#include <vector>

namespace qjit {

struct TruncatedSvd {
    int rank = 0;
    std::vector<float> u;                // K x rank, row-major: U_r sqrt(S_r)
    std::vector<float> v;                // rank x N, row-major: sqrt(S_r) V_r^T
    std::vector<float> singular_values;  // rank values, largest first
};

// Above this min(K, N) the randomized path is taken, provided the sketch (rank + oversampling)
// is at most half of min(K, N): below it, or for a sketch that wide, the exact SVD costs about as
// much and is exact.
inline constexpr int64_t kExactSvdMaxDimension = 512;

// a: the dense K x N matrix, row-major. 1 <= rank <= min(K, N).
TruncatedSvd truncated_svd(int64_t k, int64_t n, int rank, const float* a);

// Which path truncated_svd takes for a shape and rank (tests and the benchmark report it).
bool uses_randomized_svd(int64_t k, int64_t n, int rank);

}  // namespace qjit
