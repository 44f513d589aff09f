#include "quant/quantize_gptq.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.hpp"
#include "base/half.hpp"
#include "quant/quantize_rtn.hpp"

namespace qjit {

namespace {

using RowMatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Triangles this small are inverted by substitution; larger ones recursively, by halves, so the
// work is in matrix products (K^3 / 3 flops instead of a solve against the identity's K^3).
constexpr Eigen::Index kSmallTriangle = 64;

// Inverts a lower-triangular matrix in place (its upper part stays zero).
template <typename Matrix>
void invert_lower(Eigen::Ref<Matrix> l) {
    const Eigen::Index size = l.rows();
    if (size <= kSmallTriangle) {
        Matrix inverse = Matrix::Identity(size, size);
        l.template triangularView<Eigen::Lower>().solveInPlace(inverse);
        l = inverse;
        return;
    }
    const Eigen::Index h = size / 2, rest = size - h;
    invert_lower<Matrix>(l.topLeftCorner(h, h));
    invert_lower<Matrix>(l.bottomRightCorner(rest, rest));
    // [L11 0; L21 L22]^-1 = [X11 0; -X22 L21 X11  X22]
    const Matrix t = l.bottomLeftCorner(rest, h) * l.topLeftCorner(h, h).template triangularView<Eigen::Lower>();
    l.bottomLeftCorner(rest, h).noalias() =
        -(l.bottomRightCorner(rest, rest).template triangularView<Eigen::Lower>() * t);
}

// diag(H) with dead inputs (diag 0) counted as 1, as GPTQ sets them.
std::vector<double> live_diagonal(const Hessian& hessian, std::vector<bool>* dead = nullptr) {
    std::vector<double> d = hessian.diagonal();
    if (dead) dead->assign(d.size(), false);
    for (size_t i = 0; i < d.size(); ++i)
        if (d[i] == 0.0) {
            d[i] = 1.0;
            if (dead) (*dead)[i] = true;
        }
    return d;
}

std::vector<int32_t> identity_order(int64_t k) {
    std::vector<int32_t> order(static_cast<size_t>(k));
    std::iota(order.begin(), order.end(), 0);
    return order;
}

// What the passes share: the weights in storage order and GPTQ's factor of H^-1.
struct Factor {
    int64_t k = 0;
    std::vector<float> upper;     // [k][k] row-major: U with U^T U = H^-1 (storage order); empty for a diagonal H
    std::vector<double> divisor;  // [k] U's diagonal
};

// The factor of the damped H (dead inputs 1) in `order`. With H = R R^T, R upper (the Cholesky
// factor of H's rows and columns reversed, reversed back), U = R^-1 is upper and U^T U = H^-1.
Factor make_factor(const Hessian& hessian, double damp, const std::vector<int32_t>& order, bool upper_too) {
    const int64_t k = hessian.k();
    const std::vector<double> diagonal = live_diagonal(hessian);
    const double lambda = damp * std::accumulate(diagonal.begin(), diagonal.end(), 0.0) / double(k);
    Factor f;
    f.k = k;
    f.divisor.resize(size_t(k));
    if (!hessian.has_full()) {
        for (int64_t r = 0; r < k; ++r)
            f.divisor[size_t(r)] = 1.0 / std::sqrt(diagonal[size_t(order[size_t(r)])] + lambda);
        return f;
    }
    const std::vector<double>& h = hessian.full();
    const Eigen::Index size = Eigen::Index(k);
    // a(i, j) = H'[order[k-1-i]][order[k-1-j]]: permuted, then reversed (column j of a from row
    // order[k-1-j] of the symmetric H, read along the row).
    Eigen::MatrixXd a(size, size);
    for (Eigen::Index j = 0; j < size; ++j) {
        const double* row = &h[size_t(order[size_t(k - 1 - j)]) * size_t(k)];
        for (Eigen::Index i = 0; i < size; ++i) a(i, j) = row[order[size_t(k - 1 - i)]];
    }
    for (Eigen::Index i = 0; i < size; ++i) a(i, i) = diagonal[size_t(order[size_t(k - 1 - i)])] + lambda;
    Eigen::LLT<Eigen::Ref<Eigen::MatrixXd>, Eigen::Lower> llt(a);  // in place: a's lower triangle is M
    require(llt.info() == Eigen::Success,
            "the Hessian is not positive definite even after damping (damp = ", damp, "); raise damp");
    a.triangularView<Eigen::StrictlyUpper>().setZero();
    // U = J M^-1 J: U[r][r] = 1 / M[k-1-r][k-1-r].
    for (int64_t r = 0; r < k; ++r) f.divisor[size_t(r)] = 1.0 / a(size - 1 - r, size - 1 - r);
    if (!upper_too) return f;
    // The factor in fp32, as GPTQ keeps it (the feedback runs in fp32): inverted in fp32 too, at half
    // the time of double. U[i][j] = M^-1[k-1-i][k-1-j], stored row-major: M^-1 row-major, reversed.
    f.upper.assign(size_t(k * k), 0.0f);
    Eigen::Map<RowMatrixF> m(f.upper.data(), size, size);
    m = a.cast<float>();
    invert_lower<RowMatrixF>(m);
    std::reverse(f.upper.begin(), f.upper.end());  // a row-major matrix reversed is J (it) J, row-major
    for (int64_t i = 0; i < k; ++i) f.upper[size_t(i * k + i)] = float(f.divisor[size_t(i)]);
    return f;
}

struct Setup {
    int64_t k = 0, n = 0, group_size = 0, block = 0;
    std::vector<int> widths;  // per group, storage order
    bool symmetric = false;
    ScaleType scale_type = ScaleType::F16;
    std::vector<float> weights;  // [k][n], storage order, dead rows 0
    Factor factor;
};

struct Pass {
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    std::vector<uint16_t> zeros;
    SecondOrderScales second;
    std::vector<OutlierEntry> outliers;
};

// One group's scale and zero point per column, from the rows [r0, r1) of w as they are now.
void fit_group(const Setup& s, int64_t g, const float* w, int64_t r0, int64_t r1, std::vector<float>& lo,
               std::vector<float>& hi, Pass& out, float* scale, float* zero) {
    const int64_t n = s.n;
    const int width = s.widths[size_t(g)];
    const int max_code = (1 << width) - 1;
    std::copy(w + r0 * n, w + (r0 + 1) * n, lo.begin());
    std::copy(w + r0 * n, w + (r0 + 1) * n, hi.begin());
    for (int64_t r = r0 + 1; r < r1; ++r)
        for (int64_t c = 0; c < n; ++c) {
            lo[size_t(c)] = std::min(lo[size_t(c)], w[r * n + c]);
            hi[size_t(c)] = std::max(hi[size_t(c)], w[r * n + c]);
        }
    // As quantize_rtn (GPTQ's find_params).
    for (int64_t c = 0; c < n; ++c) {
        const QuantRange range = quantization_range(lo[size_t(c)], hi[size_t(c)], s.symmetric);
        lo[size_t(c)] = range.lo;
        scale[c] = range_scale(range, width, s.scale_type);
    }
    if (s.scale_type == ScaleType::SecondOrder) {
        // This group's scales quantized again now, its zero points and codes chosen against them.
        const std::vector<float> raw(scale, scale + n);
        const SecondOrderScales one = quantize_second_order(1, n, raw);
        const int64_t column_groups = SecondOrderScales::column_groups(n);
        std::copy(one.codes.begin(), one.codes.end(), out.second.codes.begin() + g * n);
        std::copy(one.scales.begin(), one.scales.end(), out.second.scales.begin() + g * column_groups);
        std::copy(one.zeros.begin(), one.zeros.end(), out.second.zeros.begin() + g * column_groups);
        for (int64_t c = 0; c < n; ++c) scale[c] = one.scale(n, 0, c);
    }
    for (int64_t c = 0; c < n; ++c) {
        int z = (max_code + 1) / 2;
        if (!s.symmetric) {
            const float t = scale[c] > 0.0f ? -lo[size_t(c)] / scale[c] : 0.0f;
            z = std::isfinite(t) ? std::clamp(int(std::nearbyint(std::min(t, 1e6f))), 0, max_code) : max_code;
        }
        zero[c] = float(z);
        out.scales[size_t(g * n + c)] = scale[c];
        out.zeros[size_t(g * n + c)] = uint16_t(z);
    }
}

// One GPTQ pass over the rows in storage order. outlier_mask ([k][n], or null): weights kept as
// outliers. scores ([k][n], or null): each eligible weight's (w - q)^2 / d^2 (others left alone).
Pass run_pass(const Setup& s, const uint8_t* outlier_mask, float* scores) {
    const int64_t k = s.k, n = s.n, gs = s.group_size;
    const bool full = !s.factor.upper.empty();
    Pass out;
    const int64_t groups = (k + gs - 1) / gs;
    out.codes.resize(size_t(k * n));
    out.scales.resize(size_t(groups * n));
    out.zeros.resize(size_t(groups * n));
    if (s.scale_type == ScaleType::SecondOrder) {
        out.second.codes.resize(size_t(groups * n));
        out.second.scales.resize(size_t(groups * SecondOrderScales::column_groups(n)));
        out.second.zeros.resize(out.second.scales.size());
    }
    std::vector<float> w = s.weights;
    std::vector<float> err(size_t(std::min(s.block, k) * n));
    const size_t columns = static_cast<size_t>(n);
    std::vector<float> scale(columns), zero(columns), lo(columns), hi(columns);
    Eigen::Map<RowMatrixF> wm(w.data(), Eigen::Index(k), Eigen::Index(n));
    Eigen::Map<const RowMatrixF> um(s.factor.upper.data(), full ? Eigen::Index(k) : 0, full ? Eigen::Index(k) : 0);
    Eigen::Map<const RowMatrixF> em(err.data(), Eigen::Index(err.size() / size_t(n)), Eigen::Index(n));
    float max_code = 0;
    bool eligible = false;
    for (int64_t i1 = 0; i1 < k;) {
        int64_t i2 = std::min(k, i1 + s.block);
        // A group that starts inside the block ends inside it (or the block ends where it starts),
        // so the range it is fitted to reads rows that have every update before them.
        const int64_t last_start = (i2 - 1) / gs * gs;
        if (last_start > i1 && last_start + gs > i2 && i2 < k) i2 = last_start;
        for (int64_t i = i1; i < i2; ++i) {
            if (i % gs == 0) {
                const int64_t g = i / gs;
                fit_group(s, g, w.data(), i, std::min(k, i + gs), lo, hi, out, scale.data(), zero.data());
                max_code = float((1 << s.widths[size_t(g)]) - 1);
                eligible = s.widths[size_t(g)] == 2;
            }
            float* row = &w[size_t(i * n)];
            float* e = &err[size_t((i - i1) * n)];
            uint8_t* codes = &out.codes[size_t(i * n)];
            const float d = float(s.factor.divisor[size_t(i)]);
            for (int64_t c = 0; c < n; ++c) {
                const float x = row[c];
                const float t = scale[size_t(c)] > 0.0f ? x / scale[size_t(c)] : 0.0f;
                const float q = std::clamp(std::nearbyint(t) + zero[size_t(c)], 0.0f, max_code);
                codes[c] = uint8_t(q);
                e[c] = (x - scale[size_t(c)] * (q - zero[size_t(c)])) / d;
            }
            if (scores && eligible)
                for (int64_t c = 0; c < n; ++c) scores[i * n + c] = e[c] * e[c];
            if (outlier_mask)
                for (int64_t c = 0; c < n; ++c)
                    if (outlier_mask[i * n + c]) {
                        // Kept exact but for the value's fp16 rounding: only that is fed on.
                        const float deq = scale[size_t(c)] * (float(codes[c]) - zero[size_t(c)]);
                        const float value = round_to_half(row[c] - deq);
                        out.outliers.push_back({int32_t(i), int32_t(c), value});
                        e[c] = (row[c] - (deq + value)) / d;
                    }
            if (!full) continue;
            // Within the block, at once: rows (i, i2) -= U[i][j] * err.
            const float* u = &s.factor.upper[size_t(i * k)];
            for (int64_t j = i + 1; j < i2; ++j) {
                const float f = u[j];
                if (f == 0.0f) continue;
                float* target = &w[size_t(j * n)];
                for (int64_t c = 0; c < n; ++c) target[c] -= f * e[c];
            }
        }
        // The rest, lazily for the whole block: W[i2:] -= U[i1:i2, i2:]^T Err.
        if (full && i2 < k) {
            const Eigen::Index b = Eigen::Index(i2 - i1), rest = Eigen::Index(k - i2);
            wm.bottomRows(rest).noalias() -= um.block(Eigen::Index(i1), Eigen::Index(i2), b, rest).transpose() *
                                              em.topRows(b);
        }
        i1 = i2;
    }
    return out;
}

}  // namespace

std::vector<int32_t> gptq_act_order(const Hessian& hessian) {
    require(!hessian.empty(), "the Hessian is empty: add calibration rows or set it");
    const std::vector<double> d = live_diagonal(hessian);
    std::vector<int32_t> order = identity_order(hessian.k());
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return d[size_t(a)] > d[size_t(b)]; });
    return order;
}

