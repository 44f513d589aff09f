#include "format/quantized_matrix.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "base/error.hpp"
#include "base/half.hpp"

namespace qjit {

namespace {

void validate_second_order(const QuantParams& p) {
    const SecondOrderScales& s = p.second_order;
    const size_t groups = size_t(p.num_groups()), column_groups = size_t(SecondOrderScales::column_groups(p.n));
    require(s.codes.size() == groups * size_t(p.n), "second-order scale codes hold ", s.codes.size(),
            " values; expected ", groups * size_t(p.n));
    require(s.scales.size() == groups * column_groups && s.zeros.size() == groups * column_groups,
            "second-order scales and zeros hold ", s.scales.size(), " and ", s.zeros.size(), " values; expected ",
            groups * column_groups);
    for (size_t i = 0; i < s.scales.size(); ++i)
        require(std::isfinite(half_to_float(s.scales[i])) && std::isfinite(half_to_float(s.zeros[i])),
                "second-order scale or zero ", i, " is not finite");
    for (int64_t g = 0; g < p.num_groups(); ++g)
        for (int64_t c = 0; c < p.n; ++c) {
            const size_t at = size_t(g * p.n + c);
            require(s.codes[at] < (1u << SecondOrderScales::kBits), "second-order scale code ", at, " is ",
                    int(s.codes[at]), "; expected below 16");
            require(p.scales[at] == s.scale(p.n, g, c), "scale ", at, " is ", p.scales[at],
                    ", not what its second-order code gives, ", s.scale(p.n, g, c));
            require(p.zeros[at] < 16, "zero point ", at, " is ", p.zeros[at], "; second-order layers keep it below 16");
        }
}

void validate_super_block(const QuantParams& p) {
    const SuperBlockScales& s = p.super_block;
    const size_t groups = size_t(p.num_groups() * p.n), supers = size_t(p.k / kSuperBlockRows * p.n);
    require(s.scale_codes.size() == groups, "super-block scale codes hold ", s.scale_codes.size(), " values; expected ",
            groups);
    require(s.scales.size() == supers, "super-block scales hold ", s.scales.size(), " values; expected ", supers);
    require(s.min_codes.size() == (p.float_offsets ? groups : 0) && s.mins.size() == (p.float_offsets ? supers : 0),
            "super-block min codes and mins hold ", s.min_codes.size(), " and ", s.mins.size(), " values; expected ",
            p.float_offsets ? groups : 0, " and ", p.float_offsets ? supers : 0);
    const int lo = p.symmetric ? -(1 << (p.scale_code_bits - 1)) : 0;
    const int hi = p.symmetric ? (1 << (p.scale_code_bits - 1)) - 1 : (1 << p.scale_code_bits) - 1;
    // (require() forms its message first: each check here is an if, so the loops stay cheap.)
    for (size_t i = 0; i < groups; ++i) {
        if (s.scale_codes[i] < lo || s.scale_codes[i] > hi)
            fail(QJIT_ERROR_INVALID_ARGUMENT, "super-block scale code ", i, " is ", int(s.scale_codes[i]), "; ",
                 p.scale_code_bits, "-bit codes lie in ", lo, " .. ", hi);
        if (p.float_offsets && s.min_codes[i] > hi)
            fail(QJIT_ERROR_INVALID_ARGUMENT, "super-block min code ", i, " is ", int(s.min_codes[i]), "; expected 0 .. ", hi);
    }
    for (size_t i = 0; i < supers; ++i)
        if (!std::isfinite(half_to_float(s.scales[i])) || (p.float_offsets && !std::isfinite(half_to_float(s.mins[i]))))
            fail(QJIT_ERROR_INVALID_ARGUMENT, "super-block scale or min ", i, " is not finite");
    for (int64_t g = 0; g < p.num_groups(); ++g)
        for (int64_t c = 0; c < p.n; ++c) {
            const size_t at = size_t(g * p.n + c);
            if (p.scales[at] != s.scale(p, g, c))
                fail(QJIT_ERROR_INVALID_ARGUMENT, "scale ", at, " is ", p.scales[at],
                     ", not what its super-block code gives, ", s.scale(p, g, c));
            if (p.float_offsets && std::bit_cast<uint32_t>(p.offsets[at]) != std::bit_cast<uint32_t>(s.offset(p, g, c)))
                fail(QJIT_ERROR_INVALID_ARGUMENT, "offset ", at, " is ", p.offsets[at],
                     ", not what its super-block code gives, ", s.offset(p, g, c));
        }
}

void validate_offsets(const QuantParams& p) {
    const size_t metadata = size_t(p.num_groups() * p.n);
    require(p.zeros.empty(), "zero points on a layer with float offsets");
    require(p.offsets.size() == metadata, "offsets hold ", p.offsets.size(), " values; expected ", metadata);
    for (size_t i = 0; i < metadata; ++i) {
        require(std::isfinite(p.offsets[i]), "offset ", i, " is not finite");
        require(!p.f16_scales() || half_to_float(float_to_half(p.offsets[i])) == p.offsets[i], "offset ", i, " (",
                p.offsets[i], ") is not an fp16 value, as a layer with fp16 scales stores it");
    }
}

void validate_outliers(const QuantParams& p) {
    const SparseOutliers& o = p.outliers_data;
    if (p.outliers == 0) {
        require(o.column_start.empty() && o.rows.empty() && o.values.empty(),
                "outlier data on a layer whose format has none");
        return;
    }
    require(o.column_start.size() == size_t(p.n + 1), "outlier column starts hold ", o.column_start.size(),
            " values; expected N + 1 = ", p.n + 1);
    require(o.count() == p.outliers && o.values.size() == o.rows.size(), "outliers hold ", o.rows.size(), " rows and ",
            o.values.size(), " values; the format says ", p.outliers);
    require(o.column_start.front() == 0 && o.column_start.back() == p.outliers, "outlier column starts run from ",
            o.column_start.front(), " to ", o.column_start.back(), "; expected 0 to ", p.outliers);
    for (int64_t c = 0; c < p.n; ++c) {
        const int64_t begin = o.column_start[size_t(c)], end = o.column_start[size_t(c + 1)];
        require(begin <= end && end <= p.outliers, "outlier column starts decrease or pass the count at column ", c);
        for (int64_t i = begin; i < end; ++i) {
            const int32_t row = o.rows[size_t(i)];
            require(row >= 0 && row < p.k, "outlier ", i, " is at row ", row, ", outside 0 .. K-1");
            require(i == begin || row > o.rows[size_t(i - 1)], "outlier rows of column ", c, " are not ascending");
            require(std::isfinite(half_to_float(o.values[size_t(i)])), "outlier ", i, " is not finite");
        }
    }
}

}  // namespace

float SuperBlockScales::scale(const WeightFormat& f, int64_t g, int64_t c) const {
    const int64_t super = g / groups_per_super_block(f);
    return half_to_float(scales[size_t(super * f.n + c)]) * float(scale_codes[size_t(g * f.n + c)]);
}

float SuperBlockScales::offset(const WeightFormat& f, int64_t g, int64_t c) const {
    const int64_t super = g / groups_per_super_block(f);
    return -(half_to_float(mins[size_t(super * f.n + c)]) * float(min_codes[size_t(g * f.n + c)]));
}

void expand_super_block_scales(QuantParams& p) {
    const size_t metadata = size_t(p.num_groups() * p.n);
    p.scales.resize(metadata);
    if (p.float_offsets) p.offsets.resize(metadata);
    expand_super_block_columns(p, 0, p.n);
}

void expand_super_block_columns(QuantParams& p, int64_t first_column, int64_t end_column) {
    for (int64_t g = 0; g < p.num_groups(); ++g)
        for (int64_t c = first_column; c < end_column; ++c) {
            p.scales[size_t(g * p.n + c)] = p.super_block.scale(p, g, c);
            if (p.float_offsets) p.offsets[size_t(g * p.n + c)] = p.super_block.offset(p, g, c);
        }
}

float SecondOrderScales::scale(int64_t n, int64_t g, int64_t c) const {
    const size_t second = size_t(g * column_groups(n) + c / kColumns);
    return half_to_float(scales[second]) * (float(codes[size_t(g * n + c)]) - half_to_float(zeros[second]));
}

SecondOrderScales quantize_second_order(int64_t num_groups, int64_t n, const std::vector<float>& scales) {
    require(scales.size() == size_t(num_groups * n), "quantize_second_order: ", scales.size(), " scales for ",
            num_groups, " x ", n);
    SecondOrderScales s;
    const int64_t column_groups = SecondOrderScales::column_groups(n);
    s.codes.resize(size_t(num_groups * n));
    s.scales.resize(size_t(num_groups * column_groups));
    s.zeros.resize(s.scales.size());
    const float top = float((1 << SecondOrderScales::kBits) - 1);
    for (int64_t g = 0; g < num_groups; ++g)
        for (int64_t cg = 0; cg < column_groups; ++cg) {
            const int64_t c0 = cg * SecondOrderScales::kColumns, c1 = std::min(n, c0 + SecondOrderScales::kColumns);
            float lo = scales[size_t(g * n + c0)], hi = lo;
            for (int64_t c = c0; c < c1; ++c) {
                lo = std::min(lo, scales[size_t(g * n + c)]);
                hi = std::max(hi, scales[size_t(g * n + c)]);
            }
            // Equal scales: step |lo| and a zero that maps code 0 onto the value. A range tiny next
            // to its values (untrained embedding columns) would put the zero -lo/step beyond fp16:
            // the step stays at least |lo| / 2^14 and at fp16's smallest normal, so the zero is
            // finite and the codes still resolve the range.
            constexpr float kMinStep = 6.103515625e-05f, kMaxZero = 16384.0f;
            const float wanted = hi > lo ? (hi - lo) / top : (lo != 0 ? std::fabs(lo) : 1.0f);
            const float step = half_to_float(float_to_half(std::max({wanted, std::fabs(lo) / kMaxZero, kMinStep})));
            const uint16_t zero = float_to_half(-lo / step);
            const size_t second = size_t(g * column_groups + cg);
            s.scales[second] = float_to_half(step);
            s.zeros[second] = zero;
            for (int64_t c = c0; c < c1; ++c) {
                const float code = std::nearbyint(scales[size_t(g * n + c)] / step + half_to_float(zero));
                s.codes[size_t(g * n + c)] = uint8_t(std::clamp(code, 0.0f, top));
            }
        }
    return s;
}

std::vector<float> dequantize_second_order(const SecondOrderScales& s, int64_t num_groups, int64_t n) {
    std::vector<float> scales(size_t(num_groups * n));
    for (int64_t g = 0; g < num_groups; ++g)
        for (int64_t c = 0; c < n; ++c) scales[size_t(g * n + c)] = s.scale(n, g, c);
    return scales;
}

SparseOutliers make_sparse_outliers(int64_t k, int64_t n, std::vector<OutlierEntry> entries) {
    std::sort(entries.begin(), entries.end(), [](const OutlierEntry& a, const OutlierEntry& b) {
        return a.column != b.column ? a.column < b.column : a.row < b.row;
    });
    SparseOutliers o;
    o.column_start.assign(size_t(n + 1), 0);
    for (size_t i = 0; i < entries.size(); ++i) {
        const OutlierEntry& e = entries[i];
        require(e.row >= 0 && e.row < k && e.column >= 0 && e.column < n, "outlier at (", e.row, ", ", e.column,
                ") is outside ", k, " x ", n);
        require(i == 0 || e.row != entries[i - 1].row || e.column != entries[i - 1].column, "outlier at (", e.row,
                ", ", e.column, ") is given twice");
        o.rows.push_back(e.row);
        o.values.push_back(float_to_half(e.value));
        ++o.column_start[size_t(e.column + 1)];
    }
    for (int64_t c = 0; c < n; ++c) o.column_start[size_t(c + 1)] += o.column_start[size_t(c)];
    return o;
}

void validate(const QuantParams& p) {
    validate(p.format());
    const size_t metadata = size_t(p.num_groups() * p.n);
    require(p.scales.size() == metadata, "scales hold ", p.scales.size(), " values; expected ", metadata);
    for (size_t i = 0; i < metadata; ++i) require(std::isfinite(p.scales[i]), "scale ", i, " is not finite");
    if (p.float_offsets) {
        validate_offsets(p);
    } else {
        require(p.offsets.empty(), "float offsets on a layer whose format has integer zero points");
        require(p.zeros.size() == metadata, "zeros hold ", p.zeros.size(), " values; expected ", metadata);
        for (size_t i = 0; i < metadata; ++i) {
            const int width = p.group_width(int64_t(i) / p.n);
            const int value_width = p.has_codebook() ? p.value_bits() : width;
            require(p.zeros[i] <= (1u << value_width), "zero point ", i, " is ", p.zeros[i], ", above 2^", value_width);
        }
    }
    if (p.second_order_scales()) {
        validate_second_order(p);
    } else {
        require(p.second_order.codes.empty() && p.second_order.scales.empty() && p.second_order.zeros.empty(),
                "second-order scales on a layer whose scale type is not second-order");
    }
    if (p.super_block_scales()) {
        validate_super_block(p);
    } else {
        require(p.super_block == SuperBlockScales{}, "super-block scales on a layer whose scale type is not super-block");
    }
    validate_outliers(p);
    if (p.symmetric)
        for (uint16_t z : p.zeros)
            require(z == p.symmetric_zero(), "symmetric layer with zero point ", z, "; expected ", p.symmetric_zero());
    require(p.act_order == !p.row_order.empty(), p.act_order ? "an act-order layer without a row order"
                                                              : "a row order on a layer that is not act-order");
    require(p.permuted_columns == !p.column_order.empty(),
            p.permuted_columns ? "a layer with permuted columns without a column order"
                               : "a column order on a layer whose columns are not permuted");
    if (p.permuted_columns) {
        require(p.column_order.size() == size_t(p.n), "column_order holds ", p.column_order.size(),
                " columns; expected ", p.n);
        std::vector<int32_t> sorted = p.column_order;
        std::sort(sorted.begin(), sorted.end());
        require(sorted.front() >= 0 && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
                "column_order holds a negative or repeated column");
    }
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
    int64_t code_bits = 0, zero_bits = 0;
    for (int64_t g = 0; g < p.num_groups(); ++g) {
        const int64_t rows = std::min(p.k, (g + 1) * p.group_size) - g * p.group_size;
        code_bits += rows * p.n * p.group_width(g);
        // (super-block scales count their min codes and dmin with the scales, below)
        if (!p.symmetric && !p.super_block_scales())
            zero_bits += p.n * (p.float_offsets ? p.scale_bytes() * 8 : p.group_width(g));
    }
    const int64_t metadata = p.num_groups() * p.n;
    int64_t scales = metadata * p.scale_bytes();
    if (p.second_order_scales()) {
        scales = (metadata * SecondOrderScales::kBits + 7) / 8 +
                 p.num_groups() * SecondOrderScales::column_groups(p.n) * 2 * int64_t(sizeof(uint16_t));
    } else if (p.super_block_scales()) {  // scale (and min) codes at their width, fp16 d (and dmin)
        const int64_t per_group = p.float_offsets ? 2 : 1;
        scales = (metadata * per_group * p.scale_code_bits + 7) / 8 +
                 p.k / kSuperBlockRows * p.n * per_group * int64_t(sizeof(uint16_t));
    }
    const int64_t outliers = p.outliers == 0 ? 0
                                             : p.outliers * int64_t(sizeof(uint16_t) + sizeof(int32_t)) +
                                                   (p.n + 1) * int64_t(sizeof(int64_t));
    return (code_bits + 7) / 8 + scales + (zero_bits + 7) / 8 +
           int64_t((p.row_order.size() + p.column_order.size()) * sizeof(int32_t)) + outliers;
}

void validate(const QuantizedMatrix& m) {
    validate(m.params);
    require(m.codes.size() == size_t(m.params.k * m.params.n), "codes hold ", m.codes.size(), " values; expected ",
            m.params.k * m.params.n);
    for (int64_t r = 0; r < m.params.k; ++r) {
        const int width = m.params.group_width(r / m.params.group_size);
        const uint8_t* row = m.codes.data() + r * m.params.n;
        uint8_t highest = 0;  // a row's largest code first (a loop the compiler vectorizes), then the culprit
        for (int64_t c = 0; c < m.params.n; ++c) highest = std::max(highest, row[c]);
        if (highest < (1u << width)) continue;
        for (int64_t c = 0; c < m.params.n; ++c)
            require(row[c] < (1u << width), "code ", int(row[c]), " at row ", r, " exceeds its group's ", width, " bits");
    }
}

}  // namespace qjit
