#include "format/low_rank.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "base/half.hpp"
#include "format/reference.hpp"

namespace qjit {

namespace {

void validate_factor(const LowRankFactor& factor, int bits, int64_t rows, int64_t cols, const char* name) {
    if (bits == 16) {
        require(factor.values.size() == size_t(rows * cols), "low-rank factor ", name, " holds ", factor.values.size(),
                " values; expected ", rows, " x ", cols);
        for (float v : factor.values) require(std::isfinite(v), "low-rank factor ", name, " has a value that is not finite");
        return;
    }
    const QuantParams& p = factor.codes.params;
    require(p.k == rows && p.n == cols, "low-rank factor ", name, " is ", p.k, " x ", p.n, "; expected ", rows, " x ",
            cols);
    require(p.bits == bits && p.symmetric && p.per_column() && !p.act_order,
            "low-rank factor ", name, " must be stored as ", bits, "-bit symmetric codes with one scale per column");
    try {
        validate(factor.codes);
    } catch (const Error& e) {
        fail(e.status(), "low-rank factor ", name, ": ", e.what());
    }
}

}  // namespace

void validate_low_rank_rank(int rank, int64_t k, int64_t n) {
    require(rank >= 1 && rank <= std::min<int64_t>({k, n, kMaxLowRank}), "rank is ", rank, "; expected 1 .. min(K, N, ",
            kMaxLowRank, ") for a ", k, " x ", n, " layer");
}

void validate_low_rank_bits(int bits) {
    require(bits == 8 || bits == 3 || bits == 16, "low-rank bits is ", bits, "; supported: 8, 3 (codes) or 16 (fp16)");
}

std::vector<float> dense_u(const LowRankFactors& f) {
    return f.bits == 16 ? f.u.values : dequantize(f.u.codes);
}

std::vector<float> dense_v(const LowRankFactors& f) {
    const std::vector<float> vt = f.bits == 16 ? f.vt.values : dequantize(f.vt.codes);
    return transposed(vt.data(), int64_t(vt.size()) / f.rank, f.rank);
}

void validate(const LowRankFactors& f, int64_t k, int64_t n) {
    validate_low_rank_bits(f.bits);
    validate_low_rank_rank(f.rank, k, n);
    validate_factor(f.u, f.bits, k, f.rank, "U");
    validate_factor(f.vt, f.bits, n, f.rank, "V (stored transposed)");
}

int64_t low_rank_stored_bytes(int rank, int bits, int64_t k, int64_t n) {
    auto factor_bytes = [&](int64_t rows) {
        if (bits == 16) return rows * rank * 2;
        return (rows * rank * bits + 7) / 8 + rank * int64_t(sizeof(float));
    };
    return factor_bytes(k) + factor_bytes(n);
}

namespace {

// U's inner layer splits K into groups of this many rows, each with a copy of the component's
// scale, so that the int8 path quantizes x per group, as the layer's own product does, rather than
// once over all of K, and the tuner may split K (one or two panels of r columns cannot fill the
// threads otherwise). The copies cost 4 bytes per group and component, about 3 % of INT8 U.
constexpr int64_t kInnerGroupRows = 128;

// A rows x cols matrix of symmetric codes at `bits` in groups of `group_rows` rows, with fp32
// `scales` [groups][cols]: the form of every inner layer's matrix and of the stored factors.
QuantizedMatrix symmetric_codes(int bits, int64_t rows, int64_t cols, int64_t group_rows, std::vector<float> scales,
                                std::vector<uint8_t> codes) {
    QuantizedMatrix q;
    QuantParams& p = q.params;
    p.k = rows;
    p.n = cols;
    p.bits = bits;
    p.group_size = group_rows;
    p.symmetric = true;
    p.scale_type = ScaleType::F32;
    p.zeros.assign(scales.size(), uint16_t(1u << (bits - 1)));
    p.scales = std::move(scales);
    q.codes = std::move(codes);
    return q;
}

}  // namespace

// U (K x rank, a scale per column) as its inner layer's matrix: the same codes, each column's
// scale repeated for every group of kInnerGroupRows rows.
QuantizedMatrix low_rank_u_matrix(QuantizedMatrix u) {
    const QuantParams& p = u.params;
    const int64_t group_rows = std::min(kInnerGroupRows, p.k), groups = (p.k + group_rows - 1) / group_rows;
    std::vector<float> scales;
    for (int64_t g = 0; g < groups; ++g) scales.insert(scales.end(), p.scales.begin(), p.scales.end());
    return symmetric_codes(p.bits, p.k, p.n, group_rows, std::move(scales), std::move(u.codes));
}

// The inverse: one scale per column again (every group holds the same copy).
QuantizedMatrix u_from_low_rank_matrix(QuantizedMatrix u) {
    const QuantParams& p = u.params;
    std::vector<float> scales(p.scales.begin(), p.scales.begin() + p.n);
    return symmetric_codes(p.bits, p.k, p.n, p.k, std::move(scales), std::move(u.codes));
}

// V (rank x N) as an inner layer's matrix: the codes of V transposed (N x rank, a scale per
// component) turned back, with unit scales; V's own scales multiply x U instead.
QuantizedMatrix low_rank_v_matrix(const QuantizedMatrix& vt) {
    const int64_t n = vt.params.k, rank = vt.params.n;
    return symmetric_codes(vt.params.bits, rank, n, rank, std::vector<float>(size_t(n), 1.0f),
                           transposed(vt.codes.data(), n, rank));
}

// The inverse: V transposed with its component scales, from the inner layer's matrix.
QuantizedMatrix vt_from_low_rank_matrix(const QuantizedMatrix& v, const std::vector<float>& scales) {
    const int64_t rank = v.params.k, n = v.params.n;
    return symmetric_codes(v.params.bits, n, rank, n, scales, transposed(v.codes.data(), rank, n));
}

}  // namespace qjit