std::vector<double> gptq_error_divisors(const Hessian& hessian, double damp, const std::vector<int32_t>& order) {
    require(!hessian.empty(), "the Hessian is empty: add calibration rows or set it");
    require(std::isfinite(damp) && damp >= 0, "damp is ", damp, "; expected 0 or more");
    require(order.empty() || order.size() == size_t(hessian.k()), "the row order holds ", order.size(),
            " rows; expected K = ", hessian.k());
    return make_factor(hessian, damp, order.empty() ? identity_order(hessian.k()) : order, false).divisor;
}

QuantizedMatrix quantize_gptq(const GptqConfig& config, const Hessian& hessian, int64_t k, int64_t n,
                              const float* weights) {
    QuantizedMatrix out;
    QuantParams& p = out.params;
    static_cast<WeightFormat&>(p) = with_shape(config.format, k, n);  // widths, second-order limits: before any work
    if (p.outliers > 0 || p.low_rank.present())
        fail(QJIT_ERROR_INVALID_ARGUMENT, "format ", p.name(), " is not one GPTQ makes: outlier_fraction decides "
             "the outliers, and GPTQ fits no compensator");
    require(weights != nullptr, "weights is NULL");
    require(std::isfinite(config.damp) && config.damp >= 0, "damp is ", config.damp, "; expected 0 or more");
    require(config.block_size >= 1, "block_size is ", config.block_size, "; expected 1 or more");
    require(std::isfinite(config.outlier_fraction) && config.outlier_fraction >= 0 &&
                config.outlier_fraction <= kMaxOutlierFraction,
            "outlier_fraction is ", config.outlier_fraction, "; expected 0 .. ", kMaxOutlierFraction);
    require(!hessian.empty(), "the Hessian is empty: add calibration rows or set it");
    require(hessian.k() == k, "the Hessian is ", hessian.k(), " x ", hessian.k(), "; expected K x K = ", k, " x ", k);

    for (int64_t i = 0; i < k * n; ++i)
        require(std::isfinite(weights[i]), "weights[", i / n, "][", i % n, "] (K x N order) is not finite");

    Setup s;
    s.k = k;
    s.n = n;
    s.group_size = std::min(p.group_size, k);
    s.block = config.block_size;
    s.symmetric = p.symmetric;
    s.scale_type = p.scale_type;
    for (int64_t g = 0; g < p.num_groups(); ++g) s.widths.push_back(p.group_width(g));

    std::vector<bool> dead;
    live_diagonal(hessian, &dead);
    const std::vector<int32_t> order = p.act_order ? gptq_act_order(hessian) : identity_order(k);
    s.weights.resize(size_t(k * n));
    for (int64_t r = 0; r < k; ++r) {
        const int64_t from = order[size_t(r)];
        if (dead[size_t(from)])
            std::fill_n(&s.weights[size_t(r * n)], n, 0.0f);
        else
            std::copy(weights + from * n, weights + (from + 1) * n, &s.weights[size_t(r * n)]);
    }
    s.factor = make_factor(hessian, config.damp, order, true);

    // Outliers: a first pass scores each 2-bit weight's error, the second keeps the worst exact.
    std::vector<uint8_t> mask;
    if (config.outlier_fraction > 0) {
        const int64_t wanted = std::min(int64_t(std::floor(config.outlier_fraction * double(k) * double(n))),
                                        max_outliers(k, n));
        if (wanted > 0) {
            std::vector<float> scores(size_t(k * n), -1.0f);
            run_pass(s, nullptr, scores.data());
            std::vector<int64_t> candidates;
            for (int64_t i = 0; i < k * n; ++i)
                if (scores[size_t(i)] >= 0.0f) candidates.push_back(i);
            const int64_t count = std::min<int64_t>(wanted, int64_t(candidates.size()));
            if (count > 0) {
                auto worse = [&](int64_t a, int64_t b) {
                    return scores[size_t(a)] != scores[size_t(b)] ? scores[size_t(a)] > scores[size_t(b)] : a < b;
                };
                std::nth_element(candidates.begin(), candidates.begin() + (count - 1), candidates.end(), worse);
                mask.assign(size_t(k * n), 0);
                for (int64_t i = 0; i < count; ++i) mask[size_t(candidates[size_t(i)])] = 1;
            }
        }
    }
    Pass pass = run_pass(s, mask.empty() ? nullptr : mask.data(), nullptr);

    p.scales = std::move(pass.scales);
    p.zeros = std::move(pass.zeros);
    if (p.act_order) p.row_order = order;
    if (p.second_order_scales()) p.second_order = std::move(pass.second);
    p.outliers = int64_t(pass.outliers.size());
    if (p.outliers > 0) p.outliers_data = make_sparse_outliers(k, n, std::move(pass.outliers));
    out.codes = std::move(pass.codes);
    validate(out);
    return out;
}

}  // namespace qjit
