// How a layer's weights are stored: the one description every part of qjit reads (quantizers and
// importers fill it, layer files save it, the CPU and CUDA kernel specs contain it, the tuner keys
// on its name). Data (codes, scales, zero points, permutations) lives beside it in QuantParams and
// QuantizedMatrix (format/quantized_matrix.hpp).
//
//     W[k][n] = scale[g][n] * (code[k][n] - zero[g][n]),   g = k / group_size (k in storage order)
//     W[k][n] = scale[g][n] * code[k][n] + offset[g][n]      (float_offsets: a real-valued offset)
//
// Fields a later format needs are here already, so that adding one is a change to this file, its
// validation and the backends that can run it, not to every stride in the tree. validate() refuses
// what no backend runs yet, saying so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qjit/qjit.h"

namespace qjit {

enum class ScaleType : uint8_t {
    F16,          // fp16 scales (kernels may stream them as fp16)
    F32,          // fp32 scales
    SecondOrder,  // scales quantized again: 4-bit codes in groups of 16 output columns, each such group
                  // with an fp16 scale and zero (format/quantized_matrix.hpp, SecondOrderScales)
    SuperBlock,   // ggml's K-quant scales: each group's scale (and min) an integer code of
                  // scale_code_bits under an fp16 super-scale (and super-min) per 256 rows and column
                  // (format/quantized_matrix.hpp, SuperBlockScales)
};

// A table of what each code stands for (the GGUF IQ4 types' non-uniform levels); None: a code is
// its own value.
enum class Codebook : uint8_t {
    None,
    Iq4Nl,  // 16 signed levels, -127 .. 113 (ggml's kvalues_iq4nl), held as the unsigned bytes level + 128
};

// ggml's IQ4_NL levels: code c of an IQ4_NL or IQ4_XS block stands for kIq4NlLevels[c].
inline constexpr int8_t kIq4NlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// y += (x U) V with U: K x rank and V: rank x N (format/low_rank.hpp holds the data), stored at
// `bits` per value: 8 or 3 (symmetric codes, a scale per column) or 16 (fp16).
struct LowRankTerms {
    int rank = 0;  // 0: none
    int bits = 0;
    bool present() const { return rank > 0; }
    bool operator==(const LowRankTerms&) const = default;
};

// Every field has an initializer, so that designated initializers may name only what they set.
struct WeightFormat {
    int64_t k = 0;                     // rows (input features)
    int64_t n = 0;                     // columns (output features)
    int bits = 4;                      // code width of every K-group (2, 3, 4, 5, 6 or 8); with group_bits, the widest
    std::vector<uint8_t> group_bits{}; // a width per K-group, 2 or 4 (mixed precision); empty: all `bits`
    int64_t group_size = 128;          // rows per group; k when per column
    bool symmetric = false;            // every zero point is 2^(bits-1)
    bool float_offsets = false;        // a real-valued offset per group instead of an integer zero point
                                       // (llama.cpp's Q4_1 and K-quants, HQQ's optimised zeros); stored
                                       // at the scales' type
    ScaleType scale_type = ScaleType::F32;
    int scale_code_bits = 0;           // SuperBlock: width of each group's scale and min code (4, 6 or 8;
                                       // signed when symmetric); else 0
    Codebook codebook = Codebook::None; // 4-bit codes that index a table of levels (symmetric: zero 128)
    bool act_order = false;            // rows are stored permuted (GPTQ desc_act): x is gathered first
    bool permuted_columns = false;     // output j is original column column_order[j] (a tensor-parallel shard's
                                       // columns): kernels compute outputs in that order, as for any layer
    LowRankTerms low_rank{};           // a low-rank compensator
    int64_t outliers = 0;              // sparse fp16 outliers added to W (format/quantized_matrix.hpp)

    bool operator==(const WeightFormat&) const = default;

    // Whole groups plus a partial one, without forming k + group_size (a damaged file's group size
    // may be near INT64_MAX, and its record sizes are computed before the format is refused).
    int64_t num_groups() const { return k / group_size + (k % group_size > 0 ? 1 : 0); }
    bool per_column() const { return k >= 1 && group_size >= k; }  // one group over all rows
    bool uniform_bits() const { return group_bits.empty(); }
    // The code width of K-group g (in storage order).
    int group_width(int64_t g) const { return uniform_bits() ? bits : int(group_bits[size_t(g)]); }
    int max_code() const { return (1 << bits) - 1; }
    bool has_codebook() const { return codebook != Codebook::None; }
    // The value a code stands for in W = scale * (value - zero): the code itself, or with a codebook
    // its level plus 128 (an unsigned byte, so that the symmetric zero 128 gives the level back).
    int value_of(int code) const { return has_codebook() ? kIq4NlLevels[code & 15] + 128 : code; }
    // Bits of those values: the code width, or 8 with a codebook; a symmetric zero is 2^(value_bits - 1).
    int value_bits() const { return has_codebook() ? 8 : bits; }
    int symmetric_zero() const { return 1 << (value_bits() - 1); }
    bool f16_scales() const { return scale_type == ScaleType::F16; }
    bool second_order_scales() const { return scale_type == ScaleType::SecondOrder; }
    bool super_block_scales() const { return scale_type == ScaleType::SuperBlock; }
    // Bytes of one scale stored as is (F16, F32); second-order and super-block scales are
    // SecondOrderScales' and SuperBlockScales'.
    int scale_bytes() const { return f16_scales() ? 2 : 4; }
    // Bytes of one zero point as the CPU kernels stream it: none when symmetric, a byte, or a float
    // offset at the scales' type.
    int zero_point_bytes() const { return symmetric ? 0 : float_offsets ? scale_bytes() : 1; }

