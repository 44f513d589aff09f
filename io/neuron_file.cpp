#include "io/neuron_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/crc32.hpp"
#include "base/error.hpp"
#include "quant/quantize_rtn.hpp"

namespace qjit {

namespace {

constexpr char kMagic[8] = {'Q', 'J', 'I', 'T', 'N', 'E', 'U', 'R'};
constexpr uint32_t kVersion = 3;  // 3: records checksummed with CRC-32C; 1 and 2: CRC-32
constexpr int64_t kMaxFileBytes = int64_t(1) << 62;

const char* part_name(NeuronPart part) {
    switch (part) {
    case NeuronPart::Gate: return "gate";
    case NeuronPart::Up: return "up";
    case NeuronPart::Down: return "down";
    }
    return "unknown part";
}

// A part's place in part_list(), without building the list (record_offset is on the read path).
int part_index(const NeuronFileHeader& header, NeuronPart part) {
    if (header.activation == FfnActivation::SwiGlu && int(part) <= 2) return int(part);
    if (header.activation == FfnActivation::Relu && (part == NeuronPart::Up || part == NeuronPart::Down))
        return int(part) - 1;
    fail(QJIT_ERROR_INVALID_ARGUMENT, "neuron file: a ", header.activation == FfnActivation::Relu ? "Relu" : "SwiGlu",
         " FFN has no ", part_name(part), " part");
}

void store_u32(uint8_t* out, uint32_t value) {
    for (int i = 0; i < 4; ++i) out[i] = uint8_t(value >> (8 * i));
}
uint32_t load_u32(const uint8_t* in) {
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) value |= uint32_t(in[i]) << (8 * i);
    return value;
}

// The header's fixed part, field by field, little-endian.
class HeaderWriter {
public:
    void u8(uint8_t value) { bytes.push_back(value); }
    void u32(uint32_t value) {
        for (int i = 0; i < 4; ++i) bytes.push_back(uint8_t(value >> (8 * i)));
    }
    void i64(int64_t value) {
        for (int i = 0; i < 8; ++i) bytes.push_back(uint8_t(uint64_t(value) >> (8 * i)));
    }
    std::vector<uint8_t> bytes;
};

class HeaderReader {
public:
    explicit HeaderReader(const uint8_t* bytes) : at_(bytes) {}
    uint8_t u8() { return *at_++; }
    uint32_t u32() {
        const uint32_t value = load_u32(at_);
        at_ += 4;
        return value;
    }
    int64_t i64() {
        uint64_t value = 0;
        for (int i = 0; i < 8; ++i) value |= uint64_t(at_[i]) << (8 * i);
        at_ += 8;
        return int64_t(value);
    }

private:
    const uint8_t* at_;
};

// magic, version, layers, d_model, d_ff, activation, has_bias, bundled, alignment, coding, bits,
// group_size, symmetric, float_offsets, scale_type, (version 2:) gate_apart, has_sparsity, then the
// CRC-32 of all of it.
constexpr size_t kVersion1FieldBytes = 8 + 4 + 3 * 8 + 3 + 8 + 1 + 4 + 8 + 3;
constexpr size_t kFieldBytes = kVersion1FieldBytes + 2;

// A byte that must be 0 or 1.
bool parse_flag(uint8_t value, const char* field) {
    if (value > 1) fail(QJIT_ERROR_CORRUPT_DATA, "neuron file header: ", field, " is ", int(value), "; expected 0 or 1");
    return value == 1;
}

}  // namespace

std::vector<NeuronPart> NeuronFileHeader::part_list() const {
    if (activation == FfnActivation::SwiGlu) return {NeuronPart::Gate, NeuronPart::Up, NeuronPart::Down};
    return {NeuronPart::Up, NeuronPart::Down};
}

std::vector<NeuronPart> NeuronFileHeader::record_first_parts() const {
    if (!bundled) return part_list();
    if (gate_apart) return {NeuronPart::Gate, NeuronPart::Up};
    return {part_list().front()};
}

