// Neuron files: the FFN layers of a model stored neuron by neuron, for FFNs too large for memory
// that load only the neurons a token activates (runtime/flash/). Each record is aligned to the
// storage block size so it is read directly (O_DIRECT) in one request.
//
// Three layouts of the same data:
//   bundled     one record per neuron holding all its parts (gate, up, down;
//               format/neuron_record.hpp): one read per neuron ("row-column bundling")
//   split       one record per neuron and part, the parts in separate regions (part-major, as the
//               matrices lie in a checkpoint): one read per neuron and part
//   gate apart  (SwiGlu) the gate vectors in a region of their own, up and down bundled: for an FFN
//               that keeps every gate resident and reads up and down only for the neurons whose
//               gate activation passes a threshold (runtime/flash/ffn_sparsity.hpp)
//
// File layout (little-endian):
//   header    `alignment` bytes: magic "QJITNEUR", version (u32, 3), the fields of
//             NeuronFileHeader: layers, d_model, d_ff (i64), activation, has_bias, bundled (u8),
//             alignment (i64), the vector layout's coding (u8), bits (u32), group_size (i64),
//             symmetric, float_offsets, scale_type (u8; an F16 layout keeps their defaults),
//             gate_apart, has_sparsity (u8); the CRC-32 of all bytes before it (u32); zero padding.
//             Versions 1 (no gate_apart, no has_sparsity) and 2 (records checksummed with CRC-32)
//             are read too.
//   sparsity  when has_sparsity, `sparsity_bytes()`: the calibrated target (f32), each layer's
//             threshold (f32), each layer's d_ff neuron scales (f32), the CRC-32 of them; zero
//             padding to alignment (FfnSparsity)
//   layers    layer after layer, each `layer_bytes()`: for each kind of record in
//             record_first_parts() order, d_ff records
//   record    its vectors in part order, then the first projection's bias (fp32, when the file has
//             biases; every record of the file has the slot, and a split file writes the neuron's
//             bias in each of its records), then the CRC-32C (hardware-accelerated; CRC-32 before
//             version 3) of everything before it in the record, seeded with record_seed(); zero
//             padding to record_bytes
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/neuron_record.hpp"
#include "format/quantized_matrix.hpp"

namespace qjit {

enum class FfnActivation : uint8_t {
    Relu,    // a = max(0, x . up + bias)                 (OPT; parts: up, down)
    SwiGlu,  // a = silu(x . gate) * (x . up)             (Llama; parts: gate, up, down)
};

struct NeuronFileHeader {
    int64_t layers = 0;
    int64_t d_model = 0;
    int64_t d_ff = 0;
    FfnActivation activation = FfnActivation::Relu;
    bool has_bias = false;  // Relu only: a bias per neuron on the up projection
    bool bundled = true;
    bool gate_apart = false;  // bundled SwiGlu only: the gates in records of their own
    bool has_sparsity = false;  // a sparsity section (FfnSparsity) follows the header
    bool crc32c_records = true;  // records checksummed with CRC-32C (version 3), else CRC-32 (1 and 2)
    int64_t alignment = 4096;  // record alignment and size granule: a power of two >= 512
    NeuronVectorLayout vector;

