#include "quant/hessian.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "base/error.hpp"

namespace qjit {

namespace {

// Rows of x folded into H together, converted to double once.
constexpr int64_t kRowBlock = 256;

}  // namespace

Hessian::Hessian(int64_t k) : k_(k) {
    require(k >= 1, "Hessian: k is ", k, "; expected 1 or more");
}

void Hessian::add(const float* x, int64_t m) {
    require(m >= 0, "Hessian::add: m is ", m, "; expected 0 or more rows");
    if (m == 0) return;
    require(x != nullptr, "Hessian::add: x is NULL");
    for (int64_t i = 0; i < m * k_; ++i)
        require(std::isfinite(x[i]), "Hessian::add: x[", i / k_, "][", i % k_, "] is not finite");
    if (full_.empty()) {
        // Rows on top of a diagonal alone would make a matrix that is neither: start over.
        require(diagonal_.empty(), "Hessian::add: the Hessian holds only a diagonal (set_diagonal); rows cannot be "
                                   "added to it");
        full_.assign(size_t(k_ * k_), 0.0);
    }
    // H += X^T X over blocks of rows in double, the lower triangle only (Eigen's symmetric rank
    // update), mirrored once at the end.
    const Eigen::Index k = Eigen::Index(k_);
    Eigen::Map<Eigen::MatrixXd> h(full_.data(), k, k);  // symmetric: storage order does not matter
    Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> xs(x, Eigen::Index(m), k);
    Eigen::MatrixXd block;
    for (int64_t m0 = 0; m0 < m; m0 += kRowBlock) {
        const Eigen::Index rows = Eigen::Index(std::min(kRowBlock, m - m0));
        block = xs.middleRows(Eigen::Index(m0), rows).transpose().cast<double>();  // K x rows
        h.selfadjointView<Eigen::Lower>().rankUpdate(block);
    }
    for (Eigen::Index j = 1; j < k; ++j)
        for (Eigen::Index i = 0; i < j; ++i) h(i, j) = h(j, i);
    rows_ += m;
}

void Hessian::set_full(const float* h) {
    require(h != nullptr, "Hessian::set_full: h is NULL");
    const size_t k = size_t(k_);
    for (size_t i = 0; i < k; ++i) {
        for (size_t j = 0; j < k; ++j)
            require(std::isfinite(h[i * k + j]), "Hessian::set_full: h[", i, "][", j, "] is not finite");
        require(h[i * k + i] >= 0.0f, "Hessian::set_full: diagonal entry h[", i, "][", i, "] is ", h[i * k + i],
                "; a Hessian's diagonal is not negative");
    }
    for (size_t i = 0; i < k; ++i)
        for (size_t j = i + 1; j < k; ++j)
            require(h[i * k + j] == h[j * k + i], "Hessian::set_full: h is not symmetric: h[", i, "][", j, "] = ",
                    h[i * k + j], " but h[", j, "][", i, "] = ", h[j * k + i]);
    full_.assign(h, h + k * k);
    diagonal_.clear();
    rows_ = 0;
}

void Hessian::set_diagonal(const float* diagonal) {
    require(diagonal != nullptr, "Hessian::set_diagonal: diagonal is NULL");
    for (int64_t i = 0; i < k_; ++i) {
        require(std::isfinite(diagonal[i]), "Hessian::set_diagonal: diagonal[", i, "] is not finite");
        require(diagonal[i] >= 0.0f, "Hessian::set_diagonal: diagonal[", i, "] is ", diagonal[i],
                "; a Hessian's diagonal is not negative");
    }
    diagonal_.assign(diagonal, diagonal + k_);
    full_.clear();
    rows_ = 0;
}

std::vector<double> Hessian::diagonal() const {
    if (!full_.empty()) {
        std::vector<double> d(static_cast<size_t>(k_));
        for (int64_t i = 0; i < k_; ++i) d[size_t(i)] = full_[size_t(i * k_ + i)];
        return d;
    }
    return diagonal_;
}

}  // namespace qjit