NeuronPart NeuronFileHeader::record_first_part(NeuronPart part) const {
    const int index = part_index(*this, part);  // checks the part
    if (!bundled) return part;
    if (gate_apart) return part == NeuronPart::Gate ? NeuronPart::Gate : NeuronPart::Up;
    return index == 0 ? part : part_list().front();
}

int NeuronFileHeader::parts_in_record(NeuronPart first_part) const {
    part_index(*this, first_part);
    if (!bundled) return 1;
    if (gate_apart) return first_part == NeuronPart::Gate ? 1 : 2;
    return parts();
}

int64_t NeuronFileHeader::payload_bytes(NeuronPart first_part) const {
    return parts_in_record(first_part) * vector.bytes() + (has_bias ? 4 : 0) + 4;
}

int64_t NeuronFileHeader::record_bytes(NeuronPart first_part) const {
    return (payload_bytes(first_part) + alignment - 1) / alignment * alignment;
}

int64_t NeuronFileHeader::layer_bytes() const {
    int64_t bytes = 0;
    for (NeuronPart first : record_first_parts()) bytes += d_ff * record_bytes(first);
    return bytes;
}

int64_t NeuronFileHeader::sparsity_bytes() const {
    if (!has_sparsity) return 0;
    const int64_t payload = 4 + layers * 4 + layers * d_ff * 4 + 4;
    return (payload + alignment - 1) / alignment * alignment;
}

int64_t NeuronFileHeader::record_offset(int64_t layer, int64_t neuron, NeuronPart part) const {
    require(layer >= 0 && layer < layers && neuron >= 0 && neuron < d_ff, "neuron file: layer ", layer, " neuron ",
            neuron, " is outside the file's ", layers, " x ", d_ff);
    const NeuronPart first = record_first_part(part);
    int64_t region = 0;  // the regions of the records before this one's kind
    for (NeuronPart kind : record_first_parts()) {
        if (kind == first) break;
        region += d_ff * record_bytes(kind);
    }
    return data_offset() + layer * layer_bytes() + region + neuron * record_bytes(first);
}

int64_t NeuronFileHeader::vector_offset_in_record(NeuronPart part) const {
    return (part_index(*this, part) - part_index(*this, record_first_part(part))) * vector.bytes();
}

int64_t NeuronFileHeader::bias_offset_in_record() const {
    require(has_bias, "neuron file: the file has no biases");
    return parts_per_record() * vector.bytes();
}

uint32_t NeuronFileHeader::record_crc(const uint8_t* bytes, size_t size, uint32_t seed) const {
    return crc32c_records ? crc32c(bytes, size, seed) : crc32(bytes, size, seed);
}

uint32_t NeuronFileHeader::record_seed(int64_t layer, int64_t neuron, NeuronPart first_part) const {
    uint8_t key[24];
    const int64_t values[3] = {layer, neuron, int64_t(first_part)};
    for (int v = 0; v < 3; ++v)
        for (int i = 0; i < 8; ++i) key[8 * v + i] = uint8_t(uint64_t(values[v]) >> (8 * i));
    return crc32(key, sizeof key);
}

