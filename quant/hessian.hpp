// What calibration keeps of a layer's inputs: H = sum over calibration rows of x^T x (K x K), the
// second-order statistics GPTQ and the 2/4/16 sensitivity read, or only its diagonal when that is
// all a caller has.
#pragma once

#include <cstdint>
#include <vector>

namespace qjit {

class Hessian {
public:
    explicit Hessian(int64_t k);  // empty: no rows yet

    // H += x^T x for m rows of K activations (x: m x K, row-major). Throws for a non-finite value.
    void add(const float* x, int64_t m);
    // Replaces H by a given symmetric K x K matrix (row-major) or by a diagonal alone (K values).
    // Throws for a non-finite value, an asymmetric matrix or a negative diagonal entry.
    void set_full(const float* h);
    void set_diagonal(const float* diagonal);

    int64_t k() const { return k_; }
    int64_t rows() const { return rows_; }               // calibration rows added (0 after a set_*)
    bool has_full() const { return !full_.empty(); }    // false: only the diagonal is known
    bool empty() const { return !has_full() && diagonal_.empty(); }
    const std::vector<double>& full() const { return full_; }  // [k][k] when has_full()
    std::vector<double> diagonal() const;                      // [k]

private:
    int64_t k_ = 0;
    int64_t rows_ = 0;
    std::vector<double> full_;      // [k][k], or empty
    std::vector<double> diagonal_;  // [k] when only the diagonal was given
};

}  // namespace qjit
