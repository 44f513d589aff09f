#include "format/neuron_record.hpp"

#include <cstring>

#include "base/error.hpp"
#include "base/half.hpp"
#include "format/code_planes.hpp"

namespace qjit {

int64_t NeuronVectorLayout::code_words() const {
    return coding == VectorCoding::Quantized ? qjit::column_words(format) : 0;
}
int64_t NeuronVectorLayout::scale_bytes() const {
    return coding == VectorCoding::Quantized ? format.num_groups() * format.scale_bytes() : 0;
}
int64_t NeuronVectorLayout::zero_bytes() const {
    return coding == VectorCoding::Quantized ? format.num_groups() * format.zero_point_bytes() : 0;
}
int64_t NeuronVectorLayout::value_bytes() const { return coding == VectorCoding::F16 ? 2 * format.k : 0; }
int64_t NeuronVectorLayout::bytes() const { return code_words() * 4 + scale_bytes() + zero_bytes() + value_bytes(); }

NeuronVectorLayout quantized_vector_layout(WeightFormat format, int64_t d_model) {
    require(format.uniform_bits(), "neuron vector format ", format.name(), ": mixed widths are not supported");
    require(!format.second_order_scales(), "neuron vector format ", format.name(),
            ": second-order scales are not supported");
    require(!format.super_block_scales(), "neuron vector format ", format.name(), ": super-block scales are not supported");
    require(!format.has_codebook(), "neuron vector format ", format.name(), ": a codebook is not supported");
    require(format.bits != 5 && format.bits != 6, "neuron vector format ", format.name(),
            ": bits must be 2, 3, 4 or 8 (the sparse FFN kernels' widths)");
    require(!format.act_order, "neuron vector format ", format.name(), ": act-order is not supported");
    require(!format.low_rank.present(), "neuron vector format ", format.name(), ": a compensator is not supported");
    require(format.outliers == 0, "neuron vector format ", format.name(), ": outliers are not supported");
    NeuronVectorLayout layout;
    layout.format = with_shape(std::move(format), d_model, 1);
    return layout;
}

NeuronVectorLayout f16_vector_layout(int64_t d_model) {
    require(d_model >= 1 && d_model < kMaxDimension, "neuron vector: d_model ", d_model, " out of range");
    NeuronVectorLayout layout;
    layout.coding = VectorCoding::F16;
    layout.format.k = d_model;
    layout.format.n = 1;
    return layout;
}

namespace {

void store_scale(const WeightFormat& format, float value, uint8_t* out) {
    if (format.f16_scales()) {
        const uint16_t h = float_to_half(value);
        std::memcpy(out, &h, 2);
    } else {
        std::memcpy(out, &value, 4);
    }
}

float load_scale(const WeightFormat& format, const uint8_t* in) {
    if (format.f16_scales()) {
        uint16_t h;
        std::memcpy(&h, in, 2);
        return half_to_float(h);
    }
    float value;
    std::memcpy(&value, in, 4);
    return value;
}

}  // namespace

void encode_quantized_vector(const NeuronVectorLayout& layout, const QuantizedMatrix& matrix,
                             const PackedCodes& packed, int64_t column, uint8_t* out) {
    const WeightFormat& f = layout.format;
    require(layout.coding == VectorCoding::Quantized, "encode_quantized_vector: an F16 layout");
    WeightFormat column_format = matrix.params.format();
    column_format.n = 1;
    require(column_format == f, "neuron vector: matrix format ", matrix.params.name(), " is not the layout's ",
            f.name());
    require(column >= 0 && column < matrix.params.n, "neuron vector: column ", column, " out of range");
    require(packed.bits == f.bits && packed.k == f.k && packed.n == matrix.params.n && !packed.mixed(),
            "neuron vector: the packed codes are not the matrix's");
    const int64_t n = matrix.params.n, groups = f.num_groups();
    // A column's words are the same at any panel width: copy them from the panel that holds it.
    const uint32_t* panel = packed.panel(column);
    const int64_t in_panel = column % packed.panel_columns;
    for (int64_t w = 0; w < layout.code_words(); ++w) {
        const uint32_t word = panel[w * packed.panel_columns + in_panel];
        std::memcpy(out + 4 * w, &word, 4);
    }
    uint8_t* scales = out + layout.scales_offset();
    uint8_t* zeros = out + layout.zeros_offset();
    const int64_t sb = f.scale_bytes(), zb = f.zero_point_bytes();
    for (int64_t g = 0; g < groups; ++g) {
        store_scale(f, matrix.params.scales[size_t(g * n + column)], scales + g * sb);
        if (f.symmetric) continue;
        if (f.float_offsets)
            store_scale(f, matrix.params.offsets[size_t(g * n + column)], zeros + g * zb);
        else {
            const uint16_t zero = matrix.params.zeros[size_t(g * n + column)];
            require(zero <= 255, "neuron vector: zero point ", zero, " does not fit a byte");
            zeros[g] = uint8_t(zero);
        }
    }
}

void encode_f16_vector(const NeuronVectorLayout& layout, const float* values, int64_t stride, uint8_t* out) {
    require(layout.coding == VectorCoding::F16, "encode_f16_vector: a quantized layout");
    for (int64_t r = 0; r < layout.d_model(); ++r) {
        const uint16_t h = float_to_half(values[r * stride]);
        std::memcpy(out + 2 * r, &h, 2);
    }
}

VectorMatrix vectors_as_matrix(const NeuronVectorLayout& layout, const uint8_t* vectors, int64_t n, int64_t stride) {
    require(layout.coding == VectorCoding::Quantized, "neuron vectors: fp16 vectors are not a quantized matrix");
    require(n >= 1 && stride >= layout.bytes(), "neuron vectors: ", n, " vectors ", stride, " bytes apart (each ",
            layout.bytes(), " bytes)");
    const WeightFormat& f = layout.format;
    VectorMatrix out;
    QuantParams& p = out.params;
    static_cast<WeightFormat&>(p) = f;
    p.n = n;
    const int64_t groups = p.num_groups(), words = layout.code_words();
    p.scales.resize(size_t(groups * n));
    if (f.float_offsets)
        p.offsets.resize(size_t(groups * n));
    else
        p.zeros.resize(size_t(groups * n));
    out.codes = unwritten_packed_codes(f.bits, f.k, n, 1);  // one column per panel: the vectors' own words
    for (int64_t c = 0; c < n; ++c) {
        const uint8_t* vector = vectors + c * stride;
        std::memcpy(out.codes.words.data() + c * words, vector, size_t(words) * 4);
        const uint8_t* scales = vector + layout.scales_offset();
        const uint8_t* zeros = vector + layout.zeros_offset();
        for (int64_t g = 0; g < groups; ++g) {
            const size_t at = size_t(g * n + c);
            p.scales[at] = load_scale(f, scales + g * f.scale_bytes());
            if (f.float_offsets) p.offsets[at] = load_scale(f, zeros + g * f.zero_point_bytes());
            else p.zeros[at] = f.symmetric ? uint16_t(1u << (f.bits - 1)) : zeros[g];
        }
    }
    return out;
}

uint8_t vector_code(const NeuronVectorLayout& layout, const uint8_t* vector, int64_t row) {
    const int bits = layout.format.bits;
    const int64_t block = row / PackedCodes::kBlockRows;
    uint32_t code = 0;
    for (const CodePlane& plane : code_planes(bits)) {
        const PlaneSlot slot = plane_slot(plane, int(row % PackedCodes::kBlockRows));
        uint32_t word;
        std::memcpy(&word, vector + 4 * (block * bits + slot.word), 4);
        code |= ((word >> slot.shift) & ((1u << plane.width) - 1u)) << plane.value_shift;
    }
    return uint8_t(code);
}

void dequantize_vector(const NeuronVectorLayout& layout, const uint8_t* vector, float* out) {
    const WeightFormat& f = layout.format;
    if (layout.coding == VectorCoding::F16) {
        for (int64_t r = 0; r < f.k; ++r) {
            uint16_t h;
            std::memcpy(&h, vector + 2 * r, 2);
            out[r] = half_to_float(h);
        }
        return;
    }
    const uint8_t* scales = vector + layout.scales_offset();
    const uint8_t* zeros = vector + layout.zeros_offset();
    for (int64_t r = 0; r < f.k; ++r) {
        const int64_t g = r / f.group_size;
        const float scale = load_scale(f, scales + g * f.scale_bytes());
        const float code = float(vector_code(layout, vector, r));
        if (f.float_offsets) {
            out[r] = scale * code + load_scale(f, zeros + g * f.zero_point_bytes());
        } else {
            const float zero = f.symmetric ? float(1 << (f.bits - 1)) : float(zeros[g]);
            out[r] = scale * (code - zero);
        }
    }
}

}  // namespace qjit
