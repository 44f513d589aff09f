#include "format/quantized_matrix.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"

namespace qjit {

void validate(const QuantParams& p) {
    validate(p.format());
    const size_t metadata = size_t(p.num_groups() * p.n);
    require(p.scales.size() == metadata, "scales hold ", p.scales.size(), " values; expected ", metadata);
    require(p.zeros.size() == metadata, "zeros hold ", p.zeros.size(), " values; expected ", metadata);
    for (size_t i = 0; i < metadata; ++i) {
        require(std::isfinite(p.scales[i]), "scale ", i, " is not finite");
        require(p.zeros[i] <= (1u << p.bits), "zero point ", i, " is ", p.zeros[i], ", above 2^bits");
    }
    if (p.symmetric)
        for (uint16_t z : p.zeros) require(z == (1u << (p.bits - 1)), "symmetric layer with zero point ", z);
    require(p.act_order == !p.row_order.empty(), p.act_order ? "an act-order layer without a row order"
                                                              : "a row order on a layer that is not act-order");
    if (p.act_order) {
        require(p.row_order.size() == size_t(p.k), "row_order holds ", p.row_order.size(), " rows; expected ", p.k);
        std::vector<bool> seen(size_t(p.k), false);
        for (int32_t r : p.row_order) {
            require(r >= 0 && r < p.k && !seen[size_t(r)], "row_order is not a permutation of 0..K-1");
            seen[size_t(r)] = true;
        }
    }
}

int64_t stored_bytes(const QuantParams& p) {
    const int64_t metadata = p.num_groups() * p.n;
    const int64_t scales = metadata * (p.f16_scales() ? 2 : 4);
    const int64_t zeros = p.symmetric ? 0 : (metadata * p.bits + 7) / 8;
    return (p.k * p.n * p.bits + 7) / 8 + scales + zeros + int64_t(p.row_order.size() * sizeof(int32_t));
}

void validate(const QuantizedMatrix& m) {
    validate(m.params);
    require(m.codes.size() == size_t(m.params.k * m.params.n), "codes hold ", m.codes.size(), " values; expected ",
            m.params.k * m.params.n);
    for (uint8_t c : m.codes) require(c <= m.params.max_code(), "code ", int(c), " exceeds ", m.params.bits, " bits");
}

}  // namespace qjit