void validate(const NeuronFileHeader& header) {
    require(header.layers >= 1 && header.layers < kMaxFileBytes, "neuron file header: layers is ", header.layers,
            "; expected at least 1");
    require(header.d_model >= 1 && header.d_model < kMaxDimension, "neuron file header: d_model is ", header.d_model,
            "; expected 1 .. 2^31 - 1");
    require(header.d_ff >= 1 && header.d_ff < kMaxDimension, "neuron file header: d_ff is ", header.d_ff,
            "; expected 1 .. 2^31 - 1");
    require(header.activation == FfnActivation::Relu || header.activation == FfnActivation::SwiGlu,
            "neuron file header: activation is ", int(header.activation), "; expected Relu (0) or SwiGlu (1)");
    const int64_t a = header.alignment;
    require(a >= 512 && a <= (int64_t(1) << 20) && (a & (a - 1)) == 0, "neuron file header: alignment is ", a,
            "; expected a power of two in 512 .. 2^20");
    require(!header.has_bias || header.activation == FfnActivation::Relu,
            "neuron file header: has_bias is set for a SwiGlu FFN; biases are Relu only");
    require(!header.gate_apart || (header.bundled && header.activation == FfnActivation::SwiGlu),
            "neuron file header: gate_apart is set for a ", header.bundled ? "Relu" : "split",
            " file; it needs a bundled SwiGlu one");
    require(!header.has_sparsity || header.activation == FfnActivation::SwiGlu,
            "neuron file header: has_sparsity is set for a Relu FFN; the calibrated sparsity is SwiGlu's");

    const NeuronVectorLayout& vector = header.vector;
    require(vector.coding == VectorCoding::Quantized || vector.coding == VectorCoding::F16,
            "neuron file header: vector coding is ", int(vector.coding), "; expected Quantized (0) or F16 (1)");
    require(vector.d_model() == header.d_model, "neuron file header: the vector layout's d_model is ",
            vector.d_model(), ", the header's ", header.d_model);
    if (vector.coding == VectorCoding::F16) {
        require(vector.format == f16_vector_layout(header.d_model).format,
                "neuron file header: an F16 vector layout has format fields set; make it with f16_vector_layout");
    } else {
        NeuronVectorLayout expected;
        try {
            expected = quantized_vector_layout(vector.format, header.d_model);
        } catch (const Error& e) {
            fail(e.status(), "neuron file header: vector format: ", e.what());
        }
        require(expected.format == vector.format, "neuron file header: the vector format ", vector.format.name(),
                " is not one vector of d_model values (n is ", vector.format.n, ")");
    }

    // Each product is checked by division first: a record is below 2^38 bytes, but a layer of
    // them, or the layers, could overflow.
    require(!header.has_sparsity || header.layers < (int64_t(1) << 56) / header.d_ff,
            "neuron file header: a sparsity section for ", header.layers, " layers of ", header.d_ff,
            " neurons would be 2^58 bytes or more");
    const int64_t record = header.record_bytes(), limit = kMaxFileBytes - header.data_offset();
    require(header.records_per_layer() < limit / record && header.layers < limit / header.layer_bytes(),
            "neuron file header: the file would be 2^62 bytes or more (", header.layers, " layers of ", header.d_ff,
            " neurons, records of ", record, " bytes)");
}

std::vector<uint8_t> encode_neuron_file_header(const NeuronFileHeader& header) {
    validate(header);
    const WeightFormat& f = header.vector.format;
    HeaderWriter out;
    for (char c : kMagic) out.u8(uint8_t(c));
    out.u32(header.crc32c_records ? kVersion : 2);
    out.i64(header.layers);
    out.i64(header.d_model);
    out.i64(header.d_ff);
    out.u8(uint8_t(header.activation));
    out.u8(header.has_bias);
    out.u8(header.bundled);
    out.i64(header.alignment);
    out.u8(uint8_t(header.vector.coding));
    out.u32(uint32_t(f.bits));
    out.i64(f.group_size);
    out.u8(f.symmetric);
    out.u8(f.float_offsets);
    out.u8(uint8_t(f.scale_type));
    out.u8(header.gate_apart);
    out.u8(header.has_sparsity);
    out.u32(crc32(out.bytes.data(), out.bytes.size()));
    out.bytes.resize(size_t(header.alignment), 0);
    return out.bytes;
}

