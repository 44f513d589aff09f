#include "format/weight_format.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "qjit/qjit.h"

namespace qjit {

namespace {

std::string base_name(const WeightFormat& f) {
    return concat("q", f.bits, f.per_column() ? std::string("col") : concat("g", f.group_size),
                  f.symmetric ? "_sym" : "_asym", f.f16_scales() ? "" : "_s32");
}

}  // namespace

std::string WeightFormat::name() const {
    std::string name = base_name(*this) + (act_order ? "_act" : "");
    if (low_rank.present())
        name += low_rank.bits == 16 ? concat("_r", low_rank.rank, "f16") : concat("_r", low_rank.rank, "q", low_rank.bits);
    return name;
}

std::string WeightFormat::kernel_name() const { return base_name(*this); }

void validate_bits(int bits) {
    require(bits == 2 || bits == 3 || bits == 4 || bits == 8, "bits is ", bits, "; supported: 2, 3, 4, 8");
}

int64_t resolve_group_size(int group_size, int64_t k) {
    if (group_size == QJIT_GROUP_PER_COLUMN) return k;
    require(group_size == 16 || group_size == 32 || group_size == 64 || group_size == 128 || group_size == 256,
            "group_size is ", group_size, "; supported: 16, 32, 64, 128, 256 or QJIT_GROUP_PER_COLUMN (-1)");
    return group_size;
}

void validate_shape(int64_t k, int64_t n) {
    require(k >= 1 && k < kMaxDimension, "k is ", k, "; expected 1 .. 2^31 - 1");
    require(n >= 1 && n < kMaxDimension, "n is ", n, "; expected 1 .. 2^31 - 1");
    require(k <= kMaxWeights / n, "k x n = ", k, " x ", n, " is more than the 2^36 weights a layer may hold");
}

void validate(const WeightFormat& f) {
    validate_shape(f.k, f.n);
    validate_bits(f.bits);
    require(f.group_size >= 1, "group_size ", f.group_size, " must be positive");
    require(f.scale_type == ScaleType::F16 || f.scale_type == ScaleType::F32, "scale type ", int(f.scale_type),
            " is unknown");
    // Described already, run by no backend yet.
    require(f.uniform_bits(), "mixed bit widths per group are not supported yet");
    require(!f.permuted_columns, "permuted output columns are not supported yet");
    if (f.low_rank.present()) {
        require(f.low_rank.rank <= std::min<int64_t>({f.k, f.n, kMaxLowRank}), "low-rank rank is ", f.low_rank.rank,
                "; expected 1 .. min(K, N, ", kMaxLowRank, ")");
        require(f.low_rank.bits == 8 || f.low_rank.bits == 3 || f.low_rank.bits == 16, "low-rank bits is ",
                f.low_rank.bits, "; supported: 8, 3 or 16");
    } else {
        require(f.low_rank.rank == 0 && f.low_rank.bits == 0, "low-rank rank ", f.low_rank.rank, " with bits ",
                f.low_rank.bits, ": a rank must be positive, or both zero for none");
    }
    require(f.outliers == 0, "sparse outliers are not supported yet");
}

}  // namespace qjit
