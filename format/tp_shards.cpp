#include "format/tp_shards.hpp"

#include <numeric>

#include "base/error.hpp"

namespace qjit {

namespace {

// What a shard cannot carry yet: metadata laid out across columns or rows in ways cutting would
// have to rebuild.
void require_shardable(const QuantParams& p) {
    if (p.second_order_scales() || p.outliers > 0 || p.low_rank.present() || p.permuted_columns)
        fail(QJIT_ERROR_UNSUPPORTED, "tensor-parallel shards of ", p.name(),
             p.permuted_columns ? " (already a shard)" : "",
             ": layers with second-order scales, sparse outliers or a compensator are not sharded");
}

}  // namespace

bool is_identity(std::span<const int32_t> order) {
    for (size_t i = 0; i < order.size(); ++i)
        if (order[i] != int32_t(i)) return false;
    return true;
}

std::vector<int32_t> storage_row_order(const QuantParams& p) {
    if (p.act_order) return p.row_order;
    std::vector<int32_t> identity(size_t(p.k));
    std::iota(identity.begin(), identity.end(), 0);
    return identity;
}

QuantizedMatrix select_columns(const QuantizedMatrix& matrix, std::span<const int32_t> columns) {
    const QuantParams& p = matrix.params;
    require_shardable(p);
    require(!columns.empty(), "a column shard needs at least one column");
    const int64_t n = int64_t(columns.size()), groups = p.num_groups();
    QuantizedMatrix shard;
    QuantParams& s = shard.params;
    static_cast<WeightFormat&>(s) = with_shape(p.format(), p.k, n);
    s.row_order = p.row_order;
    s.scales.resize(size_t(groups * n));
    s.zeros.resize(p.zeros.empty() ? 0 : size_t(groups * n));
    s.offsets.resize(p.offsets.empty() ? 0 : size_t(groups * n));
    shard.codes.resize(size_t(p.k * n));
    for (int64_t j = 0; j < n; ++j) {
        const int64_t c = columns[size_t(j)];
        require(c >= 0 && c < p.n, "column ", c, " is outside the matrix's ", p.n);
        for (int64_t g = 0; g < groups; ++g) {
            s.scales[size_t(g * n + j)] = p.scales[size_t(g * p.n + c)];
            if (!s.zeros.empty()) s.zeros[size_t(g * n + j)] = p.zeros[size_t(g * p.n + c)];
            if (!s.offsets.empty()) s.offsets[size_t(g * n + j)] = p.offsets[size_t(g * p.n + c)];
        }
        for (int64_t r = 0; r < p.k; ++r) shard.codes[size_t(r * n + j)] = matrix.codes[size_t(r * p.n + c)];
    }
    if (n != p.n || !is_identity(columns)) {
        s.permuted_columns = true;
        s.column_order.assign(columns.begin(), columns.end());
    }
    validate(shard);  // refuses repeated columns
    return shard;
}

QuantizedMatrix select_storage_rows(const QuantizedMatrix& matrix, int64_t first, int64_t count) {
    const QuantParams& p = matrix.params;
    require_shardable(p);
    require(first >= 0 && count >= 1 && first + count <= p.k, "rows ", first, " .. ", first + count,
            " are outside the matrix's ", p.k);
    const bool one_group = p.per_column();
    require(one_group || (first % p.group_size == 0 && (count % p.group_size == 0 || first + count == p.k)),
            "rows ", first, " .. ", first + count, " are not whole groups of ", p.group_size);
    const int64_t first_group = one_group ? 0 : first / p.group_size;
    QuantizedMatrix shard;
    QuantParams& s = shard.params;
    WeightFormat format = p.format();
    format.act_order = false;
    if (one_group) format.group_size = count;
    if (!p.uniform_bits()) {
        const int64_t groups = (count + format.group_size - 1) / format.group_size;
        format.group_bits.assign(p.group_bits.begin() + first_group, p.group_bits.begin() + first_group + groups);
    }
    static_cast<WeightFormat&>(s) = with_shape(format, count, p.n);
    const size_t metadata_begin = size_t(first_group * p.n);
    const size_t metadata_end = metadata_begin + size_t(s.num_groups() * p.n);
    s.scales.assign(p.scales.begin() + metadata_begin, p.scales.begin() + metadata_end);
    if (!p.zeros.empty()) s.zeros.assign(p.zeros.begin() + metadata_begin, p.zeros.begin() + metadata_end);
    if (!p.offsets.empty()) s.offsets.assign(p.offsets.begin() + metadata_begin, p.offsets.begin() + metadata_end);
    shard.codes.assign(matrix.codes.begin() + first * p.n, matrix.codes.begin() + (first + count) * p.n);
    validate(shard);
    return shard;
}

}  // namespace qjit