NeuronFileHeader parse_neuron_file_header(const uint8_t* bytes, size_t size) {
    if (size < sizeof kMagic + 4)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file header: truncated (", size, " bytes)");
    if (std::memcmp(bytes, kMagic, sizeof kMagic) != 0)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file header: bad magic (not a neuron file)");
    HeaderReader in(bytes + sizeof kMagic);
    const uint32_t version = in.u32();
    if (version < 1 || version > kVersion)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file header: version ", version, " is not supported (expected 1 to ",
             kVersion, ")");
    const size_t field_bytes = version == 1 ? kVersion1FieldBytes : kFieldBytes;
    if (size < field_bytes + 4)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file header: truncated (", size, " bytes; at least ", field_bytes + 4,
             " expected)");
    const uint32_t stored = load_u32(bytes + field_bytes), computed = crc32(bytes, field_bytes);
    if (stored != computed)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file header: CRC mismatch (stored ", stored, ", computed ", computed,
             ")");

    NeuronFileHeader header;
    header.crc32c_records = version >= 3;
    header.layers = in.i64();
    header.d_model = in.i64();
    header.d_ff = in.i64();
    const uint8_t activation = in.u8();
    if (activation > 1)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file header: activation is ", int(activation),
             "; expected Relu (0) or SwiGlu (1)");
    header.activation = FfnActivation(activation);
    header.has_bias = parse_flag(in.u8(), "has_bias");
    header.bundled = parse_flag(in.u8(), "bundled");
    header.alignment = in.i64();
    const uint8_t coding = in.u8();
    if (coding > 1)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file header: vector coding is ", int(coding),
             "; expected Quantized (0) or F16 (1)");
    const uint32_t bits = in.u32();
    const int64_t group_size = in.i64();
    const bool symmetric = parse_flag(in.u8(), "symmetric");
    const bool float_offsets = parse_flag(in.u8(), "float_offsets");
    const uint8_t scale_type = in.u8();
    if (scale_type != uint8_t(ScaleType::F16) && scale_type != uint8_t(ScaleType::F32))
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file header: scale_type is ", int(scale_type),
             "; expected F16 (0) or F32 (1)");
    if (version >= 2) {
        header.gate_apart = parse_flag(in.u8(), "gate_apart");
        header.has_sparsity = parse_flag(in.u8(), "has_sparsity");
    }

    if (bits > 8) fail(QJIT_ERROR_CORRUPT_DATA, "neuron file header: bits is ", bits, "; supported: 2, 3, 4, 8");
    header.vector.coding = VectorCoding(coding);
    WeightFormat& f = header.vector.format;
    f.k = header.d_model;
    f.n = 1;
    if (header.vector.coding == VectorCoding::F16) {
        // An F16 layout keeps the quantized fields at their defaults (f16_vector_layout).
        const WeightFormat defaults;
        if (int(bits) != defaults.bits || group_size != defaults.group_size || symmetric != defaults.symmetric ||
            float_offsets != defaults.float_offsets || ScaleType(scale_type) != defaults.scale_type)
            fail(QJIT_ERROR_CORRUPT_DATA, "neuron file header: an F16 file has quantized vector fields set");
    } else {
        f.bits = int(bits);
        f.group_size = group_size;
        f.symmetric = symmetric;
        f.float_offsets = float_offsets;
        f.scale_type = ScaleType(scale_type);
    }
    try {
        validate(header);
    } catch (const Error& e) {
        if (e.status() != QJIT_ERROR_INVALID_ARGUMENT) throw;
        fail(QJIT_ERROR_CORRUPT_DATA, e.what());
    }
    return header;
}

namespace {

void require_sparsity_values(bool ok, qjit_status status, const char* what, int64_t index, float value) {
    if (!ok)
        fail(status, "neuron file sparsity: ", what, " ", index, " is ", value, "; expected a finite value >= 0");
}

}  // namespace

std::vector<uint8_t> encode_ffn_sparsity(const NeuronFileHeader& header, const FfnSparsity& sparsity) {
    validate(header);
    require(header.has_sparsity, "neuron file sparsity: the header has no sparsity section");
    require(int64_t(sparsity.thresholds.size()) == header.layers, "neuron file sparsity: ",
            sparsity.thresholds.size(), " thresholds for ", header.layers, " layers");
    require(int64_t(sparsity.neuron_scales.size()) == header.layers * header.d_ff, "neuron file sparsity: ",
            sparsity.neuron_scales.size(), " neuron scales for ", header.layers, " x ", header.d_ff, " neurons");
    require(std::isfinite(sparsity.target) && sparsity.target >= 0 && sparsity.target < 1,
            "neuron file sparsity: target ", sparsity.target, " outside [0, 1)");
    std::vector<uint8_t> bytes(size_t(header.sparsity_bytes()), 0);
    uint8_t* at = bytes.data();
    const auto put = [&](float value) {
        std::memcpy(at, &value, 4);
        at += 4;
    };
    put(sparsity.target);
    for (size_t l = 0; l < sparsity.thresholds.size(); ++l) {
        const float t = sparsity.thresholds[l];
        require_sparsity_values(std::isfinite(t) && t >= 0, QJIT_ERROR_INVALID_ARGUMENT, "threshold", int64_t(l), t);
        put(t);
    }
    for (size_t i = 0; i < sparsity.neuron_scales.size(); ++i) {
        const float c = sparsity.neuron_scales[i];
        require_sparsity_values(std::isfinite(c) && c >= 0, QJIT_ERROR_INVALID_ARGUMENT, "neuron scale", int64_t(i), c);
        put(c);
    }
    store_u32(at, crc32(bytes.data(), size_t(at - bytes.data())));
    return bytes;
}