    // The name every kernel name, database key, describe string and dump file starts with:
    // q<bits><g<group>|col>_<sym|asym|off> (q2or4 for mixed 2/4-bit groups; off: float offsets), then _s32 for fp32 scales,
    // _sq4 for second-order scales or _sb<scale_code_bits> for super-block scales, _iq4nl for codes that index
    // the IQ4_NL levels, _sp for sparse outliers, _act for act-order rows and
    // _r<rank><q<bits>|f16> for a low-rank compensator, e.g. "q4g128_asym", "q8col_sym_s32",
    // "q3g64_asym_act", "q3g64_asym_r16q8", "q2or4g32_asym_sq4_sp". The parts a quantized-product
    // kernel does not see (the gather before it, the compensator pass after it) are left out of
    // kernel_name(); the outliers are in it, as the product's task adds them.
    std::string name() const;
    // The name of the format a quantized-product kernel computes: name() without _act.
    std::string kernel_name() const;
};

// "f16", "f32", "sq4" or "sb" (describe strings).
const char* scale_type_name(ScaleType type);

// "none" or "iq4_nl": how layer files and pack files name a codebook; and back, nullopt for a name
// that is neither.
const char* codebook_name(Codebook codebook);
std::optional<Codebook> codebook_named(const std::string& name);

// A format with fp16 scales: the kernel specs' default.
inline WeightFormat f16_scaled_format() {
    WeightFormat format;
    format.scale_type = ScaleType::F16;
    return format;
}

// Throws an invalid-argument Error naming the field when the format is not one qjit can store and
// run: bits 2/3/4/5/6/8, a positive group size, a non-empty shape below kMaxDimension, low-rank terms
// of a rank up to min(K, N, 1024) at 8, 3 or 16 bits; mixed widths (2 and 4 bits per group, bits
// the widest, asymmetric, groups of a multiple of 32 rows); second-order scales (asymmetric, bits <= 4);
// float offsets (not symmetric, uniform widths, fp16, fp32 or super-block scales); super-block scales
// (K a multiple of 256, groups of 16 or 32, uniform widths, symmetric with 4-, 6- or 8-bit signed scale
// codes or float offsets with 4- or 6-bit unsigned scale and min codes); a codebook (4-bit, symmetric,
// uniform widths, no second-order scales);
// at most kMaxOutlierFraction of the weights as outliers; no permuted columns (no backend runs them
// yet).
void validate(const WeightFormat& format);

// What a quantizer makes of a k x n matrix: `target` (its caller's format) with that shape, checked by
// validate(). Throws an invalid-argument Error naming the field, "matrix shape" for an empty one.
WeightFormat with_shape(WeightFormat target, int64_t k, int64_t n);

// The scale type of scales rounded to, or stored as, `dtype`: F16 as fp16, F32 and BF16 (exact in
// fp32) as fp32. Throws an invalid-argument Error for another value. The one map from the C dtype.
ScaleType scale_type_of(qjit_dtype dtype);

// K and N stay below 2^31: row indices are stored as int32.
inline constexpr int64_t kMaxDimension = int64_t(1) << 31;
// A layer holds at most 2^36 weights (Llama-2-70B's largest holds 2^27.8): shapes beyond it are
// refused before anything is allocated for them.
inline constexpr int64_t kMaxWeights = int64_t(1) << 36;

// Sparse outliers are at most this fraction of a layer's weights (rounded up).
inline constexpr double kMaxOutlierFraction = 0.005;
int64_t max_outliers(int64_t k, int64_t n);

// Rows of one super-block of super-block scales (ggml's QK_K).
inline constexpr int64_t kSuperBlockRows = 256;

// The largest compensator rank qjit stores (MiLo's ranks reach 512 on 4096-wide layers).
inline constexpr int kMaxLowRank = 1024;

// Throws an invalid-argument Error naming the limit unless 1 <= K, N < 2^31 and K * N <= 2^36.
void validate_shape(int64_t k, int64_t n);

// Checks bits against what qjit supports.
void validate_bits(int bits);
// Maps a user group size (QJIT_GROUP_PER_COLUMN or 16..256) to rows per group for k rows.
int64_t resolve_group_size(int group_size, int64_t k);

}  // namespace qjit
