#include "quant/truncated_svd.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.hpp"

namespace qjit {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Matrix = Eigen::MatrixXf;

// Extra sketch columns beyond the rank, and power iterations: enough for the r-th singular
// subspace to be found accurately on the slowly decaying spectra of weight residuals.
constexpr int kOversampling = 10;
constexpr int kPowerIterations = 2;
constexpr uint64_t kSeed = 0x5eed'0f'5bd;

// An orthonormal basis of the columns of y (thin Q of its QR).
Matrix orthonormal_basis(const Matrix& y) {
    Eigen::HouseholderQR<Matrix> qr(y);
    return qr.householderQ() * Matrix::Identity(y.rows(), y.cols());
}

// Splits sqrt(S) into both factors: U_r sqrt(S_r) and sqrt(S_r) V_r^T, from the left singular
// vectors (K x >= rank), singular values and right singular vectors (N x >= rank).
TruncatedSvd fold(int rank, const Matrix& left, const Eigen::VectorXf& sigma, const Matrix& right) {
    TruncatedSvd out;
    out.rank = rank;
    const Eigen::VectorXf root = sigma.head(rank).cwiseMax(0.0f).cwiseSqrt();
    RowMatrix u = left.leftCols(rank) * root.asDiagonal();
    RowMatrix v = root.asDiagonal() * right.leftCols(rank).transpose();
    out.u.assign(u.data(), u.data() + u.size());
    out.v.assign(v.data(), v.data() + v.size());
    out.singular_values.assign(sigma.data(), sigma.data() + rank);
    return out;
}

TruncatedSvd exact(int rank, const Eigen::Map<const RowMatrix>& a) {
    const Matrix dense = a;
    Eigen::BDCSVD<Matrix> svd(dense, Eigen::ComputeThinU | Eigen::ComputeThinV);
    return fold(rank, svd.matrixU(), svd.singularValues(), svd.matrixV());
}

// Halko-Martinsson-Tropp: Q spans the range of (A A^T)^q A Omega, then A ~ Q (Q^T A), whose small
// SVD gives the factors.
TruncatedSvd randomized(int rank, const Eigen::Map<const RowMatrix>& a) {
    const Eigen::Index sketch = rank + kOversampling;
    std::mt19937_64 generator(kSeed);
    std::normal_distribution<float> gaussian(0.0f, 1.0f);
    Matrix omega(a.cols(), sketch);
    for (Eigen::Index j = 0; j < omega.cols(); ++j)
        for (Eigen::Index i = 0; i < omega.rows(); ++i) omega(i, j) = gaussian(generator);

    Matrix q = orthonormal_basis(a * omega);
    for (int i = 0; i < kPowerIterations; ++i) {
        const Matrix z = orthonormal_basis(a.transpose() * q);
        q = orthonormal_basis(a * z);
    }
    const Matrix projected = q.transpose() * a;  // sketch x N
    Eigen::BDCSVD<Matrix> svd(projected, Eigen::ComputeThinU | Eigen::ComputeThinV);
    return fold(rank, q * svd.matrixU(), svd.singularValues(), svd.matrixV());
}

}  // namespace

bool uses_randomized_svd(int64_t k, int64_t n, int rank) {
    const int64_t smaller = std::min(k, n);
    return smaller > kExactSvdMaxDimension && 2 * (int64_t(rank) + kOversampling) <= smaller;
}

TruncatedSvd truncated_svd(int64_t k, int64_t n, int rank, const float* a) {
    require(k >= 1 && n >= 1, "matrix shape ", k, " x ", n, " is empty");
    require(rank >= 1 && rank <= std::min(k, n), "rank is ", rank, "; expected 1 .. min(K, N) = ", std::min(k, n));
    require(a != nullptr, "matrix is NULL");
    for (int64_t i = 0; i < k * n; ++i) require(std::isfinite(a[i]), "matrix value ", i, " is not finite");
    const Eigen::Map<const RowMatrix> matrix(a, k, n);
    return uses_randomized_svd(k, n, rank) ? randomized(rank, matrix) : exact(rank, matrix);
}

}  // namespace qjit
