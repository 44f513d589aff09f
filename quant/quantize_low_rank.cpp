#include "quant/quantize_low_rank.hpp"

#include <cmath>

#include "base/error.hpp"
#include "base/half.hpp"
#include "quant/quantize_rtn.hpp"

namespace qjit {

namespace {

// values: rows x cols as stored (V transposed); a value that is not finite is reported at its place
// in the factor as the caller gave it.
LowRankFactor store_factor(int bits, int64_t rows, int64_t cols, const float* values, const char* name,
                           bool transposed_from_caller) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            if (!std::isfinite(values[r * cols + c]))
                fail(QJIT_ERROR_INVALID_ARGUMENT, "low-rank factor ", name, "[", transposed_from_caller ? c : r, "][",
                     transposed_from_caller ? r : c, "] is not finite");
    LowRankFactor factor;
    if (bits == 16) {
        factor.values.resize(size_t(rows * cols));
        for (size_t i = 0; i < factor.values.size(); ++i) factor.values[i] = round_to_half(values[i]);
        return factor;
    }
    const WeightFormat per_column{.bits = bits, .group_size = rows, .symmetric = true, .scale_type = ScaleType::F32};
    factor.codes = quantize_rtn(per_column, rows, cols, values);
    return factor;
}

}  // namespace

LowRankFactors quantize_low_rank(int bits, int64_t k, int64_t n, int rank, const float* u, const float* v) {
    validate_low_rank_bits(bits);
    validate_low_rank_rank(rank, k, n);
    require(u != nullptr && v != nullptr, "low-rank factors U and V must not be NULL");
    LowRankFactors factors;
    factors.rank = rank;
    factors.bits = bits;
    factors.u = store_factor(bits, k, rank, u, "U", false);
    factors.vt = store_factor(bits, n, rank, transposed(v, rank, n).data(), "V", true);
    return factors;
}

}  // namespace qjit
