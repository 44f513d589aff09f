#include "format/gptq_import.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.hpp"
#include "base/half.hpp"

namespace qjit {

namespace {

void check_arguments(int64_t k, int64_t n, const qjit_gptq_tensors& tensors) {
    validate_shape(k, n);
    require(tensors.bits == 2 || tensors.bits == 3 || tensors.bits == 4 || tensors.bits == 8, "bits is ", tensors.bits,
            "; GPTQ checkpoints hold 2, 3, 4 or 8 bits");
    require(tensors.qweight != nullptr, "tensors.qweight is NULL");
    require(tensors.qzeros != nullptr, "tensors.qzeros is NULL");
    require(tensors.scales != nullptr, "tensors.scales is NULL");
    const qjit_dtype scale_dtype = tensors.scale_dtype;  // the *_MAX_ENUM member makes any int a valid value
    require(scale_dtype == QJIT_DTYPE_F16 || scale_dtype == QJIT_DTYPE_BF16 || scale_dtype == QJIT_DTYPE_F32,
            "tensors.scale_dtype is ", int(scale_dtype),
            "; expected QJIT_DTYPE_F16 (1), QJIT_DTYPE_BF16 (2) or QJIT_DTYPE_F32 (0)");
    const qjit_gptq_format checkpoint_format = tensors.checkpoint_format;
    require(checkpoint_format == QJIT_GPTQ_V1 || checkpoint_format == QJIT_GPTQ_V2, "tensors.checkpoint_format is ",
            int(checkpoint_format), "; expected QJIT_GPTQ_V1 (1) or QJIT_GPTQ_V2 (2)");
}

// Value `index` of a little-endian bitstream of `bits`-bit values held in int32 words that lie
// `word_stride` elements apart in memory (a column of qweight: stride N; a row of qzeros: stride 1).
uint32_t read_packed_value(const int32_t* words, int64_t word_stride, int bits, int64_t index) {
    const int64_t first_bit = index * bits;
    const int64_t word = first_bit / 32;
    const int shift = int(first_bit % 32);
    uint64_t window = uint32_t(words[word * word_stride]);
    if (shift + bits > 32)  // the value continues in the next word (3-bit values 10 and 21 of every 32)
        window |= uint64_t(uint32_t(words[(word + 1) * word_stride])) << 32;
    return uint32_t(window >> shift) & ((1u << bits) - 1u);
}

std::vector<float> read_scales(const qjit_gptq_tensors& tensors, int64_t groups, int64_t n) {
    std::vector<float> scales(size_t(groups * n));
    const auto* halves = static_cast<const uint16_t*>(tensors.scales);
    switch (tensors.scale_dtype) {  // outside the loops, which then vectorize
        case QJIT_DTYPE_F16: std::transform(halves, halves + scales.size(), scales.begin(), half_to_float); break;
        case QJIT_DTYPE_BF16: std::transform(halves, halves + scales.size(), scales.begin(), bf16_to_float); break;
        default: std::copy_n(static_cast<const float*>(tensors.scales), scales.size(), scales.begin()); break;
    }
    const auto not_finite = std::find_if(scales.begin(), scales.end(), [](float s) { return !std::isfinite(s); });
    if (not_finite != scales.end()) {
        const int64_t i = not_finite - scales.begin();
        fail(QJIT_ERROR_INVALID_ARGUMENT, "tensors.scales[", i / n, "][", i % n, "] is not finite");
    }
    return scales;
}

// One group's qzeros words as the v2 convention would store them. v1 (see the header) stored each
// word as (packed zeros) - C with borrows between fields, so adding C to the whole word undoes it
// exactly; 3-bit fields straddle words, so there the tools subtract 1 per field, modulo 8.
std::vector<int32_t> v2_zero_words(const int32_t* words, int64_t word_count, int bits, int64_t n,
                                   qjit_gptq_format format) {
    std::vector<int32_t> v2(words, words + word_count);
    if (format == QJIT_GPTQ_V2) return v2;
    if (bits != 3) {
        const uint32_t one_per_field = bits == 2 ? 0x55555555u : bits == 4 ? 0x11111111u : 0x01010101u;
        for (int32_t& word : v2) word = int32_t(uint32_t(word) + one_per_field);
        return v2;
    }
    std::fill(v2.begin(), v2.end(), 0);
    for (int64_t c = 0; c < n; ++c) {
        const uint32_t zero = (read_packed_value(words, 1, bits, c) + 1u) & 7u;
        for (int bit = 0; bit < 3; ++bit)  // written bit by bit: a field may straddle two words
            if ((zero >> bit) & 1u) v2[size_t((3 * c + bit) / 32)] |= int32_t(1u << ((3 * c + bit) % 32));
    }
    return v2;
}

std::vector<uint16_t> read_zeros(const qjit_gptq_tensors& tensors, int64_t groups, int64_t n) {
    const int64_t words_per_group = (n * tensors.bits + 31) / 32;
    std::vector<uint16_t> zeros(size_t(groups * n));
    for (int64_t g = 0; g < groups; ++g) {
        const std::vector<int32_t> group_words = v2_zero_words(tensors.qzeros + g * words_per_group, words_per_group,
                                                               tensors.bits, n, tensors.checkpoint_format);
        for (int64_t c = 0; c < n; ++c)
            zeros[size_t(g * n + c)] = uint16_t(read_packed_value(group_words.data(), 1, tensors.bits, c));
    }
    return zeros;
}

// The group of every row: g_idx[row] (checked to be a GPTQ grouping), or row / rows_per_group.
std::vector<int32_t> read_row_groups(const int32_t* g_idx, int64_t k, int64_t rows_per_group, int64_t groups) {
    std::vector<int32_t> group_of_row(static_cast<size_t>(k));
    std::vector<int64_t> rows_in_group(size_t(groups), 0);
    for (int64_t row = 0; row < k; ++row) {
        const int64_t group = g_idx != nullptr ? g_idx[row] : row / rows_per_group;
        require(group >= 0 && group < groups, "tensors.g_idx[", row, "] is ", group, "; K = ", k, " rows in groups of ",
                rows_per_group, " make groups 0..", groups - 1);
        group_of_row[size_t(row)] = int32_t(group);
        ++rows_in_group[size_t(group)];
    }
    for (int64_t group = 0; group < groups; ++group) {
        const int64_t expected = group + 1 < groups ? rows_per_group : k - (groups - 1) * rows_per_group;
        require(rows_in_group[size_t(group)] == expected, "tensors.g_idx puts ", rows_in_group[size_t(group)],
                " rows in group ", group, "; with K = ", k, " rows in groups of ", rows_per_group, ", group ", group,
                " must hold ", expected);
    }
    return group_of_row;
}

// The stable argsort of the row groups: rows group by group, in their original order within each.
// Empty when that is the identity (no act-order). Every group is full (checked above), so group g
// starts at storage row g * rows_per_group.
std::vector<int32_t> sort_rows_by_group(const std::vector<int32_t>& group_of_row, int64_t rows_per_group,
                                        int64_t groups) {
    std::vector<int32_t> row_order(group_of_row.size());
    std::vector<int64_t> next_slot_of_group(static_cast<size_t>(groups));
    for (int64_t g = 0; g < groups; ++g) next_slot_of_group[size_t(g)] = g * rows_per_group;
    bool identity = true;
    for (size_t row = 0; row < group_of_row.size(); ++row) {
        const int64_t slot = next_slot_of_group[size_t(group_of_row[row])]++;
        row_order[size_t(slot)] = int32_t(row);
        identity = identity && slot == int64_t(row);
    }
    if (identity) row_order.clear();
    return row_order;
}

// Codes [k][n] in storage order: storage row r holds original row row_order[r] (r when empty).
std::vector<uint8_t> read_codes(const int32_t* qweight, int bits, int64_t k, int64_t n,
                                const std::vector<int32_t>& row_order) {
    std::vector<uint8_t> codes(size_t(k * n));
    for (int64_t r = 0; r < k; ++r) {
        const int64_t original_row = row_order.empty() ? r : row_order[size_t(r)];
        for (int64_t c = 0; c < n; ++c)
            codes[size_t(r * n + c)] = uint8_t(read_packed_value(qweight + c, n, bits, original_row));
    }
    return codes;
}

}  // namespace

QuantParams import_gptq_params(int64_t k, int64_t n, const qjit_gptq_tensors& tensors) {
    check_arguments(k, n, tensors);
    QuantParams p;
    p.k = k;
    p.n = n;
    p.bits = tensors.bits;
    p.group_size = resolve_group_size(tensors.group_size, k);
    p.scale_type = scale_type_of(tensors.scale_dtype);
    const int64_t groups = p.num_groups();
    p.scales = read_scales(tensors, groups, n);
    p.zeros = read_zeros(tensors, groups, n);
    const uint16_t middle = uint16_t(1u << (p.bits - 1));
    p.symmetric = std::all_of(p.zeros.begin(), p.zeros.end(), [&](uint16_t zero) { return zero == middle; });
    const std::vector<int32_t> group_of_row = read_row_groups(tensors.g_idx, k, p.group_size, groups);
    p.row_order = sort_rows_by_group(group_of_row, p.group_size, groups);
    p.act_order = !p.row_order.empty();
    validate(p);
    return p;
}

QuantizedMatrix import_gptq(int64_t k, int64_t n, const qjit_gptq_tensors& tensors) {
    QuantizedMatrix result{import_gptq_params(k, n, tensors), {}};
    result.codes = read_codes(tensors.qweight, result.params.bits, k, n, result.params.row_order);
    validate(result);
    return result;
}

}  // namespace qjit