FfnSparsity parse_ffn_sparsity(const NeuronFileHeader& header, const uint8_t* bytes, size_t size) {
    require(header.has_sparsity, "neuron file sparsity: the header has no sparsity section");
    const size_t values = size_t(1 + header.layers + header.layers * header.d_ff), crc_at = 4 * values;
    if (size < crc_at + 4)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file sparsity: truncated (", size, " bytes; ", crc_at + 4, " expected)");
    const uint32_t stored = load_u32(bytes + crc_at), computed = crc32(bytes, crc_at);
    if (stored != computed)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file sparsity: CRC mismatch (stored ", stored, ", computed ", computed,
             ")");
    FfnSparsity sparsity;
    const auto get = [&](size_t index) {
        float value;
        std::memcpy(&value, bytes + 4 * index, 4);
        return value;
    };
    sparsity.target = get(0);
    if (!(sparsity.target >= 0 && sparsity.target < 1))
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file sparsity: target ", sparsity.target, " outside [0, 1)");
    sparsity.thresholds.resize(size_t(header.layers));
    sparsity.neuron_scales.resize(size_t(header.layers * header.d_ff));
    for (size_t l = 0; l < sparsity.thresholds.size(); ++l) {
        const float t = sparsity.thresholds[l] = get(1 + l);
        require_sparsity_values(std::isfinite(t) && t >= 0, QJIT_ERROR_CORRUPT_DATA, "threshold", int64_t(l), t);
    }
    for (size_t i = 0; i < sparsity.neuron_scales.size(); ++i) {
        const float c = sparsity.neuron_scales[i] = get(1 + sparsity.thresholds.size() + i);
        require_sparsity_values(std::isfinite(c) && c >= 0, QJIT_ERROR_CORRUPT_DATA, "neuron scale", int64_t(i), c);
    }
    return sparsity;
}

void check_record(const NeuronFileHeader& header, int64_t layer, int64_t neuron, NeuronPart first_part,
                  const uint8_t* record) {
    const int64_t crc_at = header.payload_bytes(first_part) - 4;
    const uint32_t stored = load_u32(record + crc_at);
    const uint32_t computed = header.record_crc(record, size_t(crc_at), header.record_seed(layer, neuron, first_part));
    if (stored != computed)
        fail(QJIT_ERROR_CORRUPT_DATA, "neuron file: record of layer ", layer, " neuron ", neuron, " (part ",
             part_name(first_part), ") is damaged (CRC stored ", stored, ", computed ", computed, ")");
}

namespace {

// down [d_ff][d_model] as [d_model][d_ff].
std::vector<float> transposed(const float* down, int64_t d_ff, int64_t d_model) {
    std::vector<float> t(size_t(d_model * d_ff));
    for (int64_t i = 0; i < d_ff; ++i)
        for (int64_t r = 0; r < d_model; ++r) t[size_t(r * d_ff + i)] = down[i * d_model + r];
    return t;
}

}  // namespace

