#include "format/weight_format.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "qjit/qjit.h"

namespace qjit {

namespace {

// "4" for a uniform width, "2or4" for the widths a mixed format uses.
std::string widths_name(const WeightFormat& f) {
    if (f.uniform_bits()) return std::to_string(f.bits);
    std::vector<uint8_t> widths = f.group_bits;
    std::sort(widths.begin(), widths.end());
    widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
    std::string name;
    for (uint8_t w : widths) name += (name.empty() ? "" : "or") + std::to_string(w);
    return name;
}

const char* scales_name(ScaleType type) {
    switch (type) {
        case ScaleType::F16: return "";
        case ScaleType::F32: return "_s32";
        case ScaleType::SecondOrder: return "_sq4";
        case ScaleType::SuperBlock: return "_sb";
    }
    return "_s?";
}

std::string base_name(const WeightFormat& f) {
    return concat("q", widths_name(f), f.per_column() ? std::string("col") : concat("g", f.group_size),
                  f.symmetric ? "_sym" : (f.float_offsets ? "_off" : "_asym"), scales_name(f.scale_type),
                  f.super_block_scales() ? std::to_string(f.scale_code_bits) : std::string(),
                  f.has_codebook() ? "_iq4nl" : "", f.outliers > 0 ? "_sp" : "");
}

// ggml's K-quants: 256-row super-blocks of groups of 16 or 32 rows.
void validate_super_block(const WeightFormat& f) {
    require(f.k % kSuperBlockRows == 0, "K = ", f.k, " is not a whole number of ", kSuperBlockRows,
            "-row super-blocks, as super-block scales need");
    require(f.group_size == 16 || f.group_size == 32, "group_size is ", f.group_size,
            "; super-block scales need groups of 16 or 32 rows");
    require(f.uniform_bits(), "super-block scales with mixed group widths are not supported");
    require(f.symmetric || f.float_offsets, "super-block scales need symmetric codes or float offsets (ggml's "
            "K-quants have no integer zero points)");
    if (f.symmetric)
        require(f.scale_code_bits == 4 || f.scale_code_bits == 6 || f.scale_code_bits == 8, "scale_code_bits is ",
                f.scale_code_bits, "; symmetric super-block scales take signed 4-, 6- or 8-bit codes");
    else
        require(f.scale_code_bits == 4 || f.scale_code_bits == 6, "scale_code_bits is ", f.scale_code_bits,
                "; super-block scales with float offsets take unsigned 4- or 6-bit scale and min codes");
}

}  // namespace

std::string WeightFormat::name() const {
    std::string name = base_name(*this) + (act_order ? "_act" : "");
    if (low_rank.present())
        name += low_rank.bits == 16 ? concat("_r", low_rank.rank, "f16") : concat("_r", low_rank.rank, "q", low_rank.bits);
    return name;
}

std::string WeightFormat::kernel_name() const { return base_name(*this); }

const char* scale_type_name(ScaleType type) {
    switch (type) {
        case ScaleType::F16: return "f16";
        case ScaleType::F32: return "f32";
        case ScaleType::SecondOrder: return "sq4";
        case ScaleType::SuperBlock: return "sb";
    }
    return "unknown";
}

const char* codebook_name(Codebook codebook) { return codebook == Codebook::Iq4Nl ? "iq4_nl" : "none"; }

std::optional<Codebook> codebook_named(const std::string& name) {
    for (const Codebook codebook : {Codebook::None, Codebook::Iq4Nl})
        if (name == codebook_name(codebook)) return codebook;
    return std::nullopt;
}

void validate_bits(int bits) {
    require(bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8, "bits is ", bits,
            "; supported: 2, 3, 4, 5, 6, 8");
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
    require(f.scale_type == ScaleType::F16 || f.scale_type == ScaleType::F32 || f.scale_type == ScaleType::SecondOrder ||
                f.scale_type == ScaleType::SuperBlock,
            "scale type ", int(f.scale_type), " is unknown");
    if (f.super_block_scales()) {
        validate_super_block(f);
    } else {
        require(f.scale_code_bits == 0, "scale_code_bits is ", f.scale_code_bits, " on a format without super-block scales");
    }
    if (!f.uniform_bits()) {
        require(f.group_bits.size() == size_t(f.num_groups()), "group_bits holds ", f.group_bits.size(),
                " widths; expected one per group, ", f.num_groups());
        int widest = 0;
        for (uint8_t w : f.group_bits) {
            require(w == 2 || w == 4, "a group width is ", int(w), "; mixed groups are 2 or 4 bits");
            widest = std::max(widest, int(w));
        }
        require(f.bits == widest, "bits is ", f.bits, " with mixed groups; expected the widest group's, ", widest);
        require(!f.symmetric, "mixed group widths need asymmetric zero points");
        require(f.group_size % 32 == 0 && !f.per_column(), "mixed group widths need groups of a multiple of 32 "
                "rows (whole 32-row blocks) and several groups; group_size is ", f.group_size, " for K=", f.k);
    }
    if (f.second_order_scales()) {
        require(!f.symmetric, "second-order scales need asymmetric zero points");
        require(f.bits <= 4, "second-order scales need codes of 4 bits or fewer; bits is ", f.bits);
    }
    if (f.float_offsets) {
        require(!f.symmetric, "float offsets replace zero points; a symmetric format has neither");
        require(f.uniform_bits(), "float offsets with mixed group widths are not supported");
        require(!f.second_order_scales(), "float offsets need fp16, fp32 or super-block scales, not second-order ones");
    }
    if (f.has_codebook()) {
        require(f.codebook == Codebook::Iq4Nl, "codebook ", int(f.codebook), " is unknown");
        require(f.bits == 4 && f.uniform_bits() && f.symmetric && !f.second_order_scales(),
                "a codebook indexes 4-bit symmetric codes of one width (not second-order scales); the format has ",
                f.bits, " bits", f.symmetric ? "" : ", not symmetric");
    }
    require(f.outliers >= 0 && f.outliers <= max_outliers(f.k, f.n), "outliers is ", f.outliers,
            "; expected 0 .. ", max_outliers(f.k, f.n), " (", kMaxOutlierFraction * 100, " % of the weights)");
    if (f.low_rank.present()) {
        require(f.low_rank.rank <= std::min<int64_t>({f.k, f.n, kMaxLowRank}), "low-rank rank is ", f.low_rank.rank,
                "; expected 1 .. min(K, N, ", kMaxLowRank, ")");
        require(f.low_rank.bits == 8 || f.low_rank.bits == 3 || f.low_rank.bits == 16, "low-rank bits is ",
                f.low_rank.bits, "; supported: 8, 3 or 16");
    } else {
        require(f.low_rank.rank == 0 && f.low_rank.bits == 0, "low-rank rank ", f.low_rank.rank, " with bits ",
                f.low_rank.bits, ": a rank must be positive, or both zero for none");
    }
}

WeightFormat with_shape(WeightFormat target, int64_t k, int64_t n) {
    require(k >= 1 && n >= 1, "matrix shape ", k, " x ", n, " is empty");
    target.k = k;
    target.n = n;
    validate(target);
    return target;
}

ScaleType scale_type_of(qjit_dtype dtype) {
    switch (dtype) {
        case QJIT_DTYPE_F16: return ScaleType::F16;
        case QJIT_DTYPE_F32:
        case QJIT_DTYPE_BF16: return ScaleType::F32;
        default: break;
    }
    fail(QJIT_ERROR_INVALID_ARGUMENT, "scale_dtype is ", int(dtype),
         "; expected QJIT_DTYPE_F32 (0), QJIT_DTYPE_F16 (1) or QJIT_DTYPE_BF16 (2)");
}

int64_t max_outliers(int64_t k, int64_t n) { return int64_t(std::ceil(double(k) * double(n) * kMaxOutlierFraction)); }

}  // namespace qjit
