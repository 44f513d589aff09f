#include "io/gguf_import.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "format/gguf_blocks.hpp"

namespace qjit {

namespace {

using namespace gguf_blocks;

// Why each mapping is exact: every product ggml forms (an fp16 d or dmin times a small integer,
// then that times a code) is exact in fp32 (at most 11 + 7 + 6 significant bits), so the only
// rounding is ggml's final addition or subtraction of a min, and the oracle (format/reference.cpp,
// compiled without contraction) forms the same products and the same sum (the K-quants' scales
// and offsets are SuperBlockScales' d * sc and -(dmin * m), the same fp32 operations):
//   scale * (code - zero): code - zero is ggml's signed code exactly, and the product is ggml's
//     (multiplication commutes: Q8_0's x * d is d * x);
//   scale * code + offset: the scale is ggml's fp32 product d * sc, computed here as numpy
//     computes it, so scale * code is ggml's dl * q; the offset is m (Q4_1, Q5_1) or -(dmin * m),
//     and x - y is x + (-y) in IEEE 754, signed zeros included.

// One block in qjit's terms: a code per value and, per group of its values, a scale and (float
// offsets only) an offset, or for the K-quants their integer codes under the fp16 super-scale d
// (and super-min dmin). Integer zero points are the type's, the same for every group.
struct UnpackedBlock {
    uint8_t codes[kSuperBlock];
    float scales[kSuperBlock / 16];
    float offsets[kSuperBlock / 16];
    uint16_t d, dmin;
    int8_t scale_codes[kSuperBlock / 16];
    uint8_t min_codes[kSuperBlock / 16];
};

using BlockUnpacker = void (*)(const uint8_t* block, UnpackedBlock& out);

struct Mapping {
    GgmlType type;
    int bits;             // qjit's code width
    int group;            // values per scale
    ScaleType scale_type; // F16 where ggml's scale is an fp16 field itself, SuperBlock for the K-quants
    int scale_code_bits;  // SuperBlock: the width of ggml's sub-block scales (and mins)
    Codebook codebook;    // Iq4Nl: codes index ggml's IQ4_NL levels
    bool float_offsets;
    int zero;             // every group's integer zero point (without float offsets)
    const char* how;      // what the format's name leaves out
    BlockUnpacker unpack;
};

// W = d * (q - 8).
void unpack_q4_0(const uint8_t* block, UnpackedBlock& out) {
    out.scales[0] = half_at(block + Q4_0::d);
    nibble_codes(block + Q4_0::qs, out.codes);
}

// W = d * q + m.
void unpack_q4_1(const uint8_t* block, UnpackedBlock& out) {
    out.scales[0] = half_at(block + Q4_1::d);
    out.offsets[0] = half_at(block + Q4_1::m);
    nibble_codes(block + Q4_1::qs, out.codes);
}

// W = d * (q - 16), q of 5 bits.
void unpack_q5_0(const uint8_t* block, UnpackedBlock& out) {
    out.scales[0] = half_at(block + Q5_0::d);
    const uint32_t qh = u32_at(block + Q5_0::qh);
    for (int i = 0; i < 32; ++i) out.codes[i] = uint8_t(five_bit_code(block + Q5_0::qs, qh, i));
}

// W = d * q + m, q of 5 bits.
void unpack_q5_1(const uint8_t* block, UnpackedBlock& out) {
    out.scales[0] = half_at(block + Q5_1::d);
    out.offsets[0] = half_at(block + Q5_1::m);
    const uint32_t qh = u32_at(block + Q5_1::qh);
    for (int i = 0; i < 32; ++i) out.codes[i] = uint8_t(five_bit_code(block + Q5_1::qs, qh, i));
}

// W = x * d for int8 x: the code x + 128 less zero 128 is x.
void unpack_q8_0(const uint8_t* block, UnpackedBlock& out) {
    out.scales[0] = half_at(block + Q8_0::d);
    for (int i = 0; i < 32; ++i) out.codes[i] = uint8_t(q8_0_biased_code(block + Q8_0::qs, i));
}

// W = (d * sc) * q - (dmin * m) per 16 values.
void unpack_q2_k(const uint8_t* block, UnpackedBlock& out) {
    out.d = u16_at(block + Q2_K::d);
    out.dmin = u16_at(block + Q2_K::dmin);
    for (int s = 0; s < 16; ++s) {
        out.scale_codes[s] = int8_t(q2_k_scale(block + Q2_K::scales, s));
        out.min_codes[s] = uint8_t(q2_k_min(block + Q2_K::scales, s));
    }
    for (int i = 0; i < kSuperBlock; ++i) out.codes[i] = uint8_t(two_bit_code(block + Q2_K::qs, i));
}

// W = (d * (sc - 32)) * (q2 - 4 * !hbit) per 16 values: the code q2 | hbit << 2 less zero 4 is
// that factor.
void unpack_q3_k(const uint8_t* block, UnpackedBlock& out) {
    out.d = u16_at(block + Q3_K::d);
    for (int s = 0; s < 16; ++s) out.scale_codes[s] = int8_t(q3_k_scale(block + Q3_K::scales, s));
    for (int i = 0; i < kSuperBlock; ++i)
        out.codes[i] = uint8_t(two_bit_code(block + Q3_K::qs, i) | high_bit(block + Q3_K::hmask, i) << 2);
}

// W = (d * sc) * q - (dmin * m) per 32 values; Q5_K's q has a fifth bit.
template <bool FifthBit>
void unpack_q4_q5_k(const uint8_t* block, UnpackedBlock& out) {
    static_assert(Q4_K::d == Q5_K::d && Q4_K::dmin == Q5_K::dmin && Q4_K::scales == Q5_K::scales);
    out.d = u16_at(block + Q4_K::d);
    out.dmin = u16_at(block + Q4_K::dmin);
    for (int j = 0; j < 8; ++j) {
        int scale = 0, min = 0;
        k4_scale_min(block + Q4_K::scales, j, &scale, &min);
        out.scale_codes[j] = int8_t(scale);
        out.min_codes[j] = uint8_t(min);
    }
    const uint8_t* qs = block + (FifthBit ? Q5_K::qs : Q4_K::qs);
    for (int i = 0; i < kSuperBlock; ++i)
        out.codes[i] = uint8_t(k4_nibble(qs, i) | (FifthBit ? high_bit(block + Q5_K::qh, i) << 4 : 0));
}

// W = d * level[q]: the value level[q] + 128 less zero 128 is the level.
void unpack_iq4_nl(const uint8_t* block, UnpackedBlock& out) {
    out.scales[0] = half_at(block + IQ4_NL::d);
    nibble_codes(block + IQ4_NL::qs, out.codes);
}

// W = (d * (sc - 32)) * level[q] per 32 values.
void unpack_iq4_xs(const uint8_t* block, UnpackedBlock& out) {
    out.d = u16_at(block + IQ4_XS::d);
    for (int j = 0; j < 8; ++j) out.scale_codes[j] = int8_t(iq4_xs_scale(block, j));
    for (int j = 0; j < 8; ++j) nibble_codes(block + IQ4_XS::qs + 16 * j, out.codes + 32 * j);
}

// W = (d * sc) * (q - 32) per 16 values, q of 6 bits.
void unpack_q6_k(const uint8_t* block, UnpackedBlock& out) {
    out.d = u16_at(block + Q6_K::d);
    for (int s = 0; s < 16; ++s) out.scale_codes[s] = int8_t(q6_k_scale(block + Q6_K::scales, s));
    for (int i = 0; i < kSuperBlock; ++i) out.codes[i] = uint8_t(q6_k_code(block + Q6_K::ql, block + Q6_K::qh, i));
}

// Each type at its own bytes: 5- and 6-bit codes at their width (bit planes), the K-quants' scales
// as ggml holds them, integer codes under an fp16 super-scale per 256 values (SuperBlock).
constexpr ScaleType F16 = ScaleType::F16, SB = ScaleType::SuperBlock;
constexpr Codebook NONE = Codebook::None, IQ4 = Codebook::Iq4Nl;
constexpr Mapping kMappings[] = {
    {GgmlType::Q4_0, 4, 32, F16, 0, NONE, false, 8, "scale d, zero 8", unpack_q4_0},
    {GgmlType::Q4_1, 4, 32, F16, 0, NONE, true, 0, "scale d, offset m", unpack_q4_1},
    {GgmlType::Q5_0, 5, 32, F16, 0, NONE, false, 16, "scale d, zero 16", unpack_q5_0},
    {GgmlType::Q5_1, 5, 32, F16, 0, NONE, true, 0, "scale d, offset m", unpack_q5_1},
    {GgmlType::Q8_0, 8, 32, F16, 0, NONE, false, 128, "int8 codes plus 128, scale d, zero 128", unpack_q8_0},
    {GgmlType::Q2_K, 2, 16, SB, 4, NONE, true, 0, "scale d * sc, offset -(dmin * m)", unpack_q2_k},
    {GgmlType::Q3_K, 3, 16, SB, 6, NONE, false, 4, "scale d * (sc - 32), zero 4", unpack_q3_k},
    {GgmlType::Q4_K, 4, 32, SB, 6, NONE, true, 0, "scale d * sc, offset -(dmin * m)", unpack_q4_q5_k<false>},
    {GgmlType::Q5_K, 5, 32, SB, 6, NONE, true, 0, "scale d * sc, offset -(dmin * m)", unpack_q4_q5_k<true>},
    {GgmlType::Q6_K, 6, 16, SB, 8, NONE, false, 32, "scale d * sc, zero 32", unpack_q6_k},
    {GgmlType::IQ4_NL, 4, 32, F16, 0, IQ4, false, 128, "scale d, IQ4_NL levels plus 128, zero 128", unpack_iq4_nl},
    {GgmlType::IQ4_XS, 4, 32, SB, 6, IQ4, false, 128, "scale d * (sc - 32), IQ4_NL levels plus 128, zero 128",
     unpack_iq4_xs},
};

const Mapping* mapping_of(GgmlType type) {
    for (const Mapping& mapping : kMappings)
        if (mapping.type == type) return &mapping;
    return nullptr;
}

std::string imported_type_names() {
    std::string names;
    for (size_t i = 0; i < std::size(kMappings); ++i)
        names += (i == 0 ? "" : i + 1 == std::size(kMappings) ? " and " : ", ") + ggml_type_name(kMappings[i].type);
    return names;
}

const Mapping& require_mapping(GgmlType type) {
    if (const Mapping* mapping = mapping_of(type)) return *mapping;
    const bool dense = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
    fail(QJIT_ERROR_UNSUPPORTED, "importing ggml ", ggml_type_name(type), " tensors is not supported",
         dense ? " (they are not quantized: quantize them with qjit_linear_create_from_f32, or run them dense)" : "",
         "; qjit imports ", imported_type_names());
}

// Columns whose blocks are unpacked together: the transposed writes of a tile share cache lines.
constexpr int64_t kColumnTile = 64;

}  // namespace

bool gguf_import_supported(GgmlType type) { return mapping_of(type) != nullptr; }

WeightFormat gguf_import_format(GgmlType type, int64_t k, int64_t n) {
    const Mapping& m = require_mapping(type);
    WeightFormat format{.k = k,
                        .n = n,
                        .bits = m.bits,
                        .group_size = m.group,
                        .float_offsets = m.float_offsets,
                        .scale_type = m.scale_type,
                        .scale_code_bits = m.scale_code_bits,
                        .codebook = m.codebook};
    format.symmetric = !m.float_offsets && m.zero == format.symmetric_zero();
    return format;
}

std::string gguf_import_name(GgmlType type) {
    return concat(ggml_type_name(type), " as ", gguf_import_format(type).name(), " (", require_mapping(type).how, ")");
}

namespace {

// The checks every import makes; the type's block.
GgmlBlock checked_block(GgmlType type, const uint8_t* data, size_t bytes, int64_t k, int64_t n) {
    const std::string type_name = ggml_type_name(type);
    require(data != nullptr, "data is NULL");
    validate_shape(k, n);
    GgmlBlock block;
    ggml_block_of(type, &block);  // every imported type has one
    require(k % block.values == 0, "k = ", k, " is not a whole number of ", type_name, " blocks (", block.values,
            " values each)");
    // At most 2^36 weights at under 2 bytes each (validate_shape): no overflow.
    const uint64_t expected = uint64_t(n) * uint64_t(k / block.values) * uint64_t(block.bytes);
    require(bytes == expected, "a ", k, " x ", n, " ", type_name, " tensor holds N * (K / ", block.values, ") * ",
            block.bytes, " = ", expected, " bytes; ", bytes, " were given");
    return block;
}

// The params of a k x n tensor of `mapping`'s type: the format, every zero point, and room for the
// scales and offsets.
QuantParams params_shell(const Mapping& mapping, GgmlType type, int64_t k, int64_t n) {
    QuantParams p;
    static_cast<WeightFormat&>(p) = gguf_import_format(type, k, n);
    const size_t metadata = size_t(p.num_groups() * n);
    p.scales.resize(metadata);
    if (p.float_offsets)
        p.offsets.resize(metadata);
    else
        p.zeros.assign(metadata, uint16_t(mapping.zero));
    if (p.super_block_scales()) {
        const size_t supers = size_t(k / kSuperBlockRows * n);
        p.super_block.scale_codes.resize(metadata);
        p.super_block.scales.resize(supers);
        if (p.float_offsets) {
            p.super_block.min_codes.resize(metadata);
            p.super_block.mins.resize(supers);
        }
    }
    return p;
}

// Unpacks block `b` of column `c` and stores its groups' scales and offsets in p.
void unpack_column_block(const Mapping& mapping, const GgmlBlock& block, const uint8_t* data, int64_t b, int64_t c,
                         QuantParams& p, UnpackedBlock& unpacked) {
    const int64_t row_blocks = p.k / block.values, block_groups = block.values / mapping.group;
    mapping.unpack(data + (c * row_blocks + b) * block.bytes, unpacked);
    bool finite = true;
    if (p.super_block_scales()) {  // a K-quant block is one super-block
        SuperBlockScales& s = p.super_block;
        s.scales[size_t(b * p.n + c)] = unpacked.d;
        finite = std::isfinite(half_to_float(unpacked.d));
        if (p.float_offsets) {
            s.mins[size_t(b * p.n + c)] = unpacked.dmin;
            finite = finite && std::isfinite(half_to_float(unpacked.dmin));
        }
    }
    for (int64_t s = 0; s < block_groups; ++s) {
        const size_t meta = size_t((b * block_groups + s) * p.n + c);
        if (p.super_block_scales()) {
            p.super_block.scale_codes[meta] = unpacked.scale_codes[s];
            if (p.float_offsets) p.super_block.min_codes[meta] = unpacked.min_codes[s];
            continue;
        }
        p.scales[meta] = unpacked.scales[s];
        if (p.float_offsets) p.offsets[meta] = unpacked.offsets[s];
        finite = finite && std::isfinite(p.scales[meta]) && (!p.float_offsets || std::isfinite(p.offsets[meta]));
    }
    if (!finite)
        fail(QJIT_ERROR_INVALID_ARGUMENT, ggml_type_name(mapping.type), " row ", c, ", block ", b,
             ": an fp16 scale field (d, m or dmin) is infinite or NaN, so ggml's weights are not finite; qjit "
             "stores finite scales only");
}

}  // namespace

QuantizedMatrix import_gguf_matrix(GgmlType type, const uint8_t* data, size_t bytes, int64_t k, int64_t n) {
    const Mapping& mapping = require_mapping(type);
    const GgmlBlock block = checked_block(type, data, bytes, k, n);
    QuantizedMatrix matrix{params_shell(mapping, type, k, n), {}};
    matrix.codes.resize(size_t(k * n));
    UnpackedBlock unpacked;
    for (int64_t c0 = 0; c0 < n; c0 += kColumnTile) {
        const int64_t c1 = std::min(n, c0 + kColumnTile);
        for (int64_t b = 0; b < k / block.values; ++b)
            for (int64_t c = c0; c < c1; ++c) {
                unpack_column_block(mapping, block, data, b, c, matrix.params, unpacked);
                uint8_t* codes = matrix.codes.data() + b * block.values * n + c;
                for (int64_t i = 0; i < block.values; ++i) codes[i * n] = unpacked.codes[i];
            }
    }
    if (matrix.params.super_block_scales()) expand_super_block_columns(matrix.params, 0, n);  // sized by the shell
    validate(matrix.params);  // the codes are within their width by construction: each unpacker masks its bits
    return matrix;
}

QuantParams import_gguf_params_shell(GgmlType type, const uint8_t* data, size_t bytes, int64_t k, int64_t n) {
    const Mapping& mapping = require_mapping(type);
    checked_block(type, data, bytes, k, n);
    return params_shell(mapping, type, k, n);
}

void import_gguf_panels(GgmlType type, const uint8_t* data, int64_t first_panel, int64_t end_panel, QuantParams& params,
                        PackedCodes& codes) {
    const Mapping& mapping = require_mapping(type);
    GgmlBlock block;
    ggml_block_of(type, &block);
    const int64_t panel = codes.panel_columns, sub_blocks = block.values / PackedCodes::kBlockRows;
    UnpackedBlock unpacked;
    uint32_t words[8];
    for (int64_t index = first_panel; index < end_panel; ++index) {
        const int64_t c0 = index * panel, c1 = std::min(params.n, c0 + panel);
        uint32_t* panel_words = codes.words.data() + index * codes.panel_words();
        // The columns past N in the last panel: zero codes (the packer's padding).
        for (int64_t w = 0; w < codes.column_words() && c1 - c0 < panel; ++w)
            std::fill(panel_words + w * panel + (c1 - c0), panel_words + (w + 1) * panel, 0u);
        for (int64_t c = c0; c < c1; ++c)
            for (int64_t b = 0; b < params.k / block.values; ++b) {
                unpack_column_block(mapping, block, data, b, c, params, unpacked);
                for (int64_t s = 0; s < sub_blocks; ++s) {
                    pack_column_block(unpacked.codes + s * PackedCodes::kBlockRows, mapping.bits, words);
                    uint32_t* at = panel_words + codes.block_start(b * sub_blocks + s) * panel + (c - c0);
                    for (int w = 0; w < mapping.bits; ++w) at[w * panel] = words[w];
                }
            }
        if (params.super_block_scales()) expand_super_block_columns(params, c0, c1);  // sized by the shell
    }
}

}  // namespace qjit