FfnLayerWeights quantize_ffn_layer(const NeuronFileHeader& header, const float* up, const float* gate,
                                   const float* down, const float* bias) {
    validate(header);
    const bool gated = header.activation == FfnActivation::SwiGlu;
    require(up && down && (gate || !gated), "quantize_ffn_layer: a projection is missing");
    require(bias || !header.has_bias, "quantize_ffn_layer: the header has biases and none are given");
    const int64_t d_model = header.d_model, d_ff = header.d_ff, count = d_model * d_ff;
    FfnLayerWeights weights;
    std::vector<float> down_t = transposed(down, d_ff, d_model);
    if (header.vector.coding == VectorCoding::F16) {
        weights.up_f32.assign(up, up + count);
        if (gated) weights.gate_f32.assign(gate, gate + count);
        weights.down_t_f32 = std::move(down_t);
    } else {
        const WeightFormat& f = header.vector.format;
        weights.up = quantize_rtn(f, d_model, d_ff, up);
        if (gated) weights.gate = quantize_rtn(f, d_model, d_ff, gate);
        weights.down_t = quantize_rtn(f, d_model, d_ff, down_t.data());
    }
    if (header.has_bias) weights.bias.assign(bias, bias + d_ff);
    return weights;
}

struct NeuronFileWriter::State {
    std::string path, temporary;
    NeuronFileHeader header;
    int fd = -1;
    int64_t layers_written = 0;
    bool sparsity_written = false;
    bool finished = false;

    void write_at(const uint8_t* bytes, int64_t size, int64_t offset) {
        while (size > 0) {
            const ssize_t n = pwrite(fd, bytes, size_t(size), off_t(offset));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) fail(QJIT_ERROR_IO, "cannot write '", temporary, "': ", std::strerror(n < 0 ? errno : EIO));
            bytes += n;
            size -= n;
            offset += n;
        }
    }
};