    int parts() const { return activation == FfnActivation::SwiGlu ? 3 : 2; }
    // The parts, in file order (Relu: Up, Down; SwiGlu: Gate, Up, Down).
    std::vector<NeuronPart> part_list() const;
    // A neuron's records, each named by its first part, in file order (bundled: one; split: one a
    // part; gate apart: Gate, then Up with Down).
    std::vector<NeuronPart> record_first_parts() const;
    NeuronPart record_first_part(NeuronPart part) const;  // of the record holding `part`
    int parts_in_record(NeuronPart first_part) const;
    // A record's vectors, bias slot and CRC, and that rounded up to alignment; without an argument,
    // the record holding the up vector (what a token reads per neuron).
    int64_t payload_bytes(NeuronPart first_part) const;
    int64_t record_bytes(NeuronPart first_part) const;
    int64_t payload_bytes() const { return payload_bytes(record_first_part(NeuronPart::Up)); }
    int64_t record_bytes() const { return record_bytes(record_first_part(NeuronPart::Up)); }
    int parts_per_record() const { return parts_in_record(record_first_part(NeuronPart::Up)); }
    int64_t records_per_layer() const { return d_ff * int64_t(record_first_parts().size()); }
    int64_t layer_bytes() const;
    int64_t sparsity_bytes() const;  // the sparsity section, padded (0 without one)
    int64_t data_offset() const { return alignment + sparsity_bytes(); }
    int64_t file_bytes() const { return data_offset() + layers * layer_bytes(); }
    // Where the record holding `part` of `neuron` in `layer` starts (bundled: the neuron's record,
    // whatever the part), and where the part's vector lies inside it.
    // Both throw an invalid-argument Error for a layer, neuron or part the file does not have.
    int64_t record_offset(int64_t layer, int64_t neuron, NeuronPart part) const;
    int64_t vector_offset_in_record(NeuronPart part) const;
    int64_t bias_offset_in_record() const;  // has_bias only
    // The CRC seed of a record: a record copied to the wrong place fails its check.
    uint32_t record_seed(int64_t layer, int64_t neuron, NeuronPart first_part) const;
    // A record's checksum of `size` bytes with `seed`: CRC-32C or CRC-32, by the file's version.
    uint32_t record_crc(const uint8_t* bytes, size_t size, uint32_t seed) const;
};

// Throws an invalid-argument Error naming the field for a header no file may have: layers >= 1,
// 1 <= d_model, d_ff < 2^31, alignment a power of two in [512, 2^20], biases only with Relu, the
// gate apart only in a bundled SwiGlu file, a vector layout for d_model (quantized_vector_layout's
// or f16_vector_layout's), a file below 2^62 bytes.
void validate(const NeuronFileHeader& header);

// The header's bytes (exactly header.alignment of them) and back. parse_neuron_file_header throws
// QJIT_ERROR_CORRUPT_DATA naming what is wrong (magic, version, CRC, a field out of range) for
// bytes that are not a valid header; it reads at most `size` bytes.
std::vector<uint8_t> encode_neuron_file_header(const NeuronFileHeader& header);
NeuronFileHeader parse_neuron_file_header(const uint8_t* bytes, size_t size);

// Training-free sparsity calibrated for a SwiGlu file (runtime/flash/ffn_sparsity.hpp): in layer
// l, neuron i takes part for a token only when |silu(x . gate_i)| * neuron_scales[l][i] exceeds
// thresholds[l]; `target` is the share of (token, neuron) pairs the calibration zeroed.
struct FfnSparsity {
    float target = 0;
    std::vector<float> thresholds;     // [layers], finite, >= 0
    std::vector<float> neuron_scales;  // [layers * d_ff], finite, >= 0
};
// The section's bytes (header.sparsity_bytes() of them) and back; parse throws
// QJIT_ERROR_CORRUPT_DATA naming what is wrong (CRC, a value out of range) and reads at most `size`.
std::vector<uint8_t> encode_ffn_sparsity(const NeuronFileHeader& header, const FfnSparsity& sparsity);
FfnSparsity parse_ffn_sparsity(const NeuronFileHeader& header, const uint8_t* bytes, size_t size);

// Checks a record read from the file: its CRC against record_seed. Throws QJIT_ERROR_CORRUPT_DATA
// naming the layer, neuron and part on a mismatch.
void check_record(const NeuronFileHeader& header, int64_t layer, int64_t neuron, NeuronPart first_part,
                  const uint8_t* record);

// One FFN layer's weights for the writer. Quantized files: up, gate (SwiGlu) and down_t are
// d_model x d_ff matrices in the header's vector format (down_t: the down projection transposed, so
// neuron i's row is its column i). F16 files: the same as fp32 in `*_f32`, [d_model][d_ff] row-major.
struct FfnLayerWeights {
    QuantizedMatrix up, gate, down_t;
    std::vector<float> up_f32, gate_f32, down_t_f32;
    std::vector<float> bias;  // [d_ff] when the header has biases
};

// Quantizes fp32 weights (up, gate: [d_model][d_ff]; down: [d_ff][d_model], as a checkpoint holds
// them) for a header: round to nearest in its vector format, or fp16 copies.
FfnLayerWeights quantize_ffn_layer(const NeuronFileHeader& header, const float* up, const float* gate,
                                   const float* down, const float* bias);

// Writes a neuron file layer by layer, to PATH.tmp-<pid> renamed over `path` by finish(): an
// existing file is replaced only once the new one is complete. Throws QJIT_ERROR_IO naming the path.
class NeuronFileWriter {
public:
    NeuronFileWriter(const std::string& path, const NeuronFileHeader& header);
    ~NeuronFileWriter();  // removes the temporary file unless finish() ran
    NeuronFileWriter(const NeuronFileWriter&) = delete;
    NeuronFileWriter& operator=(const NeuronFileWriter&) = delete;

    void add_layer(const FfnLayerWeights& weights);  // checks shapes and formats against the header
    // The sparsity section of a header with has_sparsity, at any time before finish().
    void set_sparsity(const FfnSparsity& sparsity);
    // After exactly header.layers layers (and the sparsity, when the header has it): flush, fsync,
    // rename.
    void finish();

private:
    struct State;
    State* state_;
};

}  // namespace qjit