NeuronFileWriter::NeuronFileWriter(const std::string& path, const NeuronFileHeader& header) : state_(nullptr) {
    const std::vector<uint8_t> bytes = encode_neuron_file_header(header);
    std::unique_ptr<State> state(new State{path, concat(path, ".tmp-", getpid()), header});
    state->fd = open(state->temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (state->fd < 0) fail(QJIT_ERROR_IO, "cannot create '", state->temporary, "': ", std::strerror(errno));
    try {
        state->write_at(bytes.data(), int64_t(bytes.size()), 0);
    } catch (...) {
        close(state->fd);
        unlink(state->temporary.c_str());
        throw;
    }
    state_ = state.release();
}

NeuronFileWriter::~NeuronFileWriter() {
    if (!state_) return;
    if (state_->fd >= 0) close(state_->fd);
    if (!state_->finished) unlink(state_->temporary.c_str());
    delete state_;
    state_ = nullptr;
}

namespace {

void check_matrix(const NeuronFileHeader& header, int64_t layer, const char* name, const QuantizedMatrix& matrix) {
    const QuantParams& p = matrix.params;
    require(p.k == header.d_model && p.n == header.d_ff, "neuron file writer: layer ", layer, " ", name, " is ", p.k,
            " x ", p.n, "; the file's d_model x d_ff is ", header.d_model, " x ", header.d_ff);
    WeightFormat column = p.format();
    column.n = 1;
    require(column == header.vector.format, "neuron file writer: layer ", layer, " ", name, " has format ", p.name(),
            "; the file's vectors are ", header.vector.format.name());
    validate(matrix);
}

void check_dense(const NeuronFileHeader& header, int64_t layer, const char* name, const std::vector<float>& values) {
    require(int64_t(values.size()) == header.d_model * header.d_ff, "neuron file writer: layer ", layer, " ", name,
            "_f32 holds ", values.size(), " values; the file's d_model x d_ff is ", header.d_model, " x ",
            header.d_ff);
}

}  // namespace

void NeuronFileWriter::add_layer(const FfnLayerWeights& weights) {
    State& s = *state_;
    const NeuronFileHeader& h = s.header;
    require(!s.finished, "neuron file writer: the file is finished");
    require(s.layers_written < h.layers, "neuron file writer: all ", h.layers, " layers are written already");
    const int64_t layer = s.layers_written;
    const std::vector<NeuronPart> parts = h.part_list();
    const bool quantized = h.vector.coding == VectorCoding::Quantized;

    // The matrix (or dense values) of each part, in part order.
    std::vector<const QuantizedMatrix*> matrices;
    std::vector<const std::vector<float>*> dense;
    for (NeuronPart part : parts) {
        const char* name = part_name(part);
        if (quantized) {
            const QuantizedMatrix& m =
                part == NeuronPart::Gate ? weights.gate : part == NeuronPart::Up ? weights.up : weights.down_t;
            check_matrix(h, layer, part == NeuronPart::Down ? "down_t" : name, m);
            matrices.push_back(&m);
        } else {
            const std::vector<float>& v = part == NeuronPart::Gate ? weights.gate_f32
                                          : part == NeuronPart::Up ? weights.up_f32
                                                                   : weights.down_t_f32;
            check_dense(h, layer, part == NeuronPart::Down ? "down_t" : name, v);
            dense.push_back(&v);
        }
    }
    if (h.has_bias)
        require(int64_t(weights.bias.size()) == h.d_ff, "neuron file writer: layer ", layer, " bias holds ",
                weights.bias.size(), " values; expected d_ff = ", h.d_ff);
    else
        require(weights.bias.empty(), "neuron file writer: layer ", layer, " has biases; the file has none");

    std::vector<PackedCodes> packed;
    for (const QuantizedMatrix* m : matrices)
        packed.push_back(pack_codes(m->codes.data(), m->params.bits, m->params.k, m->params.n, 8));

    const int64_t vector_bytes = h.vector.bytes(), layer_start = h.data_offset() + layer * h.layer_bytes();
    std::vector<uint8_t> buffer(size_t(h.layer_bytes()), 0);
    for (int64_t neuron = 0; neuron < h.d_ff; ++neuron) {
        for (size_t first = 0; first < parts.size(); first += size_t(h.parts_in_record(parts[first]))) {
            uint8_t* record = buffer.data() + (h.record_offset(layer, neuron, parts[first]) - layer_start);
            for (int i = 0; i < h.parts_in_record(parts[first]); ++i) {
                const size_t p = first + size_t(i);
                uint8_t* out = record + i * vector_bytes;
                if (quantized)
                    encode_quantized_vector(h.vector, *matrices[p], packed[p], neuron, out);
                else
                    encode_f16_vector(h.vector, dense[p]->data() + neuron, h.d_ff, out);
            }
            // Every record of a neuron carries its bias, so a split file's down record has it too.
            if (h.has_bias) std::memcpy(record + h.bias_offset_in_record(), &weights.bias[size_t(neuron)], 4);
            const int64_t crc_at = h.payload_bytes(parts[first]) - 4;
            store_u32(record + crc_at, h.record_crc(record, size_t(crc_at), h.record_seed(layer, neuron, parts[first])));
        }
    }
    s.write_at(buffer.data(), int64_t(buffer.size()), layer_start);
    ++s.layers_written;
}

void NeuronFileWriter::set_sparsity(const FfnSparsity& sparsity) {
    State& s = *state_;
    require(!s.finished, "neuron file writer: the file is finished");
    const std::vector<uint8_t> bytes = encode_ffn_sparsity(s.header, sparsity);  // checks it
    s.write_at(bytes.data(), int64_t(bytes.size()), s.header.alignment);
    s.sparsity_written = true;
}

void NeuronFileWriter::finish() {
    State& s = *state_;
    require(!s.finished, "neuron file writer: finish() ran already");
    require(s.layers_written == s.header.layers, "neuron file writer: finish() after ", s.layers_written, " of ",
            s.header.layers, " layers");
    require(s.sparsity_written || !s.header.has_sparsity,
            "neuron file writer: finish() before set_sparsity; the header has a sparsity section");
    if (fsync(s.fd) != 0) fail(QJIT_ERROR_IO, "cannot write '", s.temporary, "': ", std::strerror(errno));
    const int fd = s.fd;
    s.fd = -1;
    if (close(fd) != 0) fail(QJIT_ERROR_IO, "cannot write '", s.temporary, "': ", std::strerror(errno));
    if (std::rename(s.temporary.c_str(), s.path.c_str()) != 0)
        fail(QJIT_ERROR_IO, "cannot rename '", s.temporary, "' to '", s.path, "': ", std::strerror(errno));
    s.finished = true;
}

}  // namespace qjit
